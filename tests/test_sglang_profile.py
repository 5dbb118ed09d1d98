"""SGLang profiles: the knobs each (version, deterministic_inference) sets, pinned here once; a job's own
knob or --set overrides the profile and is recorded; env flags the version does not read are refused;
rows record the effective knobs and compare's verdict line names the profile."""

import json
import re
import textwrap

import pyarrow.parquet as pq
import pytest
import yaml

from detrun.envflags import TaskFlags
from detrun.errors import DetrunError
from detrun.judge.compare import compare_runs
from detrun.judge.findings import judge
from detrun.spec.model import load_spec, spec_from_dict
from detrun.spec.sglang import PROFILES, citations, effective_knobs, profile_values
from detrun.spec.sglang_releases import RELEASES
from tests.helpers import cli_main, one_line, run_inline, small

CAPTURE = [1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120, 128, 136, 144, 152, 160,
           168, 176, 184, 192, 200, 208, 216, 224, 232, 240, 248, 256]
# SGLang's FlashInfer knobs, read from its code (docs/sglang-profiles.md has the lines): the one place the
# tests state them. 0.5.23 sets the same values as 0.5.10 (from other lines, and it reads the flag).
PINNED = {
    ("0.5.10", True): {
        "deterministic": True, "page_size": 1, "flashinfer.backend": "fa2", "flashinfer.ragged_backend": "auto",
        "flashinfer.kv_layout": "NHD", "flashinfer.workspace_mb": 2048, "flashinfer.fixed_split_size": 4096,
        "flashinfer.disable_split_kv": False, "flashinfer.decode.tensor_cores": True,
        "flashinfer.decode.fixed_split_size": 2048, "flashinfer.decode.disable_split_kv": False,
        "flashinfer.decode.graph_fixed_split_size": None, "flashinfer.decode.graph_disable_split_kv": True,
        "flashinfer.decode.capture_batch_sizes": CAPTURE,
    },
    ("0.5.10", False): {
        "deterministic": False, "page_size": 1, "flashinfer.backend": "fa2", "flashinfer.ragged_backend": "auto",
        "flashinfer.kv_layout": "NHD", "flashinfer.workspace_mb": 384, "flashinfer.fixed_split_size": None,
        "flashinfer.disable_split_kv": False, "flashinfer.decode.tensor_cores": None,
        "flashinfer.decode.fixed_split_size": None, "flashinfer.decode.disable_split_kv": False,
        "flashinfer.decode.graph_fixed_split_size": None, "flashinfer.decode.graph_disable_split_kv": False,
        "flashinfer.decode.capture_batch_sizes": CAPTURE,
    },
}
PINNED.update({(v, det): PINNED[("0.5.10", det)] for v in RELEASES for det in (True, False)})  # values unchanged
DET = {"version": "0.5.10", "deterministic_inference": True}
DEFAULT = {"version": "0.5.10", "deterministic_inference": False}


def knobs_of(spec):
    """The row's knobs of a task whose environment is the spec's env (as Ray's runtime_env sets it)."""
    return effective_knobs(spec, TaskFlags.parse(spec.env))


def job(profile, env=None, **overrides):
    """small() under a profile: no env flags, GQA group 4 (tensor-core decode by SGLang's rule)."""
    data = small(env=env or {}, sglang=profile, heads={"qo": 8, "kv": 2}, **overrides)
    del data["page_size"]  # the profile's
    return data


def test_the_table_holds_the_pinned_knobs_each_with_its_line():
    assert set(PROFILES) == set(PINNED)
    for key, knobs in PINNED.items():
        assert profile_values(*key) == knobs
        for path, cite in citations(*key).items():
            # 0.5.11 .. 0.5.22: values SGLang resolves outside FB/ENV say that their lines were not read
            unread = key[0] not in ("0.5.10", "0.5.23") and f"not read for {key[0]}" in cite
            assert unread or re.match(r"python/sglang/srt/[\w/]+\.py:\d+", cite), (path, cite)
    # 0.5.23 cites its own lines for every knob (the file moved or the line did), never 0.5.10's
    for det in (True, False):
        old, new = citations("0.5.10", det), citations("0.5.23", det)
        assert all(old[path] != new[path] for path in new), [p for p in new if old[p] == new[p]]


