"""The decode phase beside prefill: decode rows and last-token digests, the phase axis (prefill's last
token vs decode's), the reference's exact and split_kv decode, old rows without a phase, missing decode
cells, isolation and shrink with phases, jobs/decode.yaml end to end."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pyarrow.parquet as pq
import pytest
import yaml
from typer.testing import CliRunner

from detrun.cli import app
from detrun.errors import DetrunError
from detrun.judge.baseline import compare_with_baseline, set_baseline
from detrun.judge.compare import compare_runs
from detrun.judge.findings import judge
from detrun.judge.history import history, job_of
from detrun.kernels.backends.base import AttentionBackend
from detrun.kernels.backends.reference import ReferenceBackend
from detrun.kernels.digest import tensor_digest
from detrun.present.junit import junit_xml
from detrun.present.report import build_report
from detrun.record.keys import row_key
from detrun.run.isolation import Isolated, ShardBook, deferred_cell, unfinished_rows
from detrun.run.shrink import failing_pair, inline_trial, shrink
from detrun.run.worker import run_shard
from detrun.spec.matrix import Cell, Shard, cells_for, expected_keys, row_count
from detrun.spec.model import load_spec, spec_from_dict
from tests.helpers import ROOT, drop_row, flip_one_ulp, rewrite_rows, run_inline, small, stored_tensor

JOB = str(ROOT / "jobs" / "decode.yaml")
BOTH = dict(phases=["prefill", "decode"], modes=["eager"])
def _rows(store, run_id):
    return {r["key"]: r for r in store.read_rows([run_id]).to_pylist()}


# -- rows, keys and cells


def test_prefill_keys_are_unchanged_and_decode_keys_say_decode():
    assert row_key("alone", "target", "eager", 1, 0) == "alone/target/eager/r1/g0"  # stored runs keep matching
    assert row_key("alone", "target", "eager", 1, 0, "prefill") == "alone/target/eager/r1/g0"
    assert row_key("alone", "target", "cudagraph", 1, 2, "decode") == "alone/target/cudagraph+decode/r1/g2"
    spec = spec_from_dict(small(modes=["eager"], repeats=1))
    assert expected_keys(spec, 1)[:3] == ["alone/target/eager/r0/g0", "mixed/short/eager/r0/g0",
                                          "mixed/target/eager/r0/g0"]
    both = spec_from_dict(small(phases=["prefill", "decode"], modes=["eager", "cudagraph"], repeats=2))
    assert [(c.case, c.phase, c.mode) for c in cells_for(both, (0,))][:4] == [
        ("alone", "prefill", "eager"), ("alone", "prefill", "cudagraph"), ("alone", "decode", "eager"),
        ("alone", "decode", "cudagraph")]
    assert row_count(both, 2) == 2 * row_count(spec_from_dict(small(modes=["eager", "cudagraph"], repeats=2)), 2)
    assert len(expected_keys(both, 2)) == len(set(expected_keys(both, 2))) == row_count(both, 2)


def test_phases_field_is_checked():
    for phases, needle in (([], "phases: List should have at least 1 item"), (["decode", "decode"],
                           "phases: phases must not repeat"), (["extend"], "phases.0: Input should be")):
        with pytest.raises(DetrunError, match=rf"^<spec>: {re.escape(needle)}"):
            spec_from_dict(small(phases=phases))
    assert spec_from_dict(small(expect={"phase": "bitwise"})).expect == {"phase": "bitwise"}


def test_decode_rows_carry_phase_and_last_token_digests(store):
    run_inline(store, small(repeats=1, **BOTH), "run")
    rows = _rows(store, "run")
    prefill, decode = rows["prefix_shared/sibling/eager/r0/g0"], rows["prefix_shared/sibling/eager+decode/r0/g0"]
    assert (prefill["phase"], decode["phase"]) == ("prefill", "decode")
    assert prefill["path"] == "paged" and decode["path"] == "decode"
    assert prefill["out_shape"] == [5, 4, 32] and decode["out_shape"] == [1, 4, 32] and decode["lse_shape"] == [1, 4]
    # prefill: the digest of its last query row alone; decode: its only row, so its whole digest
    out = stored_tensor(store, "run", prefill)
    assert prefill["last_out_digest"] == tensor_digest(out[-1:]) != prefill["out_digest"]
    assert prefill["last_lse_digest"] == tensor_digest(stored_tensor(store, "run", prefill, "lse")[-1:])
    assert (decode["last_out_digest"], decode["last_lse_digest"]) == (decode["out_digest"], decode["lse_digest"])
    # the exact reference: decode of the last token carries prefill's bits for it
    assert decode["out_digest"] == prefill["last_out_digest"] and decode["lse_digest"] == prefill["last_lse_digest"]
    assert sum(r["phase"] == "decode" for r in rows.values()) == len(rows) // 2


# -- the phase axis


def test_exact_reference_holds_phase_bitwise(store):
    run_inline(store, small(repeats=2, **BOTH), "run")
    cmp = compare_runs(store, ["run"], expect={"phase": "bitwise", "batch": "bitwise"})
    verdict = judge(cmp)
    assert verdict.exit_code == 0 and not cmp.notes  # paged vs decode paths with equal bits: no note per group
    phase = {v.request: v for v in cmp.verdicts if v.axis == "phase"}
    assert {v.status for v in phase.values()} == {"equal"} and phase["target"].groups == 2 * 3  # cases x repeats
    claim = next(c for c in verdict.claims if c.axis == "phase")
    assert (claim.level, claim.status) == ("bitwise", "held")
    assert "phase bitwise" in verdict.headline.split("held: ")[1]


def test_a_one_ulp_flip_of_a_decode_row_breaks_a_bitwise_phase_claim(store, capsys):
    run_inline(store, small(repeats=1, **BOTH), "run")  # sibling is in one case only: only phase compares it
    flipped = flip_one_ulp(store, "run", lambda r: r["key"] == "prefix_shared/sibling/eager+decode/r0/g0")
    rewrite_rows(store, "run", lambda r: r.update(last_out_digest=r["out_digest"]) if r["key"] == flipped["key"] else 0)
    assert judge(compare_runs(store, ["run"])).exit_code == 0  # explained (the default): paths differ across phases
    cmp = compare_runs(store, ["run"], expect={"phase": "bitwise"})
    verdict = judge(cmp)
    assert verdict.exit_code == 1
    (broken,) = verdict.of("broken_claim")
    assert broken.axis == "phase" and list(broken.items) == ["sibling"] and "path paged vs decode" in broken.title
    m = next(m for m in cmp.mismatches if m.axis == "phase")
    assert m.a == "run:prefix_shared/sibling/eager/r0/g0" and m.b == f"run:{flipped['key']}"
    assert m.label == "explained by plan: path" and m.why == ["path: paged vs decode"]
    # the numbers compare prefill's last row (sliced from its stored [5, 4, 32]) with decode's row
    assert (m.out.count, m.out.total, m.out.max_ulp, m.out.first_index) == (1, 4 * 32, 1, (0, 0, 0))
    assert m.lse is None
    # every presenter shows the phase axis and the failure
    cases = ET.fromstring(junit_xml(verdict)).iter("testcase")
    failed = {(c.get("classname"), c.get("name")) for c in cases if c.find("failure") is not None}
    assert failed == {("detrun.claim", "phase bitwise"), ("detrun.phase", "sibling")}
    assert ">phase</text>" in build_report(verdict, "decode")
    from rich.console import Console

    from detrun.present.render import print_comparison

    print_comparison(verdict, Console(width=250, force_terminal=False))
    out = capsys.readouterr().out
    assert "phase (bitwise)" in out and "sibling differs across phase (1/1 groups), explained by path" in out


def test_split_kv_breaks_batch_in_decode_and_phase_naming_the_plan(store):
    spec = load_spec(JOB, ["reference.variant=split_kv", "modes=[eager]", "repeats=1"])
    run_inline(store, spec.model_dump(mode="json"), "split")
    cmp = compare_runs(store, ["split"])
    verdict = judge(cmp)
    assert verdict.exit_code == 1
    broken = {f.axis: f for f in verdict.of("broken_claim")}
    assert set(broken) == {"batch", "phase"}
    assert "kv_chunk_size" in broken["batch"].title and "path paged vs decode" in broken["phase"].title
    decode = next(m for m in cmp.mismatches if m.axis == "batch" and "+decode" in m.a)
    assert m_why(decode, "plan.kv_chunk_size:") and "+decode" in decode.b  # decode rows compared with decode rows
    phase = next(m for m in cmp.mismatches if m.axis == "phase")
    assert phase.why[0] == "path: paged vs decode" and m_why(phase, "plan.kv_chunk_size:")
    assert phase.out.count > 0 and phase.out.total == 8 * 64


def m_why(m, prefix: str) -> bool:
    return any(w.startswith(prefix) for w in m.why)


def test_decode_job_holds_with_the_exact_reference(store):
    spec = load_spec(JOB, ["modes=[eager]", "repeats=1"])
    run_inline(store, spec.model_dump(mode="json"), "exact")
    verdict = judge(compare_runs(store, ["exact"]))
    claims = {c.axis: c for c in verdict.claims}
    assert verdict.exit_code == 0 and claims["phase"].level == claims["batch"].level == "bitwise"
    assert claims["phase"].status == claims["batch"].status == "held" and claims["phase"].groups > 0


def test_decode_canary_differs_across_repeats(store):
    run_inline(store, small(phases=["decode"], modes=["eager"], repeats=2, reference={"variant": "canary"}), "c")
    cmp = compare_runs(store, ["c"])
    assert judge(cmp).exit_code == 1
    assert any(m.axis == "repeat" and m.label == "unexplained" and "+decode" in m.a for m in cmp.mismatches)


def test_missing_decode_cell_is_a_failure(store):
    run_inline(store, small(repeats=1, **BOTH), "run")
    gone = drop_row(store, "run", lambda r: r["key"] == "mixed/long/eager+decode/r0/g0")
    verdict = judge(compare_runs(store, ["run"]))
    assert verdict.exit_code == 1 and [list(f.items) for f in verdict.of("missing")] == [[f"run:{gone['key']}"]]


def test_a_backend_without_decode_skips_its_decode_cells(monkeypatch):
    monkeypatch.setattr(ReferenceBackend, "forward_decode", AttentionBackend.forward_decode)
    rows = run_shard(small(repeats=1, **BOTH), Shard(0, (0,)), "w")["rows"]
    decode = [r for r in rows if r["phase"] == "decode"]
    assert decode and {(r["status"], r["reason"]) for r in decode} == {("skipped", "reference: no decode")}
    assert {r["status"] for r in rows if r["phase"] == "prefill"} == {"ok"}


# -- rows stored before the decode phase


def _strip(store, run_id):
    """Make a run look stored before this change: no phase or last-digest columns, no phases in its spec."""
    for path in store.row_files(run_id):
        table = pq.read_table(path)
        pq.write_table(table.drop_columns(["phase", "last_out_digest", "last_lse_digest"]), path)
    manifest = store.manifest(run_id)
    manifest["spec"].pop("phases", None)
    store.write_manifest(manifest)


def test_old_rows_without_a_phase_column_read_as_prefill_and_compare(store):
    run_inline(store, small(repeats=1, modes=["eager"]), "old")
    _strip(store, "old")
    assert "phase" not in pq.read_schema(store.row_files("old")[0]).names
    table = store.read_rows(["old"])
    assert set(table.column("phase").to_pylist()) == {"prefill"}
    assert set(table.column("last_out_digest").to_pylist()) == {None}
    assert judge(compare_runs(store, ["old"])).exit_code == 0
    run_inline(store, small(repeats=1, **BOTH), "new")
    cmp = compare_runs(store, ["old", "new"], expect={"run": "bitwise", "phase": "bitwise"})
    status = {(v.request, v.axis): v.status for v in cmp.verdicts}
    assert judge(cmp).exit_code == 0 and not cmp.missing
    assert status[("target", "run")] == status[("target", "phase")] == "equal"  # old prefill rows meet new ones
    flip_one_ulp(store, "old", lambda r: r["key"] == "alone/target/eager/r0/g0")  # and are still judged
    _strip(store, "old")
    assert judge(compare_runs(store, ["old", "new"])).exit_code == 1
    # the same job and spec as a prefill-only run made now: history and baselines keep matching
    run_inline(store, small(repeats=1, modes=["eager"]), "now")
    specs = {r: store.manifest(r)["spec"] for r in ("old", "now")}
    assert "phases" not in specs["old"] and job_of(specs["old"]) == job_of(specs["now"])
    assert [r.run_id for r in history(store).runs] == ["old", "new", "now"]
    _strip(store, "now")  # a run that passes on its own, stored the old way, as the baseline
    run_inline(store, small(repeats=1, modes=["eager"]), "later")
    set_baseline(store, "now")
    assert not judge(*compare_with_baseline(store, "later")).failed


# -- isolation and shrink carry the phase


def test_isolated_cells_round_trip_their_phase(store):
    data = small(repeats=1, reference={"faults": {"alone": "known_bug_pass"}}, **BOTH)
    spec, shard = spec_from_dict(data), Shard(0, (0,))
    out = run_shard(data, shard, "iso")
    assert [(d["case"], d["phase"]) for d in out["deferred"]] == [("alone", "prefill"), ("alone", "decode")]
    cells = [deferred_cell(d) for d in out["deferred"]]
    assert deferred_cell({"case": "c", "mode": "eager", "repeat": 0}) == Cell("c", "eager", 0, "prefill")  # older
    items = [Isolated(shard, c, d["kind"], d["reason"]) for c, d in zip(cells, out["deferred"])]
    assert items[1].key == "alone/eager+decode/r0/g0" and items[1].task_id.endswith("-alone-eager-decode-r0")
    assert items[0].key == "alone/eager/r0/g0" and items[0].task_id.endswith("-alone-eager-r0")
    book = ShardBook(spec, shard, out, cells)
    book.fill(cells[1], run_shard(data, shard, "iso", cells=[cells[1]], force=True)["rows"])
    assert not book.done
    book.fill(cells[0], unfinished_rows(spec, "iso", shard, [cells[0]], "error", "isolated: hung"))
    assert book.done and [r["key"] for r in book.rows()] == expected_keys(spec, 1)
    decode = next(r for r in book.rows() if r["key"] == "alone/target/eager+decode/r0/g0")
    assert decode["phase"] == "decode" and decode["status"] == "ok" and decode["path"] == "decode"
    hung = next(r for r in book.rows() if r["key"] == "alone/target/eager/r0/g0")
    assert (hung["phase"], hung["status"]) == ("prefill", "error")


def test_shrink_stays_in_the_failing_pairs_phase(store):
    requests = {"target": {"qo_len": 8, "prefix_len": 400}, "f1": {"qo_len": 4, "prefix_len": 300},
                "f2": {"qo_len": 2, "prefix_len": 300}, "f3": {"qo_len": 1, "prefix_len": 9}}
    data = small(requests=requests, cases={"alone": ["target"], "crowd": ["f1", "target", "f2", "f3"]},
                 phases=["decode"], modes=["eager"], repeats=1, reference={"variant": "split_kv"})
    run_inline(store, data, "run")
    pair = failing_pair(store, "run")
    assert (pair.request, pair.small, pair.large, pair.phase) == ("target", "alone", "crowd", "decode")
    found = shrink(store, "run", inline_trial, budget=60)
    assert found.steps[0].tried == "the pair as it ran: target in alone vs crowd (eager, decode)"
    assert found.spec.phases == ["decode"] and len(found.spec.members(found.large)) < 4
    assert all(r["phase"] == "decode" for r in found.rows)


# -- the job end to end, through `detrun submit` on a local Ray


@pytest.mark.slow
def test_decode_job_through_submit_passes_exact_and_fails_split_kv(ray_2gpu, tmp_path):
    """`detrun submit` in this process, on the tests' shared local Ray (a subprocess per run started a Ray
    each; the local start is tested by test_driver_faults and test_exitcodes)."""
    runs = str(tmp_path / "runs")
    codes, outs = {}, {}
    for run_id, extra in (("exact", []), ("split", ["--set", "reference.variant=split_kv"])):
        res = CliRunner().invoke(app, ["submit", JOB, "--runs-root", runs, "--run-id", run_id, "--gpus", "1", *extra])
        codes[run_id], outs[run_id] = res.exit_code, res.output
    assert codes == {"exact": 0, "split": 1}, outs
    held = [line for line in outs["exact"].splitlines() if line.startswith("verdict:")][-1].split("held: ")[1]
    assert held.startswith("repeat, batch bitwise, phase bitwise;")
    last = [line for line in outs["split"].splitlines() if line.startswith("verdict:")][-1]
    assert "batch claimed bitwise" in last and "kv_chunk_size" in last and "phase claimed bitwise" in last
    manifest = yaml.safe_load((tmp_path / "runs" / "split" / "manifest.json").read_text())
    assert manifest["spec"]["phases"] == ["prefill", "decode"] and manifest["status"] == "complete"
