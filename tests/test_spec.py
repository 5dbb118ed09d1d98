import textwrap

import pytest
import yaml
from typer.testing import CliRunner

from detrun.cli import app
from detrun.errors import DetrunError
from detrun.spec.matrix import expected_keys, shards
from detrun.spec.model import load_spec, spec_from_dict
from tests.helpers import SMALL, small


@pytest.mark.parametrize("job", ["jobs/paged.yaml", "jobs/ragged.yaml", "jobs/nightly.yaml"])
def test_shipped_jobs_load_with_their_paged_flag(job):
    spec = load_spec(job)
    assert spec.bool_flags["SGLANG_FLASHINFER_USE_PAGED"] is (job != "jobs/ragged.yaml")
    assert len(spec.members("mixed_decode")) == 17


@pytest.mark.parametrize(
    "change, needle",
    [
        ({"env": {"SGLANG_FLASHINFER_USE_PAGED": "maybe"}}, "SGLANG_FLASHINFER_USE_PAGED='maybe' is not a boolean"),
        ({"env": {"CUDA_VISIBLE_DEVICES": "0"}}, "CUDA_VISIBLE_DEVICES is set by Ray"),
        ({"env": {"DETRUN_DIGEST_DEPTH": "0"}}, "DETRUN_DIGEST_DEPTH='0': expected a whole number >= 1"),
        ({"env": {"DETRUN_DIGEST_STREAM": "side"}}, "DETRUN_DIGEST_STREAM='side': expected low or same"),
        ({"env": {"DETRUN_DIGEST_GRAPHS": "auto"}}, "DETRUN_DIGEST_GRAPHS='auto': expected on or off"),
        ({"env": {"DETRUN_KERNEL_TRACER": "kineto"}}, "DETRUN_KERNEL_TRACER='kineto': expected auto, cupti or torch"),
        ({"env": {"DETRUN_DRAW_RING_MB": "1G"}},
         "DETRUN_DRAW_RING_MB='1G': expected a whole number of MiB (0: no ring)"),
        ({"colour": "blue"}, "colour: not a key of the job spec"),
        ({"modes": ["eager", "graph"]}, "modes.1"),
        ({"heads": {"qo": 6, "kv": 4}}, "multiple of kv heads"),
        ({"cases": {"x": ["nobody"]}}, "cases.x: unknown request 'nobody'"),
        ({"page_size": 5}, "shared prefix 'target_p' needs prefix_len a multiple of page_size"),
        ({"repeats": 0}, "repeats: Input should be greater than or equal to 1"),
        ({"requests": {**SMALL["requests"], "sibling": {"qo_len": 5, "prefix_len": 16, "prefix": "nobody"}}},
         "requests.sibling.prefix: 'nobody' names no request"),
        ({"limits": {"max_tokenz": 1}}, "limits.max_tokenz: not a key of limits; did you mean max_tokens?"),
        ({"requests": {"a": {"qo_len": 3, "qo": 1}}}, "requests.a.qo: not a key of requests.a (its keys: qo_len, "
                                                      "prefix_len, prefix, copies)"),
        ({"limits": {"max_rows": 0}}, "limits.max_rows: Input should be greater than or equal to 1"),
        ({"name": ".hidden"}, "name: String should match pattern"),
    ],
)
def test_bad_spec_names_field(change, needle):
    with pytest.raises(DetrunError) as err:
        spec_from_dict(small(**change), "jobs/bad.yaml")
    assert str(err.value).startswith("jobs/bad.yaml: ")
    assert needle in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("word, value", [("yes", True), ("Y", True), ("0", False), ("false", False)])
def test_env_flag_words_read_as_booleans(word, value):
    spec = spec_from_dict(small(env={"SGLANG_FLASHINFER_USE_PAGED": word}))
    assert spec.bool_flags["SGLANG_FLASHINFER_USE_PAGED"] is value


def test_yaml_bool_is_normalised():
    spec = spec_from_dict(small(env={"SGLANG_FLASHINFER_USE_PAGED": True}))
    assert spec.env["SGLANG_FLASHINFER_USE_PAGED"] == "1"


def test_bad_file_exits_2_with_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(textwrap.dedent("""
        name: x
        heads: {qo: 4, kv: 2}
        head_dim: 32
        env: {SGLANG_FLASHINFER_USE_PAGED: perhaps}
        requests: {a: {qo_len: 3}}
        cases: {c: [a]}
    """))
    result = CliRunner().invoke(app, ["submit", str(bad), "--runs-root", str(tmp_path / "runs")])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and str(bad) in lines[0] and "env: SGLANG_FLASHINFER_USE_PAGED=" in lines[0]
    assert not (tmp_path / "runs").exists()


