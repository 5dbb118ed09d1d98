"""DETRUN_WORKERS_PER_GPU: several tasks at once on one GPU (Ray fractional GPUs), their rows the same keys,
slot and bits as one task at a time; and the GPU's steady window over its tasks (stages.gpu_steady)."""

import threading
import time
from pathlib import Path

import pytest

from detrun.judge.compare import compare_runs
from detrun.judge.findings import judge
from detrun.run import runner
from detrun.run.resources import gpu_steady_line, run_lines
from detrun.spec.model import spec_from_dict
from detrun.stages import Stages, SteadyTrace, gpu_steady, gpu_steady_caveat
from tests.helpers import small


def _release_when_waiting(release: Path, tasks: int, seen: list, limit_s: float = 90.0) -> threading.Thread:
    """Create `release` once `tasks` tasks wait at their start together (or after limit_s); seen: their PIDs."""
    def watch():
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            waiting = list(release.parent.glob(f"{release.name}.waiting-*"))
            if len(waiting) >= tasks:
                seen.extend(p.name.rsplit("-", 1)[1] for p in waiting)
                break
            time.sleep(0.05)
        release.touch()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_two_workers_share_one_gpu_slot_with_the_keys_slot_and_bits_of_one(ray_2gpu, store, tmp_path, monkeypatch):
    release = tmp_path / "release"
    spec = spec_from_dict(small(modes=["eager"], repeats=2, repeats_per_task=1,
                                env={"DETRUN_TEST_WAIT_FOR": str(release)}))
    seen: list = []
    watcher = _release_when_waiting(release, 2, seen)
    monkeypatch.setenv("DETRUN_WORKERS_PER_GPU", "2")
    shared = runner.submit(spec, store, runner.connect(gpus=1), run_id="shared")
    watcher.join()
    assert len(set(seen)) == 2  # both tasks of the one GPU were running at once, in two processes
    monkeypatch.setenv("DETRUN_WORKERS_PER_GPU", "1")  # the release file exists: no task waits
    alone = runner.submit(spec, store, runner.connect(gpus=1), run_id="alone")
    assert not shared.failures and not alone.failures and shared.gpus == alone.gpus == 1
    assert store.manifest("shared")["timings"]["workers_per_gpu"] == 2
    rows = {run: store.read_rows([run]).to_pylist() for run in ("shared", "alone")}
    assert {r["slot"] for r in rows["shared"]} == {r["slot"] for r in rows["alone"]} == {0}
    assert len({r["pid"] for r in rows["shared"]}) == 2 and {str(r["pid"]) for r in rows["shared"]} == set(seen)
    digests = {run: {r["key"]: (r["out_digest"], r["lse_digest"]) for r in rows[run]} for run in rows}
    assert len(digests["shared"]) == len(rows["shared"]) and digests["shared"] == digests["alone"]
    shared_lines, alone_lines = run_lines(store, "shared"), run_lines(store, "alone")
    assert any(line.startswith("2 workers per GPU (DETRUN_WORKERS_PER_GPU): a task's steady cell")
               for line in shared_lines) and any(line.startswith("GPU steady: ") for line in shared_lines)
    assert not any("workers per GPU" in line or line.startswith("GPU steady") for line in alone_lines)
    cmp = compare_runs(store, ["shared", "alone"])
    assert judge(cmp).exit_code == 0
    assert {v.status for v in cmp.verdicts if v.axis == "run"} == {"equal"}
    assert {v.status for v in cmp.verdicts if v.axis == "gpu"} == {"n/a"}  # two workers are not two GPUs


def test_a_bad_workers_per_gpu_is_a_usage_error_naming_it(monkeypatch):
    from detrun.envflags import driver_settings
    from detrun.errors import DetrunError

    assert driver_settings({"DETRUN_WORKERS_PER_GPU": "3"}).workers_per_gpu == 3
    assert driver_settings({}).workers_per_gpu == 1
    for bad in ("0", "9", "1.5", "two", "-1"):
        with pytest.raises(DetrunError, match=f"DETRUN_WORKERS_PER_GPU={bad!r}: expected a whole number from 1 to 8"):
            driver_settings({"DETRUN_WORKERS_PER_GPU": bad})


def test_the_steady_trace_marks_the_first_every_64th_and_last_cell(monkeypatch):
    stages, clock = Stages(), iter(range(1000))
    monkeypatch.setattr("detrun.stages.time.time", lambda: float(next(clock)))
    trace = SteadyTrace(stages)
    for _ in range(130):
        stages.add("steady cell: kernel", 0.5)
        trace.cell()
    assert trace.points() == [(0.0, 1, 0.5), (63.0, 64, 32.0), (127.0, 128, 64.0), (129.0, 130, 65.0)]


