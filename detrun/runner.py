"""Ray: connect or start, find the alive GPUs, one placement-group bundle per GPU, one task per shard.

The only module that uses Ray's scheduling APIs. Rows are written per shard by the driver, atomically,
so a retried, resumed or interrupted run never holds a partial or duplicated shard.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Deque, Dict, List, Optional, Sequence, Tuple

import ray
from ray.util.placement_group import placement_group, placement_group_table, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from . import heartbeat
from .errors import AUTH_HINT, DetrunError, interruption
from .matrix import Shard, check_size, shard_keys, shard_rows, shards
from .spec import JobSpec, spec_from_dict
from .store import RunStore, make_row, new_run_id

PG_TIMEOUT_S = float(os.environ.get("DETRUN_PG_TIMEOUT_S", "60"))
# A bundle whose node died and that Ray could not re-place for this long is given up (no spare GPU).
NODE_LOSS_GRACE_S = float(os.environ.get("DETRUN_NODE_LOSS_GRACE_S", "30"))
# Test-only fault hooks, inert unless a spec's env sets them (they reach the task via runtime_env).
TEST_CRASH_ONCE = "DETRUN_TEST_CRASH_ONCE"  # path of a marker file: the first task to create it dies
TEST_SLEEP_S = "DETRUN_TEST_SLEEP_S"  # seconds every task sleeps before running
# A task killed by Ray's memory monitor fails at once (Ray's default retries it without end);
# a cluster we join keeps its own setting, and _collect turns the OOM into error rows.
LOCAL_SYSTEM_CONFIG = {"task_oom_retries": 0}


def _test_hooks() -> None:
    marker = os.environ.get(TEST_CRASH_ONCE)
    if marker:
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            pass
        else:
            os._exit(1)  # a worker crash: Ray retries it (max_retries), it is no exception of ours
    time.sleep(float(os.environ.get(TEST_SLEEP_S, "0")))


@ray.remote(num_gpus=1, max_retries=1, retry_exceptions=False)
def shard_task(spec_data: dict, shard: Shard, run_id: str) -> dict:
    """One shard on one GPU (num_gpus in the decorator: a fresh worker process per task).

    System failures (worker crash, node death) are retried once; exceptions never are, so a
    failing or mismatching kernel is not re-run until it happens to pass.
    """
    entered, start = time.time(), time.perf_counter()
    from .worker import run_shard  # torch and detrun: the task's first imports

    imported = time.perf_counter() - start
    _test_hooks()
    return run_shard(spec_data, shard, run_id, {"node_id": ray.get_runtime_context().get_node_id()},
                     {"task_entered_unix": entered, "import_s": imported})


def local_gpu_count() -> int:
    if not shutil.which("nvidia-smi"):
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


def alive_gpus(accelerator_type: Optional[str] = None) -> int:
    """GPUs over the alive nodes (ray.nodes() keeps dead ones), optionally of one accelerator type."""
    total = 0
    for node in ray.nodes():
        resources = node.get("Resources", {})
        if node.get("Alive") and (not accelerator_type or resources.get(f"accelerator_type:{accelerator_type}")):
            total += int(resources.get("GPU", 0))
    return total


def _init(**kwargs) -> None:
    """ray.init, keeping the caller's SIGTERM handler (Ray's exits without marking the run incomplete)."""
    handler = signal.getsignal(signal.SIGTERM)
    try:
        ray.init(**kwargs)
    finally:
        if callable(handler) and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, handler)


def connect(address: Optional[str] = None, gpus: Optional[int] = None,
            accelerator_type: Optional[str] = None) -> int:
    """Use a running Ray (tests, jobs, ray://, host:port) or start a local one; return the GPUs to use.

    gpus None means every alive GPU (of accelerator_type, when given).
    """
    if not ray.is_initialized():
        kwargs = dict(include_dashboard=False, log_to_driver=False, configure_logging=False)
        try:
            if address:
                _init(address=address, **kwargs)
            else:
                declared = gpus if gpus is not None else max(1, local_gpu_count())
                _init(address="local", num_gpus=declared, _system_config=LOCAL_SYSTEM_CONFIG, **kwargs)
        except ray.exceptions.AuthenticationError:
            raise DetrunError(f"the Ray cluster at {address} requires authentication: {AUTH_HINT}") from None
        except ConnectionError as exc:
            raise DetrunError(f"cannot connect to Ray at {address}: {str(exc).strip().splitlines()[0]}") from None
    available = alive_gpus(accelerator_type)
    kind = f" of accelerator type {accelerator_type}" if accelerator_type else ""
    if available < 1:
        raise DetrunError(f"the Ray cluster has no alive GPU{kind} (start it with --num-gpus, or pass --gpus N)")
    if gpus is not None and gpus > available:
        raise DetrunError(f"--gpus {gpus} asked, but the Ray cluster has {available} alive GPU(s){kind}")
    return gpus or available


def failure_line(exc: BaseException) -> str:
    """The line of a Ray error that names the cause (the last one of its traceback)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return lines[-1][:300] if lines else type(exc).__name__


@dataclass
class SubmitResult:
    run_id: str
    gpus: int
    notes: List[str] = field(default_factory=list)
    failures: List[str] = field(default_factory=list)
    shards_run: int = 0


@dataclass
class RunOptions:
    accelerator_type: Optional[str] = None
    task_timeout: Optional[float] = None  # seconds from a task's submission (its retry included)
    on_progress: Optional[Callable[[int, int], None]] = None


def submit(
    spec: JobSpec,
    store: RunStore,
    gpus: int,
    spec_path: str = "",
    run_id: Optional[str] = None,
    on_progress: Optional[Callable[[int, int], None]] = None,
    options: Optional[RunOptions] = None,
    manifest_extra: Optional[dict] = None,
) -> SubmitResult:
    """Run every shard of spec on `gpus` GPUs of the connected Ray; rows land in the store."""
    options = options or RunOptions()
    options.on_progress = on_progress or options.on_progress
    run_id = run_id or new_run_id(spec.name)
    check_size(spec, gpus)
    spec_data = spec.model_dump(mode="json")
    store.create_run(run_id, spec_data, gpus, spec_path, accelerator_type=options.accelerator_type,
                     **(manifest_extra or {}))
    return _ShardRun(spec, store, run_id, shards(spec, gpus), gpus, options).run()


def missing_shards(store: RunStore, run_id: str) -> Tuple[JobSpec, List[Shard]]:
    """The shards of a run whose part file is missing, unreadable or short of rows."""
    manifest = store.manifest(run_id)
    spec = spec_from_dict(manifest["spec"], f"{run_id}/manifest.json")
    todo = []
    for shard in shards(spec, int(manifest["gpus"])):
        stored = store.shard_keys(run_id, shard.shard_id)
        if stored is None or not set(shard_keys(spec, shard)) <= stored:
            todo.append(shard)
    return spec, todo


def resume(store: RunStore, run_id: str, available: int, options: Optional[RunOptions] = None,
           manifest_extra: Optional[dict] = None) -> SubmitResult:
    """Run only the shards a run lacks, on up to `available` GPUs (one bundle per missing slot)."""
    spec, todo = missing_shards(store, run_id)
    store.reopen_run(run_id, **(manifest_extra or {}))
    bundles = min(available, len({s.slot for s in todo}))
    return _ShardRun(spec, store, run_id, todo, bundles, options or RunOptions()).run()


class _ShardRun:
    """One placement group; each bundle runs its queue of shards one task at a time."""

    def __init__(self, spec: JobSpec, store: RunStore, run_id: str, todo: Sequence[Shard], bundles: int,
                 options: RunOptions):
        self.spec, self.store, self.run_id, self.options = spec, store, run_id, options
        self.spec_data = spec.model_dump(mode="json")
        self.result = SubmitResult(run_id, bundles)
        self.total, self.finished = len(todo), 0
        slots = sorted({s.slot for s in todo})
        self.queues: Dict[int, Deque[Shard]] = {b: deque() for b in range(bundles)}
        for shard in todo:  # a fresh run maps slot i to bundle i; a resume may fold slots together
            self.queues[slots.index(shard.slot) % bundles].append(shard)
        self.pending: Dict[ray.ObjectRef, Tuple[Shard, int, float]] = {}
        self.submitted_unix: Dict[str, float] = {}
        self.lost_since: Dict[int, float] = {}
        self.cpus = min(1.0, float(ray.cluster_resources().get("CPU", 1)) / max(bundles, 1))

    def _bundle(self) -> dict:
        bundle = {"GPU": 1, "CPU": self.cpus}
        if self.options.accelerator_type:
            bundle[f"accelerator_type:{self.options.accelerator_type}"] = 0.001
        return bundle

    def run(self) -> SubmitResult:
        if not self.total:
            self.store.finish_run(self.run_id, "complete", failures=[])
            return self.result
        start = time.perf_counter()
        pg = placement_group([self._bundle()] * len(self.queues), strategy="SPREAD")
        status, timings = "incomplete", {}
        try:
            ready = self._wait_placed(pg)
            if not ready:
                raise DetrunError(f"could not reserve {len(self.queues)} GPU(s) within {PG_TIMEOUT_S:.0f} s")
            timings["placement_group_s"] = time.perf_counter() - start
            self._loop(pg)
            timings["tasks_s"] = time.perf_counter() - start - timings["placement_group_s"]
            status = "complete" if not self.result.failures else "incomplete"
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM under the CLI (errors.Terminated)
            for ref in self.pending:
                ray.cancel(ref, force=True)
            self.result.failures.append(f"{interruption(exc)} with {len(self.pending)} task(s) running")
            raise
        finally:
            remove_placement_group(pg)
            self.store.finish_run(self.run_id, status, failures=self.result.failures, timings=timings)
        return self.result

    def _loop(self, pg) -> None:
        env = {"env_vars": dict(self.spec.env)}
        for bundle in self.queues:
            self._launch(pg, bundle, env)
        while self.pending:
            done, _ = ray.wait(list(self.pending), num_returns=1, timeout=1.0)
            for ref in done:
                shard, bundle, _ = self.pending.pop(ref)
                self._collect(ref, shard)
                self._launch(pg, bundle, env)
            self._expire()
            self._give_up_lost_bundles(pg)
            self._heartbeat()
            if self.options.on_progress:
                self.options.on_progress(self.finished, self.total)

    def _launch(self, pg, bundle: int, env: dict) -> None:
        if not self.queues[bundle]:
            return
        shard = self.queues[bundle].popleft()
        strategy = PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=bundle)
        task = shard_task.options(scheduling_strategy=strategy, runtime_env=env, num_cpus=self.cpus)
        self.submitted_unix[shard.shard_id] = time.time()
        self.pending[task.remote(self.spec_data, shard, self.run_id)] = (shard, bundle, time.monotonic())

    def _fail(self, shard: Shard, reason: str) -> None:
        self.finished += 1
        self.result.failures.append(f"shard {shard.shard_id}: {reason}")

    def _collect(self, ref: ray.ObjectRef, shard: Shard) -> None:
        ready, start = time.time(), time.perf_counter()
        try:
            out = ray.get(ref)
        except ray.exceptions.OutOfMemoryError as exc:
            return self._error_rows(shard, f"killed by Ray's memory monitor (out of memory): {failure_line(exc)}")
        except ray.exceptions.RayError as exc:
            return self._fail(shard, f"{type(exc).__name__}: {failure_line(exc)}")
        got = time.perf_counter()
        self.store.write_blobs(self.run_id, out["blobs"])
        self.store.write_rows(self.run_id, shard.shard_id, out["rows"])
        driver = {"submitted_unix": self.submitted_unix.get(shard.shard_id), "ready_unix": ready,
                  "get_s": got - start, "write_s": time.perf_counter() - got}
        self.store.write_timings(self.run_id, shard.shard_id, dict(out.get("timings", {}), driver=driver))
        self.finished += 1
        self.result.shards_run += 1
        if out["note"] and out["note"] not in self.result.notes:
            self.result.notes.append(out["note"])
            print(out["note"], file=sys.stderr)

    def _error_rows(self, shard: Shard, reason: str) -> None:
        """The shard failed as a whole: an error row for each of its keys, and a failure."""
        rows = [make_row(run_id=self.run_id, key=key, case=cell.case, request=request, mode=cell.mode,
                         repeat=cell.repeat, slot=shard.slot, shard=shard.shard_id, status="error", reason=reason)
                for key, cell, request in shard_rows(self.spec, shard)]
        self.store.write_rows(self.run_id, shard.shard_id, rows)
        self._fail(shard, reason)

    def _drop(self, ref: ray.ObjectRef, reason: str, rest: str) -> None:
        """Cancel a pending task and fail it; its bundle's queue is not run (its GPU may be gone)."""
        shard, bundle, _ = self.pending.pop(ref)
        ray.cancel(ref, force=True)
        self._fail(shard, reason)
        while self.queues[bundle]:
            self._fail(self.queues[bundle].popleft(), f"not run: {rest} on {shard.shard_id}")

    def _expire(self) -> None:
        limit = self.options.task_timeout
        if not limit:
            return
        now = time.monotonic()
        for ref, (_, _, started) in list(self.pending.items()):
            if now - started > limit:
                self._drop(ref, f"timed out after {limit:g} s (cancelled)", "its GPU timed out")

    def _give_up_lost_bundles(self, pg) -> None:
        """A node died and Ray found no GPU to re-place its bundle: fail its shards instead of waiting forever."""
        placed = placement_group_table(pg).get("bundles_to_node_id", {})
        alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
        now = time.monotonic()
        for bundle in self.queues:
            if placed.get(bundle) in alive:
                self.lost_since.pop(bundle, None)
            elif now - self.lost_since.setdefault(bundle, now) > NODE_LOSS_GRACE_S:
                for ref in [r for r, (_, b, _) in self.pending.items() if b == bundle]:
                    self._drop(ref, "its node died and no GPU was left to retry on", "its node died")

    def _wait_placed(self, pg) -> bool:
        """Wait up to PG_TIMEOUT_S for the placement group, beating the heartbeat meanwhile."""
        ready, deadline = pg.ready(), time.monotonic() + PG_TIMEOUT_S
        while (left := deadline - time.monotonic()) > 0:
            if ray.wait([ready], timeout=min(heartbeat.PERIOD_S, left))[0]:
                return True
            self._heartbeat()
        return False

    def _heartbeat(self) -> None:
        """Refresh the manifest's driver heartbeat once a period (create_run or reopen_run wrote the first)."""
        now = time.monotonic()
        if now - vars(self).setdefault("_beat_at", now) >= heartbeat.PERIOD_S:
            self.store.beat(self.run_id)
            self._beat_at = now