def test_unparsable_and_missing_job_files_are_named(tmp_path):
    bad = tmp_path / "b.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(DetrunError, match="not valid YAML at line"):
        load_spec(bad)
    with pytest.raises(DetrunError, match="cannot read job spec"):
        load_spec(tmp_path / "none.yaml")


def test_repeats_split_into_shards_per_slot_and_every_key_is_expected_once():
    spec = spec_from_dict(small(repeats=3, repeats_per_task=2))
    got = shards(spec, 2)
    assert [(s.slot, s.repeats) for s in got] == [(0, (0, 1)), (0, (2,)), (1, (0, 1)), (1, (2,))]
    keys = expected_keys(spec, 2)
    # small(): 11 rows a pass (decode's 3 copies counted) x 2 modes x 3 repeats x 2 GPU slots
    assert len(keys) == len(set(keys)) == 11 * 2 * 3 * 2


def test_set_overrides_fields_and_names_a_bad_key_or_value(tmp_path):
    spec = load_spec("jobs/paged.yaml", ["name=paged-fa3", "flashinfer.backend=fa3", "repeats=3"])
    assert (spec.name, spec.flashinfer.backend, spec.repeats) == ("paged-fa3", "fa3", 3)
    with pytest.raises(DetrunError, match="expected KEY=VALUE"):
        load_spec("jobs/paged.yaml", ["flashinfer.backend"])
    with pytest.raises(DetrunError, match="flashinfer.backend: Input should be"):
        load_spec("jobs/paged.yaml", ["flashinfer.backend=fa9"])


@pytest.mark.parametrize("overrides, line", [
    (["nosuch.key=1"], "--set nosuch.key=1: nosuch: not a key of the job spec (its keys: name, backend, env, "),
    (["repeats=2", "flashinfer.backnd=fa3"], "--set flashinfer.backnd=fa3: flashinfer.backnd: not a key of "
                                             "flashinfer; did you mean backend?"),
    (["repeats=x"], "--set repeats=x: repeats: Input should be a valid integer"),
    (["cases.alone=[nobody]"], "--set cases.alone=[nobody]: cases.alone: unknown request 'nobody'"),  # whole-spec check
    (["repeats.x=1"], "--set repeats.x=1: repeats is a number in jobs/paged.yaml, not a mapping"),
])
def test_a_bad_set_is_blamed_on_the_set_not_the_file(overrides, line):
    with pytest.raises(DetrunError) as err:
        load_spec("jobs/paged.yaml", overrides)
    assert str(err.value).startswith(line), str(err.value)


@pytest.mark.parametrize("bad, sets", [({"colour": "blue"}, ["repeats=3"]),
                                       ({"cases": {"alone": ["nobody"]}}, ["cases.mixed=[short]"])])
def test_an_error_in_the_file_is_blamed_on_the_file_beside_a_good_set(tmp_path, bad, sets):
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(small(**bad)))
    with pytest.raises(DetrunError) as err:
        load_spec(job, sets)
    assert str(err.value).startswith(f"{job}: "), str(err.value)


def test_a_set_that_breaks_another_field_is_blamed(tmp_path):
    """The error is not where the --set wrote (tokens of a case, rows of the run): the first --set after
    which the spec no longer holds is named."""
    with pytest.raises(DetrunError, match=r"^--set requests.target.qo_len=1000000000: cases.alone: 1000000000 tok"):
        load_spec("jobs/paged.yaml", ["name=x", "requests.target.qo_len=1000000000", "seed=3"])
    with pytest.raises(DetrunError, match=r"^--set repeats=1000000000: 84000000000 rows on 1 GPU slot"):
        load_spec("jobs/paged.yaml", ["repeats=1000000000", "name=x"])


@pytest.mark.parametrize("text, said", [("", "the file is empty (a job spec is a mapping: name, heads, requests"),
                                        ("# only a comment\n", "the file is empty"),
                                        ("- a\n- b\n", "a job spec must be a mapping of fields, got a list")])
def test_an_empty_or_non_mapping_file_says_so(tmp_path, text, said):
    job = tmp_path / "job.yaml"
    job.write_text(text)
    for overrides in ([], ["repeats=2"]):
        with pytest.raises(DetrunError) as err:
            load_spec(job, overrides)
        assert str(err.value).startswith(f"{job}: {said}"), str(err.value)
