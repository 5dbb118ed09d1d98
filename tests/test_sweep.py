"""Generated cases (`sweep:`): expanded at validation into plain requests and cases, deterministically;
bad generators name sweep[i].field (exit 2); the stored spec is the expanded one and validates to itself;
jobs/sweep.yaml finds the split-kv negative control's batch variance (exit 1)."""

import pytest
import yaml
from typer.testing import CliRunner

from detrun.cli import app
from detrun.errors import DetrunError
from detrun.judge.compare import compare_runs
from detrun.judge.findings import judge
from detrun.judge.history import job_of
from detrun.spec.model import load_spec, spec_from_dict
from tests.helpers import run_inline, small

BATCH_SIZES = {"kind": "batch_sizes", "target": {"qo_len": 20}, "filler": {"qo_len": 1, "prefix_len": 9},
               "sizes": [1, 2, 4]}
MIXES = {"kind": "random_mixes", "seed": 3, "count": 4, "target": {"qo_len": 30, "prefix_len": 8}, "size": [2, 6],
         "qo_len": [1, 40], "prefix_len": [0, 40], "shared_prefix": True, "decode": 0.3}


def swept(*gens, **overrides):
    return spec_from_dict(small(sweep=list(gens), **overrides), "job.yaml")


def test_batch_sizes_put_one_target_beside_fillers():
    spec = swept(BATCH_SIZES)
    assert {c: spec.cases[c] for c in ("bs1", "bs2", "bs4")} == {
        "bs1": ["bs_target"], "bs2": ["bs_target", "bs_f1"], "bs4": ["bs_target", "bs_f1", "bs_f2", "bs_f3"]}
    assert spec.requests["bs_target"].qo_len == 20 and spec.requests["bs_f3"].prefix_len == 9
    assert list(spec.cases)[:5] == list(small()["cases"])  # the hand-written cases stay, first
    assert swept(dict(BATCH_SIZES, sizes=3)).cases["bs3"] == ["bs_target", "bs_f1", "bs_f2"]  # N: 1..N


def test_random_mixes_are_seeded():
    spec = swept(MIXES)
    again, other = swept(MIXES), swept(dict(MIXES, seed=4))
    mixes = {c: m for c, m in spec.cases.items() if c not in small()["cases"]}
    assert len(mixes) == 5 and mixes["mix_alone"] == ["mix_target"]
    assert all("mix_target" in m and 2 <= len(m) <= 6 for c, m in mixes.items() if c != "mix_alone")
    assert (again.cases, again.requests) == (spec.cases, spec.requests)
    assert {c: m for c, m in other.cases.items() if c not in small()["cases"]} != mixes
    made = [spec.requests[n] for m in mixes.values() for n in m if n != "mix_target"]
    assert all(1 <= r.qo_len <= 40 and 0 <= r.prefix_len <= 40 for r in made)
    assert any(r.qo_len == 1 for r in made) and any(r.prefix for r in made)  # decodes, a shared prefix


def test_prefix_lengths_default_with_page_boundary_neighbours():
    spec = swept({"kind": "prefix_lengths", "base": 32}, page_size=16)
    assert sorted(int(c[2:-6]) for c in spec.cases if c.endswith("_alone") and c.startswith("pl")) == [
        1, 47, 48, 49, 511, 2048, 4097]
    assert spec.cases["pl511_alone"] == ["pl511"] and spec.cases["pl511_filled"] == ["pl511", "pl_filler"]
    assert spec.requests["pl4097"].prefix_len == 4097


@pytest.mark.parametrize("gen, needle", [
    (dict(BATCH_SIZES, sizes=[1, 0]), "sweep[0].sizes[1]: Input should be greater than or equal to 1"),
    (dict(BATCH_SIZES, sizes=0), "sweep[0].sizes: 0: N must be 1..4096"),
    (dict(BATCH_SIZES, sizes=[2, 2]), "sweep[0].sizes: sizes must not repeat"),
    (dict(MIXES, size=[6, 2]), "sweep[0].size: [6, 2]: the low end exceeds the high end"),
    (dict(MIXES, qo_len=[0, 4]), "sweep[0].qo_len[0]: Input should be greater than 0"),
    (dict(MIXES, decode=1.5), "sweep[0].decode: Input should be less than or equal to 1"),
    (dict(MIXES, target={"qo_len": 0}), "sweep[0].target.qo_len: Input should be greater than or equal to 1"),
    (dict(MIXES, count=10, size=[1, 4096]), "sweep[0]: makes up to 81922 requests, over limits.max_rows (50)"),
    ({"kind": "prefix_lengths", "name": "a/b"}, "sweep[0].name: String should match pattern"),
    ({"kind": "grid"}, "sweep[0]: Input tag 'grid' found using 'kind' does not match any of the expected tags"),
    ({"kind": "prefix_lengths", "colour": 1}, "sweep[0].colour: Extra inputs are not permitted"),
])
def test_bad_generator_names_its_field(gen, needle):
    with pytest.raises(DetrunError) as err:
        swept(gen, limits={"max_rows": 50})
    assert str(err.value).startswith("job.yaml: " + needle), str(err.value)


