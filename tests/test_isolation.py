"""Crash isolation on Ray: a cell that kills its process or hangs is run alone and recorded, the rest of
the run completes; known-bug cells run isolated (reproduced, or 'did not reproduce (fixed?)')."""

import time

import pytest

from detrun.judge.compare import compare_runs
from detrun.judge.findings import judge
from detrun.run import runner
from detrun.run.isolation import NOT_REPRODUCED, REPRODUCED, BugSamples, Isolated, ShardBook
from detrun.spec.matrix import Cell, Shard, expected_keys, shards
from detrun.spec.model import spec_from_dict
from tests.helpers import small


def _rows(store, run_id):
    return {r["key"]: r for r in store.read_rows([run_id]).to_pylist()}


@pytest.mark.slow
def test_crashing_and_hanging_cells_are_isolated_and_the_rest_compared(ray_2gpu, store, monkeypatch):
    """The hung cell is cancelled 8 s after its isolated worker reached it, however slow the worker was to
    start (a loaded machine may take a minute: the grace for reaching the cell is 600 s here); the crash is
    known from its process's end (it dies at once, far inside the 8 s)."""
    monkeypatch.setenv("DETRUN_ISOLATION_GRACE_S", "600")
    spec = spec_from_dict(small(repeats=1, modes=["eager"], reference={"faults": {"mixed": "crash",
                                "prefix_shared": "hang"}}, isolation={"cell_timeout_s": 8}))
    result = runner.submit(spec, store, runner.connect(gpus=1), run_id="crashy")
    assert result.failures == [] and store.manifest("crashy")["status"] == "complete"
    rows = _rows(store, "crashy")
    assert sorted(rows) == sorted(expected_keys(spec, 1))  # every cell has its rows, none twice
    by_case = {}
    for r in rows.values():
        by_case.setdefault(r["case"], set()).add((r["status"], r["reason"].split(" (")[0]))
    assert by_case["mixed"] == {("error", "isolated: its process died")}, by_case
    assert by_case["prefix_shared"] == {("error", "isolated: hung: no result 8 s after its cell started, "
                                                  "its worker was ended")}, by_case
    assert all(by_case[c] == {("ok", "")} for c in ("alone", "mixed_decode", "prefix_alone")), by_case
    assert "run alone because its shard's process died" in rows["mixed/short/eager/r0/g0"]["reason"]
    verdict = judge(compare_runs(store, ["crashy"]))
    assert verdict.exit_code == 1 and "5 error rows" in verdict.headline  # mixed 3 + prefix_shared 2
    target = next(c for c in verdict.claims if c.axis == "batch")
    assert target.status == "held" and target.groups > 0  # alone vs mixed_decode still compared


@pytest.mark.slow
def test_known_bug_cells_run_isolated_once_per_bug(ray_2gpu, store):
    spec = spec_from_dict(small(repeats=2, repeats_per_task=2, modes=["eager"], reference={"faults": {
        "mixed": "known_bug_crash", "prefix_shared": "known_bug_pass"}}))
    runner.submit(spec, store, runner.connect(gpus=1), run_id="bugs")
    rows = _rows(store, "bugs")
    assert sorted(rows) == sorted(expected_keys(spec, 1))
    crash0, crash1 = rows["mixed/target/eager/r0/g0"], rows["mixed/target/eager/r1/g0"]
    assert crash0["status"] == "known_bug" and crash0["reason"].startswith(f"{REPRODUCED}: its process died")
    assert crash1["status"] == "known_bug" and crash1["reason"].startswith("not run: reference fault known_bug_crash")
    assert crash1["reason"].endswith("it reproduced at mixed/eager/r0/g0")
    for repeat in (0, 1):  # a bug that did not reproduce lets its other cells run too
        ran = rows[f"prefix_shared/sibling/eager/r{repeat}/g0"]
        assert ran["status"] == "ok" and ran["out_digest"] and ran["reason"].startswith(NOT_REPRODUCED)
    verdict = judge(compare_runs(store, ["bugs"]))
    assert verdict.exit_code == 0
    (fixed,) = verdict.of("known_bug_fixed")
    assert fixed.title.startswith("4 rows ran although marked as a known bug: known bug did not reproduce (fixed?)")
    assert {f.kind for f in verdict.findings if f.severity == "warn"} == {"known_bug", "known_bug_fixed"}


