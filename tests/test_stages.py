"""Stage timings: accumulation, the nested breakdown, kernel-profile gating, kernel time read late, the steady
line, and a plan waiting for the last plan's copies (not for the running kernel)."""

import os
import time
import types

import pytest
import torch

from detrun.kernels.backends.base import KernelTime
from detrun.run.worker import run_shard
from detrun.spec.matrix import Shard
from detrun.stages import BESIDE, INPUTS_BESIDE, KERNEL_ROW, Stages, breakdown, process_started_unix
from tests.helpers import small


def test_stages_accumulate_seconds_and_counts(monkeypatch):
    clock = types.SimpleNamespace(now=50.0)
    monkeypatch.setattr("detrun.stages.time", types.SimpleNamespace(perf_counter=lambda: clock.now))
    st = Stages()
    for _ in range(3):
        clock.now += 7.0  # outside the stage: not counted
        with st("plan"):
            clock.now += 0.25
    st.add("kernel", 0.5)
    d = st.as_dict()
    assert d["plan"] == {"s": 0.75, "n": 3}  # only the time inside the blocks
    assert d["kernel"] == {"s": 0.5, "n": 1}


def test_process_start_is_before_now():
    started = process_started_unix()
    assert started is not None and time.time() - 3600 * 24 < started <= time.time()


def test_breakdown_subtracts_nested_stages_and_gaps():
    shard = {
        "stages": {"backend init": {"s": 2.0, "n": 1}, "import flashinfer": {"s": 1.5, "n": 1},
                   "forward": {"s": 3.0, "n": 4}, "plan": {"s": 0.5, "n": 4}, "kernel": {"s": 2.0, "n": 4},
                   "digest": {"s": 0.25, "n": 8}, "device wait": {"s": 0.5, "n": 4}},
        "process_started_unix": 101.0, "task_entered_unix": 103.0, "returned_unix": 112.0,
        "import_s": 1.0, "run_s": 6.0,
        "driver": {"submitted_unix": 100.0, "ready_unix": 112.5, "get_s": 0.1, "write_s": 0.2},
    }
    got = {name: (s, n) for name, s, n in breakdown({"placement_group_s": 0.3}, {"g0": shard, "g1": shard})}
    assert got["backend init (rest)"] == (1.0, 2) and got["import flashinfer"] == (3.0, 2)
    # the kernels are device time beside the host stages (not nested in forward, not in the wall's sum)
    assert got["forward (rest)"] == (5.0, 8) and got[KERNEL_ROW] == (4.0, 8) and "kernel" not in got
    assert got["device wait"] == (1.0, 8)
    assert got["schedule + start worker process"][0] == 2.0 and got["Ray worker boot"][0] == 4.0
    assert got["task (rest: rows, hooks)"][0] == pytest.approx(2 * (6.0 - 5.75))
    assert got["return result to driver"][0] == 1.0 and got["placement group"][0] == 0.3
    assert INPUTS_BESIDE not in got  # no thread built inputs beside the profile session's start
    shard["stages"][INPUTS_BESIDE] = {"s": 1.25, "n": 3}  # run/beside.py: overlaps the stages, not in their sum
    again = {name: (s, n) for name, s, n in breakdown({"placement_group_s": 0.3}, {"g0": shard})}
    assert again[INPUTS_BESIDE] == (1.25, 3) and INPUTS_BESIDE in BESIDE
    assert again["task (rest: rows, hooks)"][0] == pytest.approx(6.0 - 5.75)


class _NoProfiler:  # torch.profiler without CUDA refuses a CUDA-only profile
    def __init__(self, **_):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_kernels_profiled_once_per_plan_in_the_first_repeats(monkeypatch):
    monkeypatch.setattr(torch.profiler, "profile", _NoProfiler)
    from detrun.kernels.backends.flashinfer import FlashInferBackend
    from detrun.spec.model import spec_from_dict

    class Ran(Exception):
        pass

    def run():
        raise Ran

    be = FlashInferBackend.__new__(FlashInferBackend)  # no flashinfer here: only the gating is under test
    be.stages, be._profiled_plans = Stages(), set()
    be.opts = spec_from_dict(small()).flashinfer
    plan = {"backend": "fa2", "padded_batch_size": 1}
    assert be.opts.profile_repeats == 1
    assert not be._profiled(1, "paged", plan)  # repeat 1: not profiled
    assert be._profiled(0, "paged", plan)
    assert not be._profiled(0, "paged", dict(reversed(plan.items())))  # that plan again (any other case or mode)
    assert be._profiled(0, "ragged", plan) and be._profiled(0, "paged", {**plan, "padded_batch_size": 2})
    log = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: log.append("synchronize"))
    monkeypatch.setattr(_NoProfiler, "__enter__", lambda self: log.append("profile") or self)
    be.device = torch.device("cuda", 0)
    with pytest.raises(Ran):
        be._kernels(run, False)  # the profiled run is a real run
    assert log == ["synchronize", "profile"]  # earlier cells' digests (another stream) finish before the window
    be.opts = be.opts.model_copy(update={"profile_repeats": None})
    assert be._profiled(5, "paged", {**plan, "padded_batch_size": 3})  # null: any repeat, still once per plan
    assert not be._profiled(6, "paged", {**plan, "padded_batch_size": 3})
    be.opts = be.opts.model_copy(update={"profile_kernels": False})
    assert not be._profiled(0, "paged", {**plan, "padded_batch_size": 4})