@pytest.mark.parametrize("key", sorted(PINNED))
def test_a_profile_fills_the_spec_and_every_row_records_its_knobs(key):
    spec = spec_from_dict(job(dict(zip(("version", "deterministic_inference"), key))))
    expected = {**PINNED[key], "flashinfer.decode.tensor_cores": True}  # None: SGLang's rule, GQA group 4
    assert knobs_of(spec) == {"profile": f"sglang-{key[0]}-{'deterministic' if key[1] else 'default'}",
                                     **expected, "overridden": []}
    assert spec.deterministic is key[1] and spec.page_size == 1 and spec.sglang_overridden == []


def test_a_job_knob_or_set_overrides_the_profile_and_is_recorded(tmp_path):
    spec = spec_from_dict(job(DET, flashinfer={"workspace_mb": 512, "fixed_split_size": 4096}))
    knobs = knobs_of(spec)
    assert knobs["flashinfer.workspace_mb"] == 512 and knobs["flashinfer.fixed_split_size"] == 4096
    assert knobs["overridden"] == spec.sglang_overridden == ["flashinfer.workspace_mb"]  # 4096 is the profile's
    path = tmp_path / "det.yaml"
    path.write_text(yaml.safe_dump(job(DET)))
    spec = load_spec(path, ["flashinfer.decode.graph_disable_split_kv=false", "page_size=16"])
    assert spec.flashinfer.decode.graph_disable_split_kv is False and spec.page_size == 16
    assert spec.sglang_overridden == ["flashinfer.decode.graph_disable_split_kv", "page_size"]
    assert spec.flashinfer.decode.fixed_split_size == 2048  # the rest is still the profile's


def test_a_stored_spec_validates_to_itself():
    spec = spec_from_dict(job(DET, flashinfer={"workspace_mb": 512}))
    stored = spec.model_dump(mode="json")
    again = spec_from_dict(stored)
    assert again == spec and again.sglang_overridden == ["flashinfer.workspace_mb"]
    stored["sglang_overridden"] = []  # a record, recomputed: it cannot hide an override
    assert spec_from_dict(stored).sglang_overridden == ["flashinfer.workspace_mb"]
    lean = spec.model_dump(mode="json", exclude_defaults=True)  # as shrink writes found.yaml
    assert "workspace_mb" not in lean["flashinfer"] and spec_from_dict(lean) == spec  # 512 is detrun's default


def test_env_flags_the_profile_reads_set_its_knobs():
    spec = spec_from_dict(job(DET, env={"SGLANG_FLASHINFER_DECODE_SPLIT_TILE_SIZE": 1024,
                                        "SGLANG_FLASHINFER_PREFILL_SPLIT_TILE_SIZE": "8192"}))
    assert (spec.flashinfer.decode.fixed_split_size, spec.flashinfer.fixed_split_size) == (1024, 8192)
    assert spec.sglang_overridden == []  # SGLang's own way to set them: not an override
    spec = spec_from_dict(job(DEFAULT, env={"SGLANG_FLASHINFER_WORKSPACE_SIZE": str(1 << 30),
                                            "SGLANG_FLASHINFER_USE_TENSOR_CORE": "false"}))
    assert spec.flashinfer.workspace_mb == 1024 and knobs_of(spec)["flashinfer.decode.tensor_cores"] is False


