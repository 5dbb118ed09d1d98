"""detrun shrink: the first batch difference of a run, delta-debugged to the smallest batch that still
differs (real detrun runs of the pair), written as a job that fails; nothing to shrink is exit 2."""

import pytest
import yaml
from typer.testing import CliRunner

from detrun.cli import app
from detrun.errors import DetrunError
from detrun.judge.compare import compare_runs
from detrun.run.shrink import failing_pair, inline_trial, job_text, shrink
from detrun.spec.model import spec_from_dict
from tests.helpers import flip_one_ulp, run_inline, small

SPLIT = dict(reference={"variant": "split_kv", "kv_tile": 4}, repeats=1, modes=["eager"])


def crowd(**overrides):
    """target alone and in a crowd of fillers (copies, prefixes, a shared prefix): only target is in both."""
    requests = {"target": {"qo_len": 40}, "f1": {"qo_len": 1, "prefix_len": 100}, "f2": {"qo_len": 30},
                "dec": {"qo_len": 1, "prefix_len": 9, "copies": 4}, "sib_a": {"qo_len": 12, "prefix_len": 32},
                "sib_b": {"qo_len": 7, "prefix_len": 32, "prefix": "sib_a"}}
    cases = {"alone": ["target"], "crowd": ["f1", "target", "f2", "dec", "sib_a", "sib_b"]}
    return small(requests=requests, cases=cases, **{**SPLIT, **overrides})


def test_failing_pair_is_the_first_batch_difference(store):
    run_inline(store, crowd(), "run")
    pair = failing_pair(store, "run")
    assert (pair.request, pair.small, pair.large, pair.mode) == ("target", "alone", "crowd", "eager")


def test_shrink_reaches_the_target_beside_one_request(store):
    run_inline(store, crowd(), "run")
    steps = []
    found = shrink(store, "run", inline_trial, budget=200, on_step=steps.append)
    spec = found.spec
    assert not found.exhausted and found.cells == 2 * len(steps) and steps == found.steps
    assert steps[0].tried == "the pair as it ran: target in alone vs crowd (eager)" and steps[0].outcome == "differs"
    assert spec.cases["alone"] == ["target"] and len(spec.members("crowd")) == 2 and "target" in spec.cases["crowd"]
    assert set(spec.requests) == set(spec.cases["crowd"])  # only what the pair uses
    (other,) = [n for n in spec.cases["crowd"] if n != "target"]
    assert spec.requests[other].copies == 1 and spec.requests[other].prefix is None
    assert spec.case_tokens("crowd") < 100 and spec.requests["target"].qo_len < 40  # lengths were halved too
    sizes = [int(s.size.split(": ")[1].split()[0]) for s in steps if s.outcome == "differs"]
    assert sizes == sorted(sizes, reverse=True) and sizes[0] == 9 and sizes[-1] == 2
    assert {s.outcome for s in steps} == {"differs", "same"}  # every cut that left no difference was undone
    a, b = found.rows
    assert (a["case"], b["case"]) == ("alone", "crowd") and a["out_digest"] != b["out_digest"]
    assert found.explain()[0].startswith("plan.kv_chunk_size: ")
    # the job written is the minimal pair: it loads, and running it fails the batch claim on the target
    written = spec_from_dict(yaml.safe_load(job_text(found)), "found.yaml")
    assert written == spec and written.expect == {"batch": "bitwise"} and written.repeats == 1
    run_inline(store, written.model_dump(mode="json"), "found")
    verdict = compare_runs(store, ["found"]).verdict
    assert verdict.exit_code == 1 and verdict.of("broken_claim")[0].items == ["target"]


def test_budget_bounds_the_cells(store):
    run_inline(store, crowd(), "run")
    found = shrink(store, "run", inline_trial, budget=7)
    assert found.exhausted and found.cells == 6 and len(found.steps) == 3
    assert len(found.spec.members("crowd")) < 9  # smaller than it ran, not yet minimal
    with pytest.raises(DetrunError, match="--budget-cells 1: a trial runs 2 cells"):
        shrink(store, "run", inline_trial, budget=1)


def test_a_difference_that_does_not_reproduce_is_said(store):
    run_inline(store, small(**{**SPLIT, "reference": {}}), "exact")
    flip_one_ulp(store, "exact", lambda r: r["case"] == "mixed" and r["request"] == "target")
    with pytest.raises(DetrunError, match="cannot shrink: target did not differ between alone and mixed when run "
                                          r"again \(eager, one repeat: same\)"):
        shrink(store, "exact", inline_trial)


def test_nothing_to_shrink_exits_2_with_one_line(store):
    run_inline(store, small(**{**SPLIT, "reference": {}}), "exact")
    out = CliRunner().invoke(app, ["shrink", "exact", "--inline", "--runs-root", store.root])
    lines = [ln for ln in out.output.splitlines() if ln.strip()]
    assert out.exit_code == 2 and len(lines) == 1, out.output
    assert lines[0].startswith("detrun: error: nothing to shrink: no request of run exact differs across batch")
    missing = CliRunner().invoke(app, ["shrink", "nope", "--inline", "--runs-root", store.root])
    assert missing.exit_code == 2 and "no run 'nope'" in missing.output


@pytest.mark.slow
def test_cli_shrinks_on_ray_and_the_written_job_fails(ray_2gpu, store, tmp_path):
    run_inline(store, crowd(), "run")
    found = tmp_path / "found.yaml"
    out = CliRunner().invoke(app, ["shrink", "run", "--runs-root", store.root, "-o", str(found),
                                   "--budget-cells", "8"])
    assert out.exit_code == 1, out.output
    lines = out.output.splitlines()
    assert lines[0] == ("[2/8 cells] step 1: the pair as it ran: target in alone vs crowd (eager): differs; "
                        "now crowd: 9 requests, 294 tokens")
    assert any(ln.startswith("budget spent: smaller, not shown minimal (4 trials, 8 cells): target differs")
               for ln in lines)
    assert any(ln.startswith("  plan in alone: path paged, attn torch-split_kv; kv_chunk_size=8") for ln in lines)
    assert any(ln.startswith("  differs in: plan.kv_chunk_size: 8 vs ") for ln in lines)
    again = CliRunner().invoke(app, ["submit", str(found), "--gpus", "1", "--runs-root", str(tmp_path / "again")])
    assert again.exit_code == 1 and "batch claimed bitwise, 1 request (target) differs" in again.output