def test_gpu_steady_times_the_window_in_which_all_of_a_gpus_tasks_were_steady():
    # slot 0: task a steady from t=0 to 10 (1 cell per s), task b from 4 to 20 (2 cells per s); window 4-10:
    # a ran 6 cells, b 12; kernel 0.5 s per cell. Slot 1: one task, 10 cells in 5 s. A task without a
    # trace (an isolated cell) and one of another slot alone do not narrow slot 0's window.
    timings = {
        "g0-r0-0": {"slot": 0, "steady_trace": [[0.0, 1, 0.5], [10.0, 11, 5.5]]},
        "g0-r1-1": {"slot": 0, "steady_trace": [[4.0, 1, 0.5], [12.0, 17, 8.5], [20.0, 33, 16.5]]},
        "g1-r0-1": {"slot": 1, "steady_trace": [[100.0, 1, 0.5], [105.0, 11, 5.5]]},
        "g0-r0-0-isolated": {"slot": 0},
    }
    cells, seconds, kernel, tasks = gpu_steady(timings)
    assert (cells, seconds, kernel, tasks) == pytest.approx((6 + 12 + 10, 6 + 5, 0.5 * 28, 3))
    assert gpu_steady({"g0": {"slot": 0, "steady_trace": [[0.0, 1, 0.1], [1.0, 2, 0.2]]},
                       "g0b": {"slot": 0, "steady_trace": [[5.0, 1, 0.1], [6.0, 2, 0.2]]}}) is None  # never together


def test_a_short_or_thin_gpu_steady_window_is_reported_but_not_judged():
    # the H100's shape (2026-12-05): task b (no profile) steady from 0 to 10 s, task a from 9 to 19 s: a 1 s
    # window holding 2 x 100 of the 2 x 1000 steady cells
    staggered = {"a": {"slot": 0, "steady_trace": [[9.0, 1, 0.1], [10.0, 101, 0.2], [19.0, 1001, 1.0]]},
                 "b": {"slot": 0, "steady_trace": [[0.0, 1, 0.1], [9.0, 901, 0.9], [10.0, 1001, 1.0]]}}
    found = gpu_steady(staggered)
    assert found is not None and found[:2] == pytest.approx((200, 1.0))
    caveat = gpu_steady_caveat(staggered, found)
    assert "too short to judge" in caveat and "1.0 s window holding 200 of the tasks' 2000" in caveat
    assert caveat in gpu_steady_line(staggered)
    # overlapping for 8 s of 10, holding 1600 of 2000 cells: judged, no caveat
    together = {"a": {"slot": 0, "steady_trace": [[1.0, 1, 0.1], [9.0, 801, 0.8], [10.0, 901, 0.9]]},
                "b": {"slot": 0, "steady_trace": [[0.0, 1, 0.1], [1.0, 101, 0.2], [9.0, 901, 0.9]]}}
    found = gpu_steady(together)
    assert found[1] == pytest.approx(8.0) and gpu_steady_caveat(together, found) == ""
    assert "too short" not in gpu_steady_line(together)


def test_more_workers_than_a_gpus_tasks_is_said_before_ray_starts(capsys, tmp_path, no_ray, monkeypatch):
    """A job of one task per GPU runs one at a time whatever DETRUN_WORKERS_PER_GPU says: submit says so (and
    what repeats_per_task would let them share the GPU) before connecting to Ray; a job with enough says nothing."""
    from detrun.spec.matrix import workers_note
    from tests.helpers import cli_main, job_file

    monkeypatch.setenv("DETRUN_WORKERS_PER_GPU", "2")
    code, _, err = cli_main(capsys, "submit", job_file(tmp_path, repeats=3), "--runs-root", str(tmp_path / "r"))
    assert code == 3 and "reached Ray" in err  # no_ray: the note came first
    assert ("detrun: DETRUN_WORKERS_PER_GPU=2, but this job has 1 task(s) per GPU (repeats 3, repeats_per_task 3): "
            "at most 1 run at once on a GPU; --set repeats_per_task=2 makes 2") in err
    assert workers_note(spec_from_dict(small(repeats=3, repeats_per_task=2)), 2) == ""
    assert workers_note(spec_from_dict(small(repeats=4)), 1) == ""
    assert workers_note(spec_from_dict(small(repeats=1)), 4).endswith("at most 1 run at once on a GPU")
    assert workers_note(spec_from_dict(small(repeats=3, repeats_per_task=2)), 4).endswith("repeats_per_task=1 makes 3")
