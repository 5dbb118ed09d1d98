"""One shard in-process (what a Ray task runs): cells that fail become error rows and the shard still returns
every row, in cell order; the result is plain values; the next cell is launched before the host waits."""

import pytest
import torch

from detrun.kernels import digest
from detrun.kernels.backends.base import KernelTime
from detrun.kernels.backends.reference import ReferenceBackend
from detrun.kernels.envinfo import environment
from detrun.record.keys import row_key
from detrun.record.rows import SCHEMA
from detrun.run.runner import failure_line
from detrun.run.worker import run_shard
from detrun.spec.matrix import Shard, cells_for, expected_keys
from detrun.spec.model import spec_from_dict
from tests.helpers import OK_ROW, ROW_IDENTITY, modules_to_unpickle, not_plain, small


def test_a_failing_cell_is_an_error_row_and_the_rest_runs(monkeypatch):
    real = ReferenceBackend.forward

    def flaky(self, batch, mode, repeat=0):
        if batch.case == "mixed":
            raise RuntimeError("boom in plan\nsecond line")
        return real(self, batch, mode, repeat)

    monkeypatch.setattr(ReferenceBackend, "forward", flaky)
    data = small(modes=["eager"], repeats=1)
    out = run_shard(data, Shard(0, (0,)), "w1")
    keys = [r["key"] for r in out["rows"]]
    assert sorted(keys) == sorted(expected_keys(spec_from_dict(data), 1))
    assert keys == _in_cell_order(data)  # a cell's rows are written after the next cell ran: order kept
    errors = [r for r in out["rows"] if r["status"] == "error"]
    assert {r["case"] for r in errors} == {"mixed"} and len(errors) == 3
    assert errors[0]["reason"] == "RuntimeError: boom in plan"
    assert all(r["out_digest"] for r in out["rows"] if r["status"] == "ok")


def _in_cell_order(data):
    spec = spec_from_dict(data)
    return [row_key(c.case, r, c.mode, c.repeat, 0) for c in cells_for(spec, (0,)) for r in spec.members(c.case)]


def test_a_digest_that_cannot_be_read_is_its_cells_error(monkeypatch):
    """Digests are read one cell late (they overlap the next plan): a failure there is that cell's, not the next's."""
    real, reads = digest.PendingDigests.names, []

    def names(self):
        reads.append(1)
        if len(reads) == 2:
            raise RuntimeError("lanes lost")
        return real(self)

    monkeypatch.setattr(digest.PendingDigests, "names", names)
    data = small(modes=["eager"], repeats=1)
    rows = run_shard(data, Shard(0, (0,)), "w2")["rows"]
    assert [r["key"] for r in rows] == _in_cell_order(data)
    second = list(data["cases"])[1]
    assert {r["case"] for r in rows if r["status"] == "error"} == {second}
    assert {r["reason"] for r in rows if r["status"] == "error"} == {"RuntimeError: lanes lost"}
    assert len(reads) == len(data["cases"])  # every cell's digests read, the last one after the loop


def test_a_shards_result_is_plain_values_with_the_schemas_row_keys():
    """What a shard task returns is unpickled by the driver, which must not import torch for it: a
    torch.TorchVersion in a row (== to a str, and a str again once in Parquet) would make it. So the result,
    as the task returns it (before anything is written), holds only plain values, and each row only columns
    of the store's schema (the rest take its defaults): its identity, and an ok row its digests and plan."""
    data = small(repeats=1)  # eager rows ok, cudagraph rows skipped on the CPU
    out = run_shard(data, Shard(0, (0,)), "plain")
    assert not_plain(out) == [] and modules_to_unpickle(out) == set()
    assert all(ROW_IDENTITY <= set(r) <= set(SCHEMA.names) for r in out["rows"])
    assert all(OK_ROW <= set(r) for r in out["rows"] if r["status"] == "ok")
    assert sorted(r["key"] for r in out["rows"]) == sorted(expected_keys(spec_from_dict(data), 1))
    assert {(r["mode"], r["status"]) for r in out["rows"]} == {("eager", "ok"), ("cudagraph", "skipped")}
    assert {r["torch"] for r in out["rows"]} == {str(torch.__version__)}  # recorded, as a plain str
    assert not_plain(environment(torch.device("cpu"), {})) == []