def test_generated_names_may_not_collide():
    with pytest.raises(DetrunError, match=r"job.yaml: sweep\[1\].name: request 'bs_target' already exists"):
        swept(BATCH_SIZES, BATCH_SIZES)
    assert "bs2" in swept(BATCH_SIZES, dict(BATCH_SIZES, name="bs_b")).cases
    with pytest.raises(DetrunError, match=r"sweep\[0\].name: case 'bs1' already exists"):
        swept(BATCH_SIZES, cases={"bs1": ["target"]})


def test_limits_apply_to_the_expanded_cases(tmp_path):
    with pytest.raises(DetrunError, match="job.yaml: cases.pl4097_alone: 4113 tokens .* exceed limits.max_tokens"):
        swept({"kind": "prefix_lengths"}, limits={"max_tokens": 4000})
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(small(sweep=[BATCH_SIZES], repeats=1, modes=["eager"], limits={"max_rows": 17})))
    with pytest.raises(DetrunError, match="18 rows on 1 GPU slot.* exceed limits.max_rows .17."):
        load_spec(path)  # 11 hand-written rows + bs1, bs2, bs4 (7 rows)


def test_bad_sweep_exits_2_with_one_line(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(small(sweep=[dict(MIXES, size=[6, 2])])))
    out = CliRunner().invoke(app, ["submit", str(path), "--runs-root", str(tmp_path / "runs")])
    lines = [ln for ln in out.output.splitlines() if ln.strip()]
    assert out.exit_code == 2 and len(lines) == 1 and f"{path}: sweep[0].size: [6, 2]" in lines[0]
    assert not (tmp_path / "runs").exists()


def test_stored_spec_is_the_expanded_one_and_validates_to_itself(store):
    spec = swept(BATCH_SIZES, MIXES, repeats=1, modes=["eager"])
    run_inline(store, small(sweep=[BATCH_SIZES, MIXES], repeats=1, modes=["eager"]), "swept")
    stored = store.manifest("swept")["spec"]
    assert stored["sweep"] == [] and [g["kind"] for g in stored["swept"]] == ["batch_sizes", "random_mixes"]
    assert stored["cases"]["bs4"] == ["bs_target", "bs_f1", "bs_f2", "bs_f3"] and "mix3" in stored["cases"]
    assert spec_from_dict(stored) == spec  # no second expansion: the generators are only a record now
    assert spec_from_dict(spec_from_dict(stored).model_dump(mode="json")) == spec
    rows = store.read_rows(["swept"]).to_pylist()
    assert {r["case"] for r in rows} == set(spec.cases) and len(rows) == sum(len(spec.members(c)) for c in spec.cases)
    # the same cases written by hand are the same job (the generators' record changes no row)
    by_hand = {k: v for k, v in stored.items() if k not in ("sweep", "swept")}
    assert job_of(by_hand) == job_of(stored)


def test_sweep_finds_the_split_kv_batch_variance(store):
    spec = load_spec("jobs/sweep.yaml")
    assert {"bs8", "mix3", "pl16_filled", "pl17_alone"} <= set(spec.cases)
    run_inline(store, spec.model_dump(mode="json"), "sweep")
    verdict = judge(compare_runs(store, ["sweep"]))
    assert verdict.exit_code == 1 and verdict.headline.startswith("DETERMINISM FAILURE (exit 1); batch claimed bitwise")
    differ = set(verdict.of("broken_claim")[0].items)
    assert {"bs_target", "mix_target"} <= differ and "held: repeat" in verdict.headline
    exact = judge(compare_runs(store, ["sweep"], expect={"batch": "explained"}))
    assert exact.exit_code == 0  # every difference is the split's plan: explained, none unexplained


@pytest.mark.slow
def test_sweep_job_fails_through_submit(ray_2gpu, tmp_path):
    out = CliRunner().invoke(app, ["submit", "jobs/sweep.yaml", "--gpus", "1", "--runs-root", str(tmp_path)])
    assert out.exit_code == 1, out.output
    assert "DETERMINISM FAILURE (exit 1); batch claimed bitwise" in out.output
