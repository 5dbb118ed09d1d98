"""One findings model: every finding a verdict counts reaches every presenter (terminal, JUnit, HTML,
history); a baseline that ran another backend fails; a nearest-fingerprint baseline is provisional;
kernel-audit coverage is counted."""

import json
import xml.etree.ElementTree as ET
from html import escape

import pyarrow.parquet as pq
from rich.console import Console

from detrun.judge.baseline import compare_with_baseline, set_baseline
from detrun.judge.claims import Checks
from detrun.judge.compare import compare_runs
from detrun.judge.findings import FAIL, WARN, judge
from detrun.judge.history import history
from detrun.present.junit import junit_xml
from detrun.present.render import print_history
from detrun.present.report import build_report
from detrun.record.fingerprint import fingerprint_of
from tests.helpers import drop_row, flip_one_ulp, junit_text, rewrite_rows, run_inline, small, terminal_text

SPLIT = dict(reference={"variant": "split_kv", "kv_tile": 4}, repeats=2)
RAGGED_KERNEL = "flashinfer::BatchPrefillWithRaggedKVCacheKernel<128>"
PAGED_KERNEL = "flashinfer::BatchPrefillWithPagedKVCacheKernel<128>"


def _is(case, request, repeat=None):
    return lambda r: r["case"] == case and r["request"] == request and repeat in (None, r["repeat"])


def damaged_night(store):
    """A baseline run and a night run damaged in every way compare can find."""
    run_inline(store, small(**SPLIT), "base")
    run_inline(store, small(**SPLIT), "night")
    set_baseline(store, "base")
    flip_one_ulp(store, "night", _is("alone", "target", 0))  # unexplained: repeat, batch, run
    drop_row(store, "night", lambda r: r["key"] == "mixed/long/eager/r1/g0")  # missing
    dup = next(r for r in pq.read_table(store.row_files("night")[0]).to_pylist() if r["case"] == "mixed_decode")

    def tamper(row):
        if row["key"] == "mixed/short/eager/r0/g0":
            row["kernels"] = [RAGGED_KERNEL]  # a ragged kernel in a paged row: audit failure
        if row["case"] == "prefix_alone" and row["mode"] == "eager":
            row["backend"], row["kernels"] = "flashinfer", []  # another backend than the baseline's
        if row["key"] == "mixed/target/eager/r1/g0":
            row["status"], row["reason"] = "error", "RuntimeError: CUDA error: an illegal memory access"
        if row["key"] == "prefix_shared/sibling/eager/r1/g0":
            row["status"], row["reason"] = "known_bug", "FA2 graph + disable_split_kv: illegal memory access"
        if row["case"] == "mixed_decode" and row["mode"] == "eager":
            row["plan"] = json.dumps(dict(json.loads(row["plan"]), kv_tile=128))  # equal although plans differ
        row["flashinfer"] = "0.7.2"  # no baseline with this fingerprint: the nearest is provisional
        row["fingerprint"] = fingerprint_of(row)

    rewrite_rows(store, "night", tamper, extra=[dup])
    store.finish_run("night", "incomplete")


def test_every_finding_reaches_every_presenter(store):
    damaged_night(store)
    verdict = judge(*compare_with_baseline(store, "night", Checks(baseline=True, expect={"batch": "bitwise"})))
    kinds = set(verdict.counts())
    assert kinds >= {"broken_claim", "differs", "explained", "backend_changed", "missing", "duplicate", "error",
                     "audit", "provisional_baseline", "known_bug", "skipped", "incomplete_run", "note",
                     "not_audited"}, kinds
    terminal, junit, html = terminal_text(verdict), junit_text(verdict), build_report(verdict)
    for f in verdict.findings:
        assert f.title in terminal, (f.kind, f.title)
        assert f.title in junit, (f.kind, f.title)
        assert escape(f.title) in html, (f.kind, f.title)
    assert verdict.headline in terminal and escape(verdict.headline) in html and verdict.headline in junit
    # the failures JUnit counts are exactly the failing findings (claims and comparisons included)
    root = ET.fromstring(junit_xml(verdict))
    failing = [f for f in verdict.findings if f.severity == FAIL]
    assert int(root.get("failures")) + int(root.get("errors")) == len(failing)