@pytest.mark.parametrize("profile, env, needle", [
    (DET, {"SGLANG_FLASHINFER_USE_PAGED": "1"}, "env.SGLANG_FLASHINFER_USE_PAGED: SGLang 0.5.10 does not read it"),
    (DEFAULT, {"SGLANG_FLASHINFER_USE_PAGED": "0"}, "env.SGLANG_FLASHINFER_USE_PAGED: SGLang 0.5.10 does not read"),
    (DEFAULT, {"SGLANG_FLASHINFER_DECODE_SPLIT_TILE_SIZE": "1024"}, "reads it only with deterministic inference"),
    (DET, {"SGLANG_FLASHINFER_WORKSPACE_SIZE": str(1 << 30)}, "no effect: deterministic inference sets it to 2 GiB"),
    (DET, {"SGLANG_FLASHINFER_USE_TENSOR_CORE": "false"}, "no effect: deterministic inference forces tensor-core"),
    (DET, {"SGLANG_ENABLE_DETERMINISTIC_INFERENCE": "1"}, "set sglang.deterministic_inference"),
    (DET, {"SGLANG_FLASHINFER_NEW_KNOB": "1"}, "env.SGLANG_FLASHINFER_NEW_KNOB: not a flag SGLang 0.5.10's"),
    (DET, {"SGLANG_FLASHINFER_PREFILL_SPLIT_TILE_SIZE": "4k"}, "'4k' is not a positive integer"),
    (DEFAULT, {"SGLANG_FLASHINFER_WORKSPACE_SIZE": "1000"}, "is not a positive multiple of 1048576"),
    ({"version": "0.5.9"}, {},
     f"sglang.version: unknown SGLang version '0.5.9' (known: 0.5.10, {', '.join(RELEASES)})"),
    ({"version": "0.5.10", "deterministic_inference": "yes"}, {}, "sglang.deterministic_inference: true or false"),
])
def test_refused_profiles_name_the_field_in_one_line(profile, env, needle):
    with pytest.raises(DetrunError) as err:
        spec_from_dict(job(profile, env=env), "jobs/x.yaml")
    assert str(err.value).startswith("jobs/x.yaml: ") and needle in str(err.value) and "\n" not in str(err.value)


def test_submit_refuses_an_unread_flag_with_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(textwrap.dedent("""
        name: x
        sglang: {version: "0.5.10", deterministic_inference: true}
        env: {SGLANG_FLASHINFER_USE_PAGED: "1"}
        heads: {qo: 4, kv: 2}
        head_dim: 32
        requests: {a: {qo_len: 3}}
        cases: {c: [a]}
    """))
    code, _, err = cli_main(capsys, "submit", str(bad), "--runs-root", str(tmp_path / "runs"))
    assert code == 2 and "env.SGLANG_FLASHINFER_USE_PAGED: SGLang 0.5.10 does not read it" in one_line(err)
    assert not (tmp_path / "runs").exists()


def test_the_tensor_core_flag_takes_only_the_words_sglang_reads():
    spec = spec_from_dict(small(env={"SGLANG_FLASHINFER_USE_TENSOR_CORE": True}))
    assert spec.env["SGLANG_FLASHINFER_USE_TENSOR_CORE"] == "true" and knobs_of(spec)[
        "flashinfer.decode.tensor_cores"] is True
    with pytest.raises(DetrunError, match="SGLANG_FLASHINFER_USE_TENSOR_CORE='1': SGLang reads only 'true'"):
        spec_from_dict(small(env={"SGLANG_FLASHINFER_USE_TENSOR_CORE": "1"}))


def test_a_sweep_under_a_profile_uses_its_page_size():
    data = job(DET, sweep=[{"kind": "prefix_lengths", "qo_len": 4, "base": 0, "lengths": [3]}])
    spec = spec_from_dict(data)
    assert spec.page_size == 1 and "pl3_alone" in spec.cases
    assert {n for n in spec.cases if n.startswith("pl")} >= {"pl0_alone", "pl1_alone", "pl2_alone"}