def test_failure_line_takes_the_cause():
    exc = RuntimeError("ray::shard_task() (pid=1)\n  File x\nValueError: bad plan")
    assert failure_line(exc) == "ValueError: bad plan"


@pytest.mark.parametrize("depth", [1, 2])
def test_the_next_cell_is_launched_before_the_host_waits_for_a_kernel(monkeypatch, depth):
    """The device always has the next kernel queued: cell i+1 is planned and launched before the host waits for
    cell i's kernel (its time, its digests: at its rows); no cell's kernel is waited for at its own launch."""
    log, forward, wait, kernel = [], ReferenceBackend.forward, digest.PendingDigests.wait, KernelTime.wait

    def logged_forward(self, batch, mode, repeat=0):
        log.append("forward")
        return forward(self, batch, mode, repeat)

    def logged(kind, real):
        def wait_once(self):  # names() and run_ms wait again: no-ops, not logged
            if not getattr(self, "waited", False):
                log.append(kind)
                self.waited = True
            return real(self)
        return wait_once

    monkeypatch.setattr(ReferenceBackend, "forward", logged_forward)
    monkeypatch.setattr(digest.PendingDigests, "wait", logged("digests", wait))
    monkeypatch.setattr(KernelTime, "wait", logged("kernel", kernel))
    monkeypatch.setenv("DETRUN_DIGEST_DEPTH", str(depth))
    data = small(modes=["eager"], repeats=1)
    rows = run_shard(data, Shard(0, (0,)), "w3")["rows"]
    n = len(data["cases"])
    waits = [(kind, log[:at].count("forward")) for at, kind in enumerate(log) if kind != "forward"]
    # cell i's waits (digests, then its kernel time) come after cell i+depth's forward (the last ones after the loop)
    assert waits == [(kind, min(i + 1 + depth, n)) for i in range(n) for kind in ("digests", "kernel")]
    assert [r["key"] for r in rows] == _in_cell_order(data)


def test_a_runner_runs_on_one_intra_op_thread_as_a_ray_task_does():
    """Whatever the process had (a plain process: one per core), as Ray's OMP_NUM_THREADS=1 gives a task; on a GPU
    16 threads slowed a steady cell's host work by ~25% (docs/performance.md)."""
    from detrun.run.worker import ShardRunner

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        ShardRunner(spec_from_dict(small(modes=["eager"], repeats=1)), Shard(0, (0,)), "w-threads")
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_digests_get_a_low_priority_stream_and_cells_a_high_priority_one_where_there_is_a_gpu(monkeypatch):
    """DETRUN_DIGEST_STREAM=low (the default): on a GPU, cells run on a high-priority stream and digests on a
    stream of their own, so graph outputs are kept (cloned); same, or no GPU: one stream."""
    from detrun.run.worker import ShardRunner

    made = []

    class Stream:
        def __init__(self, device, priority=0):
            made.append(priority)

    monkeypatch.setattr(torch.cuda, "Stream", Stream)
    spec = spec_from_dict(small(modes=["eager"], repeats=1))
    runner = ShardRunner(spec, Shard(0, (0,)), "w5")
    assert runner.streams is None and not runner.backend.keep_outputs  # the CPU: nothing to overlap
    runner.use_digest_stream(True)
    assert made == [-1, 0] and runner.streams is not None and runner.backend.keep_outputs
    runner.use_digest_stream(False)
    assert runner.streams is None and not runner.backend.keep_outputs
    monkeypatch.setenv("DETRUN_DIGEST_STREAM", "sideways")
    with pytest.raises(ValueError, match="DETRUN_DIGEST_STREAM='sideways': expected low or same"):
        ShardRunner(spec, Shard(0, (0,)), "w6")