def test_history_counts_every_failing_and_warning_kind(store):
    damaged_night(store)
    own = judge(compare_runs(store, ["night"]))  # history judges each run on its own
    (night,) = [r for r in history(store).runs if r.run_id == "night"]
    want = {f.kind for f in own.findings if f.severity in (FAIL, WARN)}
    assert set(night.counts) == want and {"audit", "missing", "duplicate", "error", "differs"} <= want
    console = Console(record=True, width=400, color_system=None)
    print_history(history(store), console)
    line = next(ln for ln in console.export_text().splitlines() if " night " in ln)
    for kind in want:
        assert f"{kind}={night.counts[kind]}" in line


def test_audit_failure_and_broken_claim_in_junit_and_html(store):
    run_inline(store, small(expect={"batch": "bitwise"}, **SPLIT), "run")
    rewrite_rows(store, "run",
                 lambda r: r.update(kernels=[RAGGED_KERNEL]) if r["key"] == "alone/target/eager/r0/g0" else None)
    verdict = judge(compare_runs(store, ["run"]))
    root = ET.fromstring(junit_xml(verdict))
    failures = {(c.get("classname"), c.find("failure").get("message")) for c in root.iter("testcase")
                if c.find("failure") is not None}
    assert ("detrun.claim", "batch claimed bitwise, 2 requests (target, target_p) differ (kv_chunk_size 4 vs 36)") \
        in failures
    assert any(cls == "detrun.audit" and "path paged but a ragged kernel ran" in msg for cls, msg in failures)
    html = build_report(verdict)
    assert "path paged but a ragged kernel ran" in html and "batch claimed bitwise" in html


def test_baseline_that_ran_another_backend_fails_whatever_the_claims(store):
    run_inline(store, small(repeats=1, modes=["eager"]), "base")
    run_inline(store, small(repeats=1, modes=["eager"]), "night")
    set_baseline(store, "base")
    rewrite_rows(store, "base", lambda r: r.update(backend="flashinfer", attn="fa2"))  # the golden run was a GPU run
    checks = Checks(baseline=True, expect=dict.fromkeys(("repeat", "gpu", "mode", "batch", "run"), "ignore"))
    verdict = judge(*compare_with_baseline(store, "night", checks))
    (changed,) = verdict.of("backend_changed")
    assert changed.title == "backend changed against baseline base: flashinfer -> reference (11 cells)"
    assert verdict.exit_code == 1 and changed.title in verdict.headline


def test_nearest_fingerprint_baseline_is_provisional(store):
    run_inline(store, small(repeats=1, modes=["eager"]), "base")
    run_inline(store, small(repeats=1, modes=["eager"]), "night")
    set_baseline(store, "base")
    assert not judge(*compare_with_baseline(store, "night", Checks(baseline=True))).of("provisional_baseline")

    def upgrade(row):
        row["flashinfer"] = "0.7.2"
        row["fingerprint"] = fingerprint_of(row)

    rewrite_rows(store, "night", upgrade)
    verdict = judge(*compare_with_baseline(store, "night", Checks(baseline=True)))
    (prov,) = verdict.of("provisional_baseline")
    assert prov.title.startswith("provisional: no baseline for fingerprint ") and "differs in flashinfer ( vs 0.7.2)" \
        in prov.title
    assert verdict.exit_code == 0 and prov.title in verdict.headline
    root = ET.fromstring(junit_xml(verdict))
    assert any(p.get("name") == "provisional.0" and p.get("value") == prov.title for p in root.iter("property"))
    assert any(c.get("classname") == "detrun.provisional_baseline" and c.find("skipped") is not None
               for c in root.iter("testcase"))
    required = judge(*compare_with_baseline(store, "night", Checks(baseline=True, require_baseline=True)))
    assert required.exit_code == 1 and required.of("provisional_baseline")[0].severity == FAIL


def test_no_baseline_fails_only_when_required(store):
    run_inline(store, small(repeats=1, modes=["eager"]), "night")
    assert judge(*compare_with_baseline(store, "night", Checks(baseline=True))).exit_code == 0
    required = judge(*compare_with_baseline(store, "night", Checks(baseline=True, require_baseline=True)))
    assert required.exit_code == 1 and "no baseline set for spec small" in required.headline


