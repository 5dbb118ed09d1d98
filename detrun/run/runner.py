"""Ray: connect or start, find the alive GPUs, one placement-group bundle per GPU, one task per shard.

The only module that uses Ray's scheduling APIs. Rows are written per shard by the driver, atomically,
so a retried, resumed or interrupted run never holds a partial or duplicated shard.
"""

from __future__ import annotations

import logging
import shutil
import signal
import subprocess
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence, Tuple, Union

import ray
from ray.util.placement_group import placement_group, placement_group_table, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from ..envflags import driver_settings
from ..errors import AUTH_HINT, DetrunError, failure_line, first_line, interruption, mark_incomplete
from ..record.status import RunStatus, Status
from ..record.task import TaskResult
from ..spec.matrix import Shard, cells_for, check_size, shards
from ..spec.model import JobSpec
from ..spec.versions import environments
from ..store.manifests import new_run_id
from ..store.runs import RunStore
from . import faults
from .isolation import (
    BugSamples,
    Isolated,
    ShardBook,
    deferred_cell,
    finished_rows,
    lost_rows,
    reproduced,
    unfinished_rows,
)
from .jitcache import CONTEXT_KEY as JIT_CACHE
from .raylog import ray_output
from .resources import host_peak_mb
from .resume import missing_shards

log = logging.getLogger(__name__)
# A task killed by Ray's memory monitor fails at once (Ray's default retries it without end);
# a cluster we join keeps its own setting, and _collect turns the OOM into error rows.
LOCAL_SYSTEM_CONFIG = {"task_oom_retries": 0}


@ray.remote(num_gpus=1, max_retries=1, retry_exceptions=False)
def shard_task(spec_data: dict, shard: Shard, run_id: str, context: Optional[dict] = None) -> TaskResult:
    """One shard on one GPU (num_gpus in the decorator: a fresh worker process per task).

    System failures (worker crash, node death) are retried once; exceptions never are, so a
    failing or mismatching kernel is not re-run until it happens to pass.
    """
    runner, timings = _start(spec_data, shard, run_id, context, draw_first=True)
    from .worker import finish_shard  # imported by _start, inside its timing

    return finish_shard(runner, None, True, timings)


CELL_STARTED = "cell started"  # an isolated worker's first yield: its backend is built, its cell runs next


@ray.remote(num_gpus=1, max_retries=0)
def cell_task(spec_data: dict, item: Isolated, run_id: str, context: Optional[dict] = None):
    """One cell alone in a sacrificial worker (isolation.py): never retried; a crash or hang is its result.
    Yields CELL_STARTED, then the result: the driver times the cell from the first yield, so a worker
    that is slow to start is never taken for a hung cell, and a crash is known from its process's end."""
    runner, timings = _start(spec_data, item.shard, run_id, context, item.force)
    from .worker import finish_shard

    yield CELL_STARTED
    yield finish_shard(runner, [item.cell], False, timings)


def _start(spec_data: dict, shard: Shard, run_id: str, context: Optional[dict] = None, force: bool = False,
           draw_first: bool = False):
    """A task's runner, ready for its first cell, and the task's own timings so far. context: the driver's
    settings for the task (jit_cache: the runs root of FlashInfer's modules); draw_first: start_shard's."""
    entered, start = time.time(), time.perf_counter()
    from .worker import start_shard  # torch and detrun: the task's first imports

    imported = time.perf_counter() - start
    faults.at_task_start()  # tests' injected crash or sleep (faults.py); nothing unless they set it
    context = {"node_id": ray.get_runtime_context().get_node_id(), **(context or {})}
    return start_shard(spec_data, shard, run_id, context, force, draw_first), {"task_entered_unix": entered,
                                                                               "import_s": imported}


# Ray starts its workers at niceness 15 (raylet's worker_niceness), below every other process on the machine; a task
# feeds a GPU, so it runs at DETRUN_WORKER_NICENESS (0 unless set), as Ray's job manager starts its own supervisor.
RAY_NICENESS = "RAY_worker_niceness"