def test_steady_cells_are_timed_from_the_end_of_the_cell_before_so_the_loop_between_them_counts():
    """The host's time between two cells (the loop, the watchdog, bookkeeping) belongs to the later cell: the
    steady cells' seconds then account for the wall as a run sees it, never less."""
    import time as _time

    from detrun.run.worker import ShardRunner
    from detrun.stages import STEADY_CELL

    spec = spec_from_dict(small(modes=["eager"], repeats=2))
    runner = ShardRunner(spec, Shard(0, (0, 1)), "w7")
    cells = list(cells_for(spec, (0, 1)))

    def slow():
        for cell in cells:
            if cell.repeat == 1:
                _time.sleep(0.02)  # between cells, outside any stage
            yield cell

    runner.run(slow())
    steady = runner.stages.counts[STEADY_CELL]
    assert steady == len(cells) // 2
    assert runner.stages.seconds[STEADY_CELL] >= steady * 0.02


@pytest.mark.parametrize("lag", [3, 1, 0])
def test_a_digest_on_its_own_stream_falls_at_most_lag_cells_behind(monkeypatch, lag):
    """With digests on their own stream, the kernel of cell k + lag waits (on the device) for the digest of
    cell k, so a starved digest never leaves the host waiting with no kernel queued; lag 0: unbounded."""
    import contextlib

    from detrun.run import worker

    forwards, waits = [], []

    class Stream:
        def __init__(self, device, priority=0):
            self.priority = priority

        def wait_event(self, event):
            if self.priority == -1:  # the cells' stream
                waits.append((len(forwards), event.cell))

    class Event:
        cell = None

        def record(self, stream=None):
            pass

        def synchronize(self):
            pass

    class Pending(worker.PendingDigests):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.event = Event()
            self.event.cell = len(forwards) - 1  # this digest's cell

    real = ReferenceBackend.forward

    def counted(self, batch, mode, repeat=0):
        forwards.append(mode)
        return real(self, batch, mode, repeat)

    monkeypatch.setattr(torch.cuda, "Stream", Stream)
    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "set_stream", lambda s: None)
    monkeypatch.setattr(worker, "PendingDigests", Pending)
    monkeypatch.setattr(ReferenceBackend, "forward", counted)
    monkeypatch.setenv("DETRUN_DIGEST_DEPTH", "4")
    spec = spec_from_dict(small(modes=["eager"], repeats=1))
    runner = worker.ShardRunner(spec, Shard(0, (0,)), "w8")
    assert runner.lag == worker.digest_lag(4) == 3
    runner.lag = lag
    runner.use_digest_stream(True)
    rows = runner.run()["rows"]
    n = len(spec.cases)
    assert n >= 5 and all(r["status"] == "ok" for r in rows)
    # the wait is queued after cell k + lag - 1 launched, so the next kernel (cell k + lag) runs after it
    assert waits == ([(k + lag, k) for k in range(n - lag + 1)] if lag else [])


def test_a_worker_profiles_its_share_of_the_plans_in_its_first_repeat(store):
    """run_inline of sdpa on the CPU, 4 repeats in two tasks of one slot: the one eager plan is profiled once,
    in the first repeat of the task share_of gives it (the worker hands its shard's share to the backend)."""
    import json

    import pyarrow.dataset as ds

    from detrun.spec.matrix import share_of
    from tests.helpers import run_inline

    run_inline(store, small(backend="sdpa", modes=["eager"], repeats=4, repeats_per_task=2), "shared")
    rows = ds.dataset(f"{store.root}/shared/rows").to_table(columns=["repeat", "path", "plan", "kernels"]).to_pylist()
    plans = {(r["path"], json.dumps(json.loads(r["plan"]), sort_keys=True)) for r in rows}
    profiled = [r["repeat"] for r in rows if r["kernels"]]
    assert len(plans) == 1 and profiled == [2 * share_of(plans.pop(), 2)]