def test_bug_samples_stop_after_a_reproduction():
    shard = Shard(0, (0, 1, 2))
    items = [Isolated(shard, Cell("c", "cudagraph", r), "known_bug", "bug A") for r in range(3)]
    bugs = BugSamples(samples=1)
    assert [bugs.admit(i) for i in items] == ["run", "wait", "wait"]
    assert bugs.resolve(items[0], True) == items[1:] and bugs.admit(items[1]) == "reproduced"
    passing = BugSamples(samples=2)
    assert [passing.admit(i) for i in items] == ["run", "run", "wait"]
    assert passing.resolve(items[0], False) == [items[2]] and passing.admit(items[2]) == "run"


def test_shard_book_writes_rows_in_cell_order_once_every_cell_is_in():
    spec = spec_from_dict(small(repeats=1, modes=["eager"]))
    shard = Shard(0, (0,))
    out = {"rows": [{"case": "alone", "mode": "eager", "repeat": 0, "key": "a"},
                    {"case": "prefix_alone", "mode": "eager", "repeat": 0, "key": "p"}], "blobs": {"d": b"x"}}
    book = ShardBook(spec, shard, out, [Cell("mixed", "eager", 0)])
    assert not book.done
    book.fill(Cell("mixed", "eager", 0), [{"case": "mixed", "mode": "eager", "repeat": 0, "key": "m"}], {"e": b"y"})
    assert book.done and [r["key"] for r in book.rows()] == ["a", "m", "p"] and set(book.blobs) == {"d", "e"}


@pytest.mark.slow
def test_known_bugs_inline_run_in_their_shard_and_a_crash_there_is_isolated(ray_2gpu, store):
    spec = spec_from_dict(small(repeats=1, modes=["eager"], reference={"faults": {"mixed": "known_bug_crash"}},
                                isolation={"known_bugs": "inline"}))
    runner.submit(spec, store, runner.connect(gpus=1), run_id="inline")
    rows = _rows(store, "inline")
    assert sorted(rows) == sorted(expected_keys(spec, 1))
    mixed = {r["status"] for r in rows.values() if r["case"] == "mixed"}
    assert mixed == {"error"}
    assert "run alone because its shard's process died" in rows["mixed/long/eager/r0/g0"]["reason"]
    assert {r["status"] for r in rows.values() if r["case"] != "mixed"} == {"ok"}


def test_an_isolated_cell_is_timed_from_its_start_and_a_slow_start_is_not_a_hang(store, monkeypatch):
    """The driver's rule, without Ray: a cell hangs only cell_timeout_s after its worker reached it (however
    long ago it was submitted); a worker that never reached its cell is ended after the grace, and its rows
    say so, not "hung"."""
    monkeypatch.setattr(runner.ray, "cluster_resources", lambda: {"CPU": 2.0})
    cancelled = []
    monkeypatch.setattr(runner.ray, "cancel", lambda ref, force: cancelled.append(ref))
    monkeypatch.setenv("DETRUN_ISOLATION_GRACE_S", "60")  # read when the run starts
    spec = spec_from_dict(small(repeats=1, modes=["eager"], isolation={"cell_timeout_s": 5}))
    (shard,) = shards(spec, 1)
    run = runner._ShardRun(spec, store, "t", [], 1, runner.RunOptions())  # nothing queued behind the cells
    cases = ["alone", "mixed", "mixed_decode", "prefix_alone"]
    cells = [Cell(case, "eager", 0) for case in cases]
    run.books[shard.shard_id] = ShardBook(spec, shard, None, cells)
    now = time.monotonic()
    # submitted 100 s ago, cell started 4 s ago | started 6 s ago | not started, 64 s | not started, 66 s
    for cell, submitted, began in zip(cells, (100, 100, 64, 66), (4, 6, None, None)):
        gen = cell.case  # stands for the task's ObjectRefGenerator
        run.pending[gen] = (Isolated(shard, cell, "crashed", "its shard's process died"), 0, now - submitted)
        if began is not None:
            run.cell_began[gen] = now - began
    run._expire()
    assert cancelled == ["mixed", "prefix_alone"] and sorted(run.pending) == ["alone", "mixed_decode"]
    reasons = {key[0]: {r["reason"].split(" (")[0] for r in rows}
               for key, rows in run.books[shard.shard_id].by_cell.items()}
    assert reasons == {"mixed": {"isolated: hung: no result 5 s after its cell started, its worker was ended"},
                       "prefix_alone": {"isolated: its worker did not reach the cell within 65 s"}}