def test_a_job_without_a_profile_still_lists_its_knobs():
    knobs = knobs_of(spec_from_dict(small(flashinfer={"ragged_backend": None, "backend": "fa3"})))
    assert knobs["profile"] is None and knobs["overridden"] == [] and knobs["page_size"] == 4
    assert knobs["flashinfer.ragged_backend"] == "fa3"  # None: the paged backend's
    assert knobs["flashinfer.decode.tensor_cores"] is False  # GQA group 2
    assert knobs["flashinfer.decode.capture_batch_sizes"] == CAPTURE
    with pytest.raises(DetrunError, match="sglang_overridden: only a spec with an sglang profile"):
        spec_from_dict(small(sglang_overridden=["page_size"]))


@pytest.mark.parametrize("path, version, det", [
    ("jobs/sglang-deterministic.yaml", "0.5.10", True), ("jobs/sglang-default.yaml", "0.5.10", False),
    ("jobs/sglang-0523-deterministic.yaml", "0.5.23", True), ("jobs/sglang-0523-default.yaml", "0.5.23", False),
])
def test_shipped_sglang_jobs(path, version, det):
    spec = load_spec(path)
    assert knobs_of(spec) == {"profile": f"sglang-{version}-{'deterministic' if det else 'default'}",
                                     **PINNED[(version, det)], "flashinfer.decode.tensor_cores": True,
                                     "overridden": []}
    assert (spec.heads.qo, spec.heads.kv, spec.head_dim) == (32, 8, 128) and spec.env == {}
    assert spec.expect["repeat"] == "bitwise" and ("batch" in spec.expect) is det
    assert len(spec.members("crowd")) == 6 and spec.request("sibling").prefix == "target_p"
    assert spec.phases == ["prefill", "decode"]


def test_the_shipped_flag_job_sets_the_flag_0523_reads():
    spec = load_spec("jobs/sglang-0523-paged.yaml")
    assert knobs_of(spec)["profile"] == "sglang-0.5.23-default" and spec.sglang_overridden == []
    assert spec.bool_flags == {"SGLANG_FLASHINFER_USE_PAGED": True} and spec.phases == ["prefill", "decode"]
    with pytest.raises(DetrunError, match="SGLang 0.5.10 does not read it"):
        load_spec("jobs/sglang-0523-paged.yaml", ['sglang={version: "0.5.10"}'])


def test_rows_carry_the_knobs_and_the_verdict_names_the_profile(store):
    data = job(DET, backend="reference", modes=["eager"], repeats=1, expect={"batch": "explained"})
    run_inline(store, data, "r1")
    rows = [r for f in store.row_files("r1") for r in pq.read_table(f, filesystem=store.fs).to_pylist()]
    knobs = {r["knobs"] for r in rows}
    assert len(knobs) == 1 and json.loads(knobs.pop())["profile"] == "sglang-0.5.10-deterministic"
    headline = judge(compare_runs(store, ["r1"])).headline
    assert "ran: reference torch-exact (sglang-0.5.10-deterministic)" in headline
    run_inline(store, small(backend="reference", modes=["eager"], repeats=1), "r2")
    assert "(sglang" not in judge(compare_runs(store, ["r2"])).headline


def test_a_run_stored_before_these_fields_is_the_same_spec_and_job(store):
    from detrun.judge.baseline import _same_spec
    from detrun.judge.history import job_of

    run_inline(store, small(backend="reference", modes=["eager"], repeats=1), "new")
    old = store.manifest("new")["spec"]
    for key in ("sglang", "sglang_overridden", "phases"):
        del old[key]
    del old["flashinfer"]["decode"]  # as stored before SGLang profiles and decode
    store.create_run("old", old, 1)
    _same_spec(store, "new", "old")
    assert job_of(old) == job_of(store.manifest("new")["spec"])
    store.create_run("profiled", spec_from_dict(job(DEFAULT, backend="reference", page_size=4)).model_dump(), 1)
    with pytest.raises(DetrunError, match=r"differs in: .*sglang"):
        _same_spec(store, "new", "profiled")