@pytest.mark.parametrize("whole", [True, False])
def test_a_task_that_runs_its_whole_shard_draws_its_first_cases_while_its_backend_is_built(monkeypatch, whole):
    """run_shard without a cell list (a shard task) starts the first cases' draws before the backend is built; with
    one (an isolated worker's cell) they start when its cells do, from that cell's case."""
    from detrun.kernels.inputs import Draws
    from detrun.run import worker

    log = []
    prefetch, make = Draws.prefetch, worker.make_backend

    def logged_prefetch(self, keys):
        keys = list(keys)
        log.append(("draw", keys[0][1]))
        return prefetch(self, keys)

    def logged_make(*args, **kwargs):
        log.append(("backend", ""))
        return make(*args, **kwargs)

    monkeypatch.setattr(Draws, "prefetch", logged_prefetch)
    monkeypatch.setattr(worker, "make_backend", logged_make)
    spec = small(modes=["eager"], repeats=1)
    cells = list(cells_for(spec_from_dict(spec), (0,)))
    rows = run_shard(spec, Shard(0, (0,)), "early", cells=None if whole else cells[-1:])["rows"]
    assert all(r["status"] == "ok" for r in rows) and len(rows) >= (len(cells) if whole else 1)
    built = log.index(("backend", ""))
    if whole:
        assert built > 0 and log[0][0] == "draw"
    else:
        assert built == 0 and log[1][0] == "draw"


def test_the_first_cases_are_built_on_a_thread_while_the_profile_session_opens(monkeypatch):
    """Where the first cell would open the profile session (CUPTI's set-up holds the task's thread for seconds),
    the task opens it before its cells while a thread builds the first cases' batches; each case is built once,
    the rows are those of a task that builds every case itself, and the thread's seconds are a row of their own."""
    import threading
    import time

    from detrun.kernels.backends.profiling import KernelProfiling
    from detrun.run import worker
    from detrun.stages import INPUTS_BESIDE

    built_on, opened = [], []
    real_build, real_window = worker.build_batch, worker.ShardRunner._profile_window

    def logged_build(spec, case, *args):
        batch = real_build(spec, case, *args)
        built_on.append((case, threading.current_thread().name))
        return batch

    def held_window(self, repeat):  # the session's start: this thread is held until the thread built two cases
        if not opened:
            opened.append(threading.current_thread().name)
            deadline = time.monotonic() + 30
            while sum(on == "detrun-inputs" for _, on in built_on) < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
        return real_window(self, repeat)

    monkeypatch.setattr(worker, "build_batch", logged_build)
    monkeypatch.setattr(worker.ShardRunner, "_profile_window", held_window)
    monkeypatch.setattr(KernelProfiling, "opens_at", lambda self, repeat: not opened)
    data = small(backend="sdpa", modes=["eager"], repeats=2)
    beside = run_shard(data, Shard(0, (0, 1)), "beside")
    on_thread = [case for case, on in built_on if on == "detrun-inputs"]
    assert opened == ["MainThread"] and len(on_thread) >= 2
    assert sorted(case for case, _ in built_on) == sorted(spec_from_dict(data).cases)  # each case built once
    assert beside["timings"]["stages"][INPUTS_BESIDE]["n"] == len(on_thread)

    monkeypatch.setattr(KernelProfiling, "opens_at", lambda self, repeat: False)  # every case built by its cell
    built_on.clear()
    plain = run_shard(data, Shard(0, (0, 1)), "plain")
    assert {on for _, on in built_on} == {"MainThread"} and INPUTS_BESIDE not in plain["timings"]["stages"]
    digests = lambda rows: sorted((r["key"], r["out_digest"], r["lse_digest"]) for r in rows)  # noqa: E731
    assert digests(beside["rows"]) == digests(plain["rows"]) and len(beside["rows"]) > 0
