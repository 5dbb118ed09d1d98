"""detrun shrink: the first batch difference of a run, delta-debugged to the smallest batch that still
differs (real detrun runs of the pair), written as a job that fails; nothing to shrink is exit 2."""

import pytest
import yaml
from typer.testing import CliRunner

from detrun.cli import app
from detrun.errors import DetrunError
from detrun.judge.compare import compare_runs
from detrun.judge.findings import judge
from detrun.run.shrink import case_name, failing_pair, inline_trial, job_text, shrink
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
    # the cases are named for what they hold: target alone, and target beside the one request left
    (other,) = [n for n in spec.requests if n != "target"]
    assert spec.cases == {"target_alone": ["target"], f"target_with_{other}": spec.cases[f"target_with_{other}"]}
    assert sorted(spec.cases[f"target_with_{other}"]) == sorted(["target", other])
    assert (found.small, found.large) == ("target_alone", f"target_with_{other}")
    assert spec.requests[other].copies == 1 and spec.requests[other].prefix is None
    large = f"target_with_{other}"
    assert spec.case_tokens(large) < 100 and spec.requests["target"].qo_len < 40  # lengths were halved too
    sizes = [int(s.size.split(": ")[1].split()[0]) for s in steps if s.outcome == "differs"]
    assert sizes == sorted(sizes, reverse=True) and sizes[0] == 9 and sizes[-1] == 2
    assert steps[0].size.startswith("target_with_f1_and_4_more: 9 requests")  # the steps name them so too
    assert [s.size.split(":")[0] for s in steps if s.outcome == "differs"][-1] == large
    assert {s.outcome for s in steps} == {"differs", "same"}  # every cut that left no difference was undone
    a, b = found.rows
    assert (a["case"], b["case"]) == ("target_alone", large) and a["out_digest"] != b["out_digest"]
    assert found.explain()[0].startswith("plan.kv_chunk_size: ")
    # the job written is the minimal pair: it loads, and running it fails the batch claim on the target
    text = job_text(found)
    assert f"# here target_alone and {large};" in text.splitlines()[1]
    written = spec_from_dict(yaml.safe_load(text), "found.yaml")
    assert written == spec and written.expect == {"batch": "bitwise"} and written.repeats == 1
    run_inline(store, written.model_dump(mode="json"), "found")
    verdict = judge(compare_runs(store, ["found"]))
    assert verdict.exit_code == 1 and list(verdict.of("broken_claim")[0].items) == ["target"]


@pytest.mark.parametrize("members, name", [
    (["target"], "target_alone"),
    (["f1", "target"], "target_with_f1"),
    (["target", "f1", "f2"], "target_with_f1_f2"),
    (["f1", "target", "f2", "dec"], "target_with_f1_and_2_more"),
])
def test_cases_are_named_for_what_they_hold(members, name):
    assert case_name(members, "target") == name


def two_differ():
    """crowd(), and f2 alone too: target and f2 both differ across batches."""
    data = crowd()
    data["cases"]["f2_alone"] = ["f2"]
    return data


def test_request_picks_the_request_to_shrink(store, tmp_path, no_ray):
    run_inline(store, two_differ(), "run")
    first = failing_pair(store, "run")
    assert set(first.differing) == {"target", "f2"}
    other = next(n for n in first.differing if n != first.request)
    assert failing_pair(store, "run", other).request == other
    found = tmp_path / "found.yaml"
    out = CliRunner().invoke(app, ["shrink", "run", "--request", other, "--runs-root", store.root, "-o", str(found),
                                   "--budget-cells", "4"])
    assert out.exit_code == 1, out.output
    assert out.output.splitlines()[0].startswith(f"[2/4 cells] step 1: the pair as it ran: {other} in ")
    assert f"also differ across batches: {first.request} (shrink one with --request NAME)" in out.output
    assert f"{other}_alone" in yaml.safe_load(found.read_text())["cases"]


@pytest.mark.parametrize("request_, message", [
    ("nope", "--request nope: run run has no request 'nope' (its requests: dec, f1, f2, sib_a, sib_b, target)"),
    ("sib_a", "--request sib_a: sib_a does not differ across batch compositions in run run; these do: "),
])
def test_a_request_that_cannot_be_shrunk_is_exit_2_before_ray(store, no_ray, request_, message):
    run_inline(store, two_differ(), "run")
    out = CliRunner().invoke(app, ["shrink", "run", "--request", request_, "--address", "auto",
                                   "--runs-root", store.root])
    assert out.exit_code == 2 and out.stderr.startswith(f"detrun: error: {message}"), out.output


def test_shrink_runs_in_this_process_without_an_address(store, tmp_path, no_ray):
    """No --address: the trials run here (no Ray to start); --inline is still accepted, not with --address."""
    run_inline(store, crowd(), "run")
    out = CliRunner().invoke(app, ["shrink", "run", "--runs-root", store.root, "-o", str(tmp_path / "f.yaml"),
                                   "--budget-cells", "4"])
    assert out.exit_code == 1, out.output
    assert out.output.splitlines()[-1].startswith(f"wrote {tmp_path / 'f.yaml'}")
    both = CliRunner().invoke(app, ["shrink", "run", "--inline", "--address", "auto", "--runs-root", store.root])
    assert both.exit_code == 2 and "--inline runs the trials in this process, --address auto on Ray" in both.stderr


def test_budget_bounds_the_cells(store):
    run_inline(store, crowd(), "run")
    found = shrink(store, "run", inline_trial, budget=7)
    assert found.exhausted and found.cells == 6 and len(found.steps) == 3
    assert len(found.spec.members(found.large)) < 9  # smaller than it ran, not yet minimal
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


def test_nothing_to_shrink_on_ray_is_found_before_ray_starts(store, no_ray):
    run_inline(store, small(**{**SPLIT, "reference": {}}), "exact")
    out = CliRunner().invoke(app, ["shrink", "exact", "--address", "auto", "--runs-root", store.root])
    assert out.exit_code == 2 and out.stderr.startswith("detrun: error: nothing to shrink"), out.output


@pytest.mark.slow
def test_cli_shrinks_on_ray_and_the_written_job_fails(ray_2gpu, store, tmp_path):
    run_inline(store, crowd(), "run")
    found = tmp_path / "found.yaml"
    out = CliRunner().invoke(app, ["shrink", "run", "--address", "auto", "--runs-root", store.root, "-o", str(found),
                                   "--budget-cells", "8"])
    assert out.exit_code == 1, out.output
    lines = out.output.splitlines()
    assert lines[0] == ("[2/8 cells] step 1: the pair as it ran: target in alone vs crowd (eager): differs; "
                        "now target_with_f1_and_4_more: 9 requests, 294 tokens")
    assert any(ln.startswith("budget spent: smaller, not shown minimal (4 trials, 8 cells): target differs")
               for ln in lines)
    assert any(ln.startswith("  plan in target_alone: path paged, attn torch-split_kv; kv_chunk_size=8")
               for ln in lines)
    assert any(ln.startswith("  differs in: plan.kv_chunk_size: 8 vs ") for ln in lines)
    again = CliRunner().invoke(app, ["submit", str(found), "--gpus", "1", "--runs-root", str(tmp_path / "again")])
    assert again.exit_code == 1 and "batch claimed bitwise, 1 request (target) differs" in again.output