def test_audit_coverage_is_counted_per_plan_with_the_reason(store):
    split = dict(repeats=2, modes=["eager"], reference={"variant": "split_kv", "kv_tile": 4})  # a plan per batch
    run_inline(store, small(flashinfer={"profile_kernels": False}, **split), "unprofiled")
    rewrite_rows(store, "unprofiled", lambda r: r.update(backend="flashinfer", kernels=[]))
    verdict = judge(compare_runs(store, ["unprofiled"]))
    (gap,) = verdict.of("not_audited")  # 5 cases, 4 plans: alone and prefix_alone plan alike
    assert gap.title == "4 plans not audited: profile_kernels: false" and len(gap.items) == 4
    assert "audit 0/4 plans" in verdict.headline and verdict.exit_code == 0
    run_inline(store, small(**split), "profiled")
    # as a task profiles: the first cell of each plan (repeat 0; prefix_alone's plan was met in alone)
    rewrite_rows(store, "profiled", lambda r: r.update(
        backend="flashinfer", kernels=[PAGED_KERNEL] * (r["repeat"] == 0 and r["case"] != "prefix_alone")))
    covered = judge(compare_runs(store, ["profiled"]))
    assert not covered.of("not_audited") and "audit 4/4 plans" in covered.headline
    rewrite_rows(store, "profiled", lambda r: r.update(kernels=[]) if r["case"] == "mixed" else None)
    (one,) = judge(compare_runs(store, ["profiled"])).of("not_audited")
    assert one.title == "1 plans not audited: no kernels recorded (profile_repeats: 1)"
    plan = one.items[0].split(" plan ")[1].split()[0]
    assert list(one.items) == [f"profiled: path paged plan {plan} (first in mixed/eager)"]


def test_an_unaudited_plan_of_a_shared_profiling_names_the_task_it_fell_to(store):
    """Two tasks per slot (repeats_per_task: 1) share the profiling: a plan none recorded names the task whose
    share it was (spec.matrix.profiled_by), the task that ran the profiling of each of the others' plans."""
    from detrun.spec.matrix import share_of

    data = small(repeats=2, repeats_per_task=1, modes=["eager"], reference={"variant": "split_kv", "kv_tile": 4})
    run_inline(store, data, "shared")
    first = {}  # (path, plan) -> the case that met it first in the task profiling it (the repeat share_of gives)

    def profile(r):
        plan = (r["path"], r["plan"])
        mine = r["repeat"] == share_of(plan, 2) and first.setdefault(plan, r["case"]) == r["case"]
        r.update(backend="flashinfer", kernels=[PAGED_KERNEL] * (mine and r["case"] != "mixed"))
    rewrite_rows(store, "shared", profile)
    (gap,) = judge(compare_runs(store, ["shared"])).of("not_audited")
    (plan,) = [plan for plan, case in first.items() if case == "mixed"]
    task = share_of(plan, 2)
    assert gap.title == ("1 plans not audited: no kernels recorded (profile_repeats: 1); its slot's tasks share the "
                         f"profiling: the task of repeats {task}-{task} profiles it")


def test_known_bug_cells_that_ran_are_compared_not_unchecked(store):
    run_inline(store, small(repeats=2, modes=["eager"]), "gated")

    def gate(row):
        if row["case"] == "mixed":  # ran isolated, did not reproduce: compared like any row
            row["reason"] = "known bug did not reproduce (fixed?): FA2 graph + disable_split_kv"
        if row["case"] == "prefix_shared":  # reproduced: not run, not compared
            row.update(status="known_bug", reason="known bug reproduced in an isolated worker: it died",
                       out_digest="", lse_digest="")

    rewrite_rows(store, "gated", gate)
    flip_one_ulp(store, "gated", _is("mixed", "long", 1))  # a fixed cell's difference fails as any row's
    verdict = judge(compare_runs(store, ["gated"]))
    (fixed,) = verdict.of("known_bug_fixed")
    (gated,) = verdict.of("known_bug")
    assert (fixed.tag, gated.tag) == ("a warning", "not checked") and len(fixed.items) == 6
    assert "not checked: 4 known bug;" in verdict.headline
    assert "warnings: 6 known bug did not reproduce (fixed?)" in verdict.headline
    assert "known bug did not reproduce" not in verdict.headline.split("not checked: ")[1].split(";")[0]
    assert verdict.exit_code == 1 and any(f.request == "long" and f.axis == "repeat" for f in verdict.of("differs"))
    terminal = terminal_text(verdict)
    assert "known bug did not reproduce (fixed?) (a warning): 1" in terminal
    assert "known bug (not checked): 1" in terminal
    cases = {c.get("classname"): c for c in ET.fromstring(junit_xml(verdict)).iter("testcase")}
    assert cases["detrun.known_bug"].find("skipped") is not None
    fixed_case = cases["detrun.known_bug_fixed"]
    assert fixed_case.find("skipped") is None and fixed_case.find("failure") is None
    assert fixed.title in fixed_case.find("system-out").text