def test_kernel_time_is_read_late_and_counted_once():
    st = Stages()
    timer = KernelTime(2.0, stages=st)
    assert "kernel" not in st.seconds  # nothing counted before it is read
    assert timer.wait() == 2.0 and timer.wait() == 2.0
    assert st.as_dict()["kernel"] == {"s": 0.002, "n": 1}
    out = run_shard(small(modes=["eager"], repeats=1), Shard(0, (0,)), "k1")
    cells = len(small()["cases"])
    stages = out["timings"]["stages"]
    assert stages["kernel"]["n"] == cells  # every cell's kernel read, the last one too
    assert stages["forward"]["n"] == cells and stages["device wait"]["n"] == cells  # each cell's wait: at its rows
    assert stages["digest"]["n"] == cells  # a cell's digests count once (launch and names are one digest)
    assert all(r["run_ms"] > 0 for r in out["rows"])


def test_steady_line_says_when_host_work_overlapped_the_kernel():
    from detrun.present.render import steady_line

    line = steady_line(2, 0.030, {"kernel": 0.026, "plan": 0.002, "digest": 0.001})
    assert "15.000 ms per cell" in line and "rest 0.500 ms" in line and "overhead 15.4%" in line
    line = steady_line(2, 0.028, {"kernel": 0.026, "plan": 0.002, "digest": 0.002})
    assert "of which 1.000 ms ran on the host during the kernel" in line and "overhead 7.7%" in line


def test_steady_line_shows_gc_pauses_within_the_stages_not_added_to_them():
    from detrun.present.render import steady_line

    line = steady_line(2, 0.030, {"kernel": 0.026, "plan": 0.002, "digest": 0.001, "gc pause": 0.0004})
    assert "rest 0.500 ms; gc pauses 0.200 ms within those" in line and "gc pause 0.200" not in line


SHARD = {  # a CPU task: no CUDA context, no flashinfer, no plan or graph stages, one steady-free pass
    "stages": {"backend init": {"s": 0.004, "n": 1}, "inputs": {"s": 0.5, "n": 6}, "forward": {"s": 1.0, "n": 12},
               "kernel": {"s": 0.9, "n": 6}, "digest": {"s": 1.5, "n": 6}, "device wait": {"s": 0.0001, "n": 6},
               "gc pause": {"s": 0.0, "n": 2}},
    "process_started_unix": 101.0, "task_entered_unix": 103.0, "returned_unix": 107.0, "import_s": 1.0,
    "run_s": 3.1, "driver": {"submitted_unix": 100.0, "ready_unix": 107.1, "get_s": 0.01, "write_s": 0.02},
}


def _timed_run(store, **spec):
    """A stored run (inline) given SHARD's timings for each of its shards, as a Ray run records them."""
    from detrun.spec.matrix import shards
    from detrun.spec.model import spec_from_dict
    from tests.helpers import run_inline

    run_inline(store, small(modes=["eager"], **spec), "t")
    for shard in shards(spec_from_dict(small(modes=["eager"], **spec)), 1):
        store.write_timings("t", shard.shard_id, SHARD)
    manifest = store.manifest("t")
    store.write_manifest(dict(manifest, timings={"placement_group_s": 0.1, "tasks_s": 8.0}))


def _timings(store, *flags):
    from typer.testing import CliRunner

    from detrun.cli import app

    out = CliRunner().invoke(app, ["timings", "t", "--runs-root", store.root, *flags], terminal_width=120)
    assert out.exit_code == 0, out.output
    return out.output


def _rows(output: str) -> dict:
    """stage -> seconds column of the printed table."""
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in output.splitlines() if line.startswith("│")]
    return {c[0]: c[1] for c in cells}