def task_runtime_env(spec: JobSpec, niceness: Optional[int] = None) -> dict:
    """A task's Ray runtime_env: the job's env flags, and its versions: environment's pip install (one per run:
    submission.py gives each environment a run of its own). With niceness, Ray starts the task's worker process at
    it (RAY_NICENESS, above); neither the job's env: nor the rows' flags change."""
    envs = environments(spec)
    if len(envs) > 1:
        raise DetrunError(f"versions: a run runs one environment, the spec names {len(envs)}; "
                          "detrun submit runs each in a run of its own")
    nice = {} if niceness is None else {RAY_NICENESS: str(niceness)}
    return {"env_vars": {**nice, **spec.env}, **(envs[0].runtime_env() if envs else {})}


def not_installed(spec: JobSpec, exc: Exception) -> DetrunError:
    """Ray could not build a task's runtime_env (RuntimeEnvSetupError): one error naming the version (exit 2)."""
    envs = environments(spec)
    what = f"versions: {envs[0].name} cannot be installed" if envs else "the task's runtime_env cannot be set up"
    return DetrunError(f"{what}: {install_failure(exc)}")


def install_failure(exc: Exception) -> str:
    """The line of a RuntimeEnvSetupError that says why (pip's ERROR line when there is one)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    pip = [line for line in lines if line.startswith("ERROR:")]
    return first_line(exc, typed=False, limit=500, text=(pip or lines[-1:] or [""])[0])


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
            accelerator_type: Optional[str] = None, verbose: bool = False) -> int:
    """Use a running Ray (tests, jobs, ray://, host:port, auto) or start a local one (no address, or
    "local"); return the GPUs to use.

    gpus None means every alive GPU (of accelerator_type, when given). Ray's own output (raylog.py) reaches
    stderr only when verbose.
    """
    log_to_driver = ray_output(verbose)
    if not ray.is_initialized():
        kwargs = dict(include_dashboard=False, log_to_driver=log_to_driver, configure_logging=False)
        try:
            if address and address != "local":
                _init(address=address, **kwargs)
            else:
                declared = gpus if gpus is not None else max(1, local_gpu_count())
                _init(address="local", num_gpus=declared, _system_config=LOCAL_SYSTEM_CONFIG, **kwargs)
        except ray.exceptions.AuthenticationError:
            raise DetrunError(f"the Ray cluster at {address} requires authentication: {AUTH_HINT}") from None
        except ConnectionError as exc:
            raise DetrunError(f"cannot connect to Ray at {address}: {first_line(exc, typed=False)}") from None
    available = alive_gpus(accelerator_type)
    kind = f" of accelerator type {accelerator_type}" if accelerator_type else ""
    if available < 1:
        raise DetrunError(f"the Ray cluster has no alive GPU{kind} (start it with --num-gpus, or pass --gpus N)")
    if gpus is not None and gpus > available:
        raise DetrunError(f"--gpus {gpus} asked, but the Ray cluster has {available} alive GPU(s){kind}")
    return gpus or available


@dataclass
class SubmitResult:
    run_id: str
    gpus: int
    notes: List[str] = field(default_factory=list)
    failures: List[str] = field(default_factory=list)
    shards_run: int = 0
    devices: set = field(default_factory=set)  # the rows' gpu_name (cpu:<machine> on a task without CUDA)


@dataclass
class RunOptions:
    accelerator_type: Optional[str] = None
    task_timeout: Optional[float] = None  # seconds from a task's submission (its retry included)
    on_progress: Optional[Callable[[int, int], None]] = None
    jit_cache: Optional[str] = None  # runs root whose jit-cache/ the tasks restore from and save to (jitcache.py)


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
    task_runtime_env(spec)  # one versions: environment at most (submission.py splits a job's), before the run exists
    spec_data = spec.model_dump(mode="json")
    store.create_run(run_id, spec_data, gpus, spec_path, accelerator_type=options.accelerator_type,
                     **(manifest_extra or {}))
    return _ShardRun(spec, store, run_id, shards(spec, gpus), gpus, options).run()


def resume(store: RunStore, run_id: str, available: int, options: Optional[RunOptions] = None,
           manifest_extra: Optional[dict] = None, todo: Optional[Tuple[JobSpec, List[Shard]]] = None) -> SubmitResult:
    """Run only the shards a run lacks (todo: resume.missing_shards, when already found), on up to
    `available` GPUs (one bundle per missing slot)."""
    spec, shards_todo = todo or missing_shards(store, run_id)
    store.reopen_run(run_id, **(manifest_extra or {}))
    bundles = min(available, len({s.slot for s in shards_todo}))
    return _ShardRun(spec, store, run_id, shards_todo, bundles, options or RunOptions()).run()


class _ShardRun:
    """One placement group; each bundle runs its queue of shards one task at a time."""

    def __init__(self, spec: JobSpec, store: RunStore, run_id: str, todo: Sequence[Shard], bundles: int,
                 options: RunOptions):
        self.spec, self.store, self.run_id, self.options = spec, store, run_id, options
        self.settings = driver_settings()  # DETRUN_HEARTBEAT_S and the waits below (the CLI checked them first)
        self.spec_data = spec.model_dump(mode="json")
        self.result = SubmitResult(run_id, bundles)
        self.total, self.finished = len(todo), 0
        slots = sorted({s.slot for s in todo})
        self.queues: Dict[int, Deque[Union[Shard, Isolated]]] = {b: deque() for b in range(bundles)}
        for shard in todo:  # a fresh run maps slot i to bundle i; a resume may fold slots together
            self.queues[slots.index(shard.slot) % bundles].append(shard)
        # a shard's ObjectRef or an isolated cell's ObjectRefGenerator: (item, bundle, submitted monotonic)
        self.pending: Dict[Any, Tuple[Union[Shard, Isolated], int, float]] = {}
        self.cell_began: Dict[Any, float] = {}  # isolated cells whose worker yielded CELL_STARTED: when
        self.cell_out: Dict[Any, ray.ObjectRef] = {}  # an isolated worker's first yield, if not CELL_STARTED
        self.books: Dict[str, ShardBook] = {}  # shards waiting for their isolated cells
        self.failed: set = set()  # shard ids given up (their isolated cells still running are dropped)
        self.bugs = BugSamples(spec.isolation.samples)
        self.parked: Dict[Isolated, int] = {}  # known-bug cells waiting for a sample of their bug: bundle
        self.submitted_unix: Dict[str, float] = {}
        self.lost_since: Dict[int, float] = {}
        self.context = {JIT_CACHE: options.jit_cache} if options.jit_cache else {}
        self.cpus = min(1.0, float(ray.cluster_resources().get("CPU", 1)) / max(bundles, 1))
        # DETRUN_WORKERS_PER_GPU: a bundle (one GPU) runs that many tasks at once, each on its share of the
        # bundle's GPU and CPU; every task of a bundle still runs on that bundle's GPU and writes its slot
        self.workers = self.settings.workers_per_gpu

    def _bundle(self) -> dict:
        bundle = {"GPU": 1, "CPU": self.cpus}
        if self.options.accelerator_type:
            bundle[f"accelerator_type:{self.options.accelerator_type}"] = 0.001
        return bundle

    def run(self) -> SubmitResult:
        if not self.total:
            self.store.finish_run(self.run_id, RunStatus.COMPLETE, failures=[])
            return self.result
        start = time.perf_counter()
        pg = placement_group([self._bundle()] * len(self.queues), strategy="SPREAD")
        status, timings = RunStatus.INCOMPLETE, {}
        try:
            ready = self._wait_placed(pg)
            if not ready:
                raise DetrunError(f"could not reserve {len(self.queues)} GPU(s) "
                                  f"within {self.settings.pg_timeout_s:.0f} s")
            timings["placement_group_s"] = time.perf_counter() - start
            timings["workers_per_gpu"] = self.workers
            self._loop(pg)
            for book in list(self.books.values()):  # isolated cells left waiting (their sample was lost)
                self._fail(book.shard, "isolated cells did not finish")
            timings["tasks_s"] = time.perf_counter() - start - timings["placement_group_s"]
            status = RunStatus.COMPLETE if not self.result.failures else RunStatus.INCOMPLETE
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM under the CLI (errors.Terminated)
            for ref in self.pending:
                ray.cancel(ref, force=True)
            self.result.failures.append(f"{interruption(exc)} with {len(self.pending)} task(s) running")
            mark_incomplete(exc, self.run_id, self.store.root)  # the finally below marks it
            raise
        finally:
            remove_placement_group(pg)
            timings["driver_peak_rss_mb"] = host_peak_mb()
            self.store.finish_run(self.run_id, status, failures=self.result.failures, timings=timings)
        return self.result

    def _loop(self, pg) -> None:
        self.pg, self.env = pg, task_runtime_env(self.spec, self.settings.worker_niceness)
        for bundle in self.queues:
            self._launch(bundle)
        while self.pending:
            done, _ = ray.wait(list(self.pending), num_returns=1, timeout=1.0)
            for ref in done:
                item, bundle, _ = self.pending[ref]
                if isinstance(item, Isolated) and self._cell_began(ref):
                    continue  # its worker reached the cell: the cell timeout counts from now
                del self.pending[ref]
                if isinstance(item, Isolated):
                    self._collect_cell(ref, item)
                else:
                    self._collect(ref, item, bundle)
                self._launch(bundle)
            self._expire()
            self._give_up_lost_bundles(pg)
            self._heartbeat()
            if self.options.on_progress:
                self.options.on_progress(self.finished, self.total)

    def _launch(self, bundle: int) -> None:
        """Start the bundle's next queued tasks, up to `workers` running on it at once."""
        while self.queues[bundle] and sum(b == bundle for _, b, _ in self.pending.values()) < self.workers:
            item = self.queues[bundle].popleft()
            strategy = PlacementGroupSchedulingStrategy(self.pg, placement_group_bundle_index=bundle)
            remote = cell_task if isinstance(item, Isolated) else shard_task
            task = remote.options(scheduling_strategy=strategy, runtime_env=self.env, num_gpus=1 / self.workers,
                                  num_cpus=self.cpus / self.workers)
            name = item.task_id if isinstance(item, Isolated) else item.shard_id
            self.submitted_unix[name] = time.time()
            self.pending[task.remote(self.spec_data, item, self.run_id, self.context)] = (item, bundle,
                                                                                          time.monotonic())

    def _fail(self, shard: Shard, reason: str) -> None:
        if shard.shard_id in self.failed:
            return  # already failed (a lost bundle took another of its isolated cells)
        self.failed.add(shard.shard_id)
        self.books.pop(shard.shard_id, None)
        self.finished += 1
        self.result.failures.append(f"shard {shard.shard_id}: {reason}")

    def _collect(self, ref: ray.ObjectRef, shard: Shard, bundle: int) -> None:
        ready, start = time.time(), time.perf_counter()
        try:
            out: TaskResult = ray.get(ref)
        except ray.exceptions.OutOfMemoryError as exc:
            return self._error_rows(shard, f"killed by Ray's memory monitor (out of memory): {failure_line(exc)}")
        except ray.exceptions.WorkerCrashedError as exc:
            if not self.spec.isolation.split_crashed:
                return self._fail(shard, f"{type(exc).__name__}: {failure_line(exc)}")
            why = f"its shard's process died ({failure_line(exc)})"
            return self._isolate(shard, None, [Isolated(shard, c, "crashed", why)
                                               for c in cells_for(self.spec, shard.repeats)], bundle)
        except ray.exceptions.RuntimeEnvSetupError as exc:
            raise not_installed(self.spec, exc) from None
        except ray.exceptions.RayError as exc:
            return self._fail(shard, f"{type(exc).__name__}: {failure_line(exc)}")
        driver = {"submitted_unix": self.submitted_unix.get(shard.shard_id), "ready_unix": ready,
                  "get_s": time.perf_counter() - start}
        out["timings"] = dict(out.get("timings", {}), driver=driver)
        if out.get("environment_error"):  # another SGLang than the job names: no rows of it, the run stops
            self.result.failures.append(f"shard {shard.shard_id}: {out['environment_error']}")
            raise DetrunError(out["environment_error"])
        if out.get("deferred"):
            return self._isolate(shard, out, [Isolated(shard, deferred_cell(d), d["kind"], d["reason"])
                                              for d in out["deferred"]], bundle)
        self._write(shard, out["rows"], out["blobs"], out["timings"], out["note"])

    def _write(self, shard: Shard, rows: List[dict], blobs: Dict[str, bytes], timings: dict, note: str) -> None:
        start = time.perf_counter()
        self.store.write_blobs(blobs)
        self.store.write_rows(self.run_id, shard.shard_id, rows)
        self.result.devices.update(r["gpu_name"] for r in rows if r.get("gpu_name"))
        timings.setdefault("driver", {})["write_s"] = time.perf_counter() - start
        self.store.write_timings(self.run_id, shard.shard_id, timings)
        self.books.pop(shard.shard_id, None)
        self.finished += 1
        self.result.shards_run += 1
        if note and note not in self.result.notes:
            self.result.notes.append(note)
            log.info("%s", note)

    # -- crash isolation: cells run alone in sacrificial workers (isolation.py)
    def _isolate(self, shard: Shard, out: Optional[TaskResult], items: List[Isolated], bundle: int) -> None:
        """Hold the shard's rows; queue its isolated cells first on the bundle that ran it."""
        self.books[shard.shard_id] = ShardBook(self.spec, shard, out, [i.cell for i in items])
        run = []
        for item in items:
            verdict = self.bugs.admit(item) if item.force else "run"
            if verdict == "run":
                run.append(item)
            elif verdict == "wait":
                self.parked[item] = bundle
            else:
                self._fill(item, self.bugs.unrun_rows(self.spec, self.run_id, item))
        self.queues[bundle].extendleft(reversed(run))
        log.warning("shard %s: %d cell(s) run alone in isolated workers (%s: %s)", shard.shard_id, len(items),
                    items[0].kind, items[0].reason)

    def _cell_began(self, gen) -> bool:
        """Whether an isolated worker's event is its first yield, CELL_STARTED (else it is its result, or
        the error that ended its process)."""
        if gen in self.cell_began:
            return False
        first = next(gen)
        try:
            began = ray.get(first) == CELL_STARTED
        except ray.exceptions.RayError:
            began = False
        if began:
            self.cell_began[gen] = time.monotonic()
        else:
            self.cell_out[gen] = first
        return began

    def _collect_cell(self, gen, item: Isolated) -> None:
        blobs, timings = {}, None
        self.cell_began.pop(gen, None)
        ref = self.cell_out.pop(gen, None)
        try:
            out = ray.get(next(gen) if ref is None else ref)
            rows, blobs, timings = finished_rows(item, out["rows"]), out["blobs"], out.get("timings")
        except ray.exceptions.RuntimeEnvSetupError as exc:
            raise not_installed(self.spec, exc) from None
        except ray.exceptions.RayError as exc:
            rows = lost_rows(self.spec, self.run_id, item,
                             f"its process died ({type(exc).__name__}: {failure_line(exc)})")
        if timings:
            self.store.write_timings(self.run_id, item.task_id, timings)
        self._settled(item, rows, blobs)

    def _settled(self, item: Isolated, rows: List[dict], blobs: Optional[Dict[str, bytes]] = None) -> None:
        """An isolated cell has its rows; a known bug's outcome decides its waiting cells."""
        if item.force:
            for other in self.bugs.resolve(item, reproduced(rows)):
                bundle = self.parked.pop(other)
                if self.bugs.outcome[other.reason][0]:
                    self._fill(other, self.bugs.unrun_rows(self.spec, self.run_id, other))
                else:
                    self.queues[bundle].appendleft(other)
        self._fill(item, rows, blobs)

    def _fill(self, item: Isolated, rows: List[dict], blobs: Optional[Dict[str, bytes]] = None) -> None:
        book = self.books.get(item.shard.shard_id)
        if book is None:
            return
        book.fill(item.cell, rows, blobs)
        if book.done:
            self._write(book.shard, book.rows(), book.blobs, book.timings, book.note)

    def _error_rows(self, shard: Shard, reason: str) -> None:
        """The shard failed as a whole: an error row for each of its keys, and a failure."""
        rows = unfinished_rows(self.spec, self.run_id, shard, cells_for(self.spec, shard.repeats), Status.ERROR,
                               reason)
        self.store.write_rows(self.run_id, shard.shard_id, rows)
        self._fail(shard, reason)

    def _drop(self, ref: ray.ObjectRef, reason: str, rest: str) -> None:
        """Cancel a pending task and fail it; its bundle's queue is not run (its GPU may be gone)."""
        item, bundle, _ = self.pending.pop(ref)
        self.cell_began.pop(ref, None)
        self.cell_out.pop(ref, None)
        ray.cancel(ref, force=True)
        shard = _shard_of(item)
        self._fail(shard, reason)
        while self.queues[bundle]:
            self._fail(_shard_of(self.queues[bundle].popleft()), f"not run: {rest} on {shard.shard_id}")

    def _expire(self) -> None:
        """Cancel tasks past their time: --task-timeout for shards; for an isolated cell, the cell timeout
        from the cell's start (its rows then say it hung), or the grace beyond it for reaching the cell."""
        now, limit = time.monotonic(), self.options.task_timeout
        cell_s = self.spec.isolation.cell_timeout_s
        reach_s = cell_s + self.settings.isolation_grace_s
        for ref, (item, bundle, submitted) in list(self.pending.items()):
            began = self.cell_began.get(ref)
            if isinstance(item, Isolated) and began is not None and now - began > cell_s:
                self._end_cell(ref, item, bundle, f"hung: no result {cell_s:g} s after its cell started, "
                               "its worker was ended")
            elif isinstance(item, Isolated) and began is None and now - submitted > reach_s:
                self._end_cell(ref, item, bundle, f"its worker did not reach the cell within {reach_s:g} s "
                               "(worker start, imports, backend), it was ended")
            elif limit and not isinstance(item, Isolated) and now - submitted > limit:
                self._drop(ref, f"timed out after {limit:g} s (cancelled)", "its GPU timed out")

    def _end_cell(self, gen, item: Isolated, bundle: int, what: str) -> None:
        """Cancel an isolated cell's worker; its rows say what (lost_rows)."""
        self.pending.pop(gen)
        self.cell_began.pop(gen, None)
        ray.cancel(gen, force=True)
        self._settled(item, lost_rows(self.spec, self.run_id, item, what))
        self._launch(bundle)

    def _give_up_lost_bundles(self, pg) -> None:
        """A node died and Ray found no GPU to re-place its bundle: fail its shards instead of waiting forever."""
        placed = placement_group_table(pg).get("bundles_to_node_id", {})
        alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
        now = time.monotonic()
        for bundle in self.queues:
            if placed.get(bundle) in alive:
                self.lost_since.pop(bundle, None)
            elif now - self.lost_since.setdefault(bundle, now) > self.settings.node_loss_grace_s:
                for ref in [r for r, (_, b, _) in self.pending.items() if b == bundle]:
                    self._drop(ref, "its node died and no GPU was left to retry on", "its node died")

    def _wait_placed(self, pg) -> bool:
        """Wait up to DETRUN_PG_TIMEOUT_S for the placement group, beating the heartbeat meanwhile."""
        ready, deadline = pg.ready(), time.monotonic() + self.settings.pg_timeout_s
        while (left := deadline - time.monotonic()) > 0:
            if ray.wait([ready], timeout=min(self.settings.heartbeat_s, left))[0]:
                return True
            self._heartbeat()
        return False

    def _heartbeat(self) -> None:
        """Refresh the manifest's driver heartbeat once a period (create_run or reopen_run wrote the first)."""
        now = time.monotonic()
        if now - vars(self).setdefault("_beat_at", now) >= self.settings.heartbeat_s:
            self._beat_at = now
            try:
                self.store.beat(self.run_id)
            except DetrunError as exc:  # a missed beat only makes the run look stale sooner
                log.warning("detrun: heartbeat not written: %s", exc)

def _shard_of(item: Union[Shard, Isolated]) -> Shard:
    return item.shard if isinstance(item, Isolated) else item