def test_timings_show_the_stages_that_took_time_and_fold_the_rest(store):
    _timed_run(store, repeats=2, repeats_per_task=1)
    every, shown = _rows(_timings(store, "--all")), _rows(_timings(store))
    idle = {name for name, s in every.items() if s == "0.000"}
    assert {"cuda context", "import flashinfer", "plan", "graph capture", "jit cache: save"} <= idle
    assert not idle & set(shown) and set(shown) - set(every) == {f"{len(idle) - 1} stages under 0.5 ms (--all lists "
                                                                 "them)"}  # gc pauses: beside the sum, just left out
    assert "device wait" not in shown and every["device wait"] == "0.000"  # 0.2 ms: folded
    assert shown["sum over shards"] == every["sum over shards"]  # the folded row keeps the sum
    assert shown["inputs (rest)"] == every["inputs (rest)"] == "1.000"  # its draws waited for and moved: nested


@pytest.mark.parametrize("per_task, why", [
    (1, "no steady cells: every (case, phase, mode) ran once per task (repeats_per_task: 1)"),
    (2, "no steady cells: no cell ran again in its task (its repeats were skipped, errored or isolated)"),
])
def test_timings_say_why_there_is_no_steady_state_line(store, per_task, why):
    _timed_run(store, repeats=2, repeats_per_task=per_task)
    out = _timings(store)
    assert "steady state" not in out and why in out.splitlines()


def test_the_critical_path_is_the_shard_written_last_from_the_first_submit():
    """Two tasks on one GPU side by side (a, b) and one after a (c): the path is c's, from a's submit, each
    segment its own stretch; a shard without steady cells has one stretch of cells; no times, no path."""
    from detrun.run.resources import critical_path_line
    from detrun.stages import critical_path

    def shard(submit, entered, imports, steady, returned, ready, trace=True):
        return {"driver": {"submitted_unix": submit, "ready_unix": ready, "get_s": 0.25, "write_s": 0.75},
                "task_entered_unix": entered, "import_s": imports, "returned_unix": returned,
                "steady_trace": [[steady, 1, 0.1], [returned, 9, 0.9]] if trace else []}

    timings = {"a": shard(100.0, 101.0, 2.0, 110.0, 130.0, 130.5), "b": shard(100.0, 101.5, 2.0, 111.0, 129.0, 129.5),
               "c": shard(131.0, 132.0, 2.0, 140.0, 150.0, 150.0)}
    last, seconds, segments = critical_path(timings)
    assert (last, seconds) == ("c", 51.0)
    assert segments == [("waiting for its turn", 31.0), ("worker start", 1.0), ("imports", 2.0),
                        ("until its first steady cell", 6.0), ("steady cells", 10.0),
                        ("to the driver and written", 1.0)]
    assert sum(s for _, s in segments) == seconds
    timings["c"] = shard(131.0, 132.0, 2.0, 0.0, 150.0, 150.0, trace=False)
    assert critical_path(timings)[2][3:] == [("its cells (none steady)", 16.0), ("to the driver and written", 1.0)]
    assert critical_path_line(timings).startswith("critical path: shard c written 51.0 s after the first submit "
                                                  "(waiting for its turn 31.0 s, worker start 1.0 s, imports 2.0 s,")
    assert critical_path({"old": {"stages": {}}}) is None and critical_path_line({}) == ""


def test_host_busy_tells_a_thread_on_the_cpu_from_one_that_waited(monkeypatch):
    """SteadyTrace.host spans the first steady cell to the latest whose clocks it read (two system calls: at each
    of the first 8 cells, then every 8th); host_busy reads the thread's CPU share of it."""
    from detrun import stages as st

    read = []  # the cells whose clocks were read: wall, thread CPU, process CPU grow with them

    def clocks():
        read.append(trace.n)
        return (10.0 + 0.25 * trace.n, 0.75 + 0.125 * trace.n, 1.25 + 0.1875 * trace.n)  # exact in binary

    monkeypatch.setattr(st, "host_clocks", clocks)
    trace = st.SteadyTrace(Stages())
    assert trace.host() is None
    trace.cell()
    assert trace.host() is None  # one steady cell spans nothing
    trace.cell()
    assert trace.host()["wall_s"] == 0.25  # a short task: its cells' own clocks
    for _ in range(21):  # cells 3 to 23
        trace.cell()
    assert read == [1, 2, 3, 4, 5, 6, 7, 8, 16]
    host = trace.host()  # cells 1 to 16
    assert host == {"wall_s": 3.75, "thread_cpu_s": 1.875, "process_cpu_s": 2.8125, "niceness": os.nice(0)}
    waited = st.host_busy({"a": {"steady_host": host}})
    assert "thread on a CPU 50% of the wall" in waited and "0.75 CPUs" in waited
    busy = st.host_busy({"a": {"steady_host": {"wall_s": 2.0, "thread_cpu_s": 1.98, "process_cpu_s": 3.0}},
                         "b": {"steady_host": None}})
    assert "99% of the wall" in busy and "1.50 CPUs" in busy and "(1 task(s), 2.0 s)" in busy
    assert st.host_busy({"a": {}}) == ""
