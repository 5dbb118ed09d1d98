"""What one task does on its GPU: build the backend once, run its cells, digest on the device.

Knows nothing of Ray scheduling; runner.py wraps start_shard and finish_shard in a Ray task.
"""

from __future__ import annotations

import collections
import contextlib
import faulthandler
import functools
import json
import os
import time
import traceback
from typing import Callable, Deque, Dict, List, Optional, cast

import torch

from ..envflags import DRAW_RING_MB, TaskFlags
from ..errors import first_line
from ..kernels import envinfo
from ..kernels.backends.base import (
    AttentionBackend,
    BackendUnavailable,
    EnvironmentMismatch,
    KnownBug,
    Output,
    Unsupported,
)
from ..kernels.backends.profiling import KernelProfiling
from ..kernels.digest import PendingDigests, dtype_name, prewarm, ready, tensor_bytes
from ..kernels.digest_graphs import DigestGraphs
from ..kernels.inputs import DTYPES, Draws, build_batch, draw_keys, draw_threads, on_threads, ring_bytes
from ..kernels.pinned_ring import PinnedRing
from ..kernels.referror import RefErrors
from ..record.keys import row_key
from ..record.status import Status
from ..record.task import Deferred, TaskResult
from ..spec.matrix import Cell, Shard, cells_for, profile_share
from ..spec.model import JobSpec, spec_from_dict
from ..spec.sglang import effective_knobs
from ..stages import (
    DEVICE_WAIT,
    INPUTS_BESIDE,
    PINNED_RING,
    STEADY_CELL,
    STEADY_PART_NAMES,
    STEADY_PARTS,
    Stages,
    SteadyTrace,
    process_started_unix,
)
from .beside import build_while
from .collector import Collector
from .isolation import KNOWN_BUG, LOST_CONTEXT
from .jitcache import CONTEXT_KEY as JIT_CACHE
from .jitcache import JitCache
from .resources import task_peaks
from .watchdog import CellWatchdog


def pick_device() -> torch.device:
    return torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")


def cuda_present(device: torch.device) -> bool:
    """Does the task have a CUDA device (where `auto` must mean flashinfer)?"""
    return device.type == "cuda"


def import_flashinfer(stages: Optional[Stages] = None) -> None:
    """Import flashinfer (a broken install is found by find_spec and still fails here)."""
    with (stages if stages is not None else Stages())("import flashinfer"):
        import flashinfer  # noqa: F401


TORCH_BACKENDS = ("reference", "sdpa", "flex")  # need neither CUDA nor flashinfer


def resolve_backend(spec: JobSpec, has_cuda: bool, load: Callable[[], None] = import_flashinfer) -> tuple[str, str]:
    """(backend name, note). auto is the reference only in a task without CUDA; with CUDA it is
    flashinfer, which must import (load): never a silent fallback. sglang needs CUDA, flashinfer and the SGLang
    the job names. Raises BackendUnavailable (EnvironmentMismatch for another SGLang, or another version than
    the task's versions: environment)."""
    asked = spec.backend
    envinfo.check_version(spec)  # the versions: environment first: another version is exit 2 on any backend
    if asked in TORCH_BACKENDS:  # pure torch: CPU or CUDA (the backend refuses a kernel the device lacks)
        return asked, ""
    if asked == "sglang":  # the environment first: another SGLang is exit 2 wherever the task runs
        envinfo.check_sglang(spec)
    if not has_cuda:
        if asked == "auto":
            return "reference", "backend auto -> reference (no CUDA device in the task)"
        raise BackendUnavailable(f"backend {asked}: the task has no CUDA device")
    try:
        load()
    except Exception as exc:
        raise BackendUnavailable(
            f"backend {asked}: the task has a CUDA device but flashinfer failed to import: "
            f"{first_line(exc, limit=500)}") from exc
    if asked == "sglang":
        return "sglang", ""
    return "flashinfer", "backend auto -> flashinfer" if asked == "auto" else ""


def cell_bounds(phase: str, batch, spec: JobSpec) -> List[int]:
    """Row bounds of each request in a cell's output: decode one row each; dllm its last dllm_block_size
    query rows; prefill its qo_len rows (batch.qo_indptr)."""
    n = len(batch.requests)
    if phase == "decode":
        return list(range(n + 1))
    if phase == "dllm":
        block = spec.sglang.dllm_block_size if spec.sglang is not None else 0
        return list(range(0, n * block + 1, block))
    return batch.qo_indptr.tolist()


# Cases whose values a task draws ahead of the one it builds (host memory: their values, on top of the cases built)
DRAW_AHEAD = 4
# Before its first cell a task starts the first cases' values, up to these bytes (at least DRAW_AHEAD cases): the
# CPU threads draw them while the task opens its kernel-profile session (CUPTI's set-up, seconds on a GPU).
DRAW_FIRST_BYTES = 4 << 30


def digest_lag(depth: int) -> int:
    """How many cells a digest on its own stream may fall behind: the kernel of cell k + lag waits for the
    digest of cell k, so when the host waits for the oldest of `depth` cells in flight, the device still
    has kernels queued behind that digest (docs/performance.md)."""
    return max(1, depth - 1)


def make_backend(name: str, spec: JobSpec, device: torch.device, stages: Optional[Stages] = None,
                 flags: Optional[TaskFlags] = None) -> AttentionBackend:
    """The task's backend, built once with the task's flags (backend sglang: SGLang also reads its own)."""
    if name == "reference":
        from ..kernels.backends.reference import ReferenceBackend

        return ReferenceBackend(spec, device, stages, flags)
    if name == "sdpa":
        from ..kernels.backends.sdpa import SdpaBackend

        return SdpaBackend(spec, device, stages, flags)
    if name == "flex":
        from ..kernels.backends.flex import FlexBackend

        return FlexBackend(spec, device, stages, flags)
    if name == "sglang":
        from ..kernels.backends.sglang import SGLangBackend  # imports SGLang: only here, inside a task

        return SGLangBackend(spec, device, stages, flags)
    from ..kernels.backends.flashinfer import FlashInferBackend  # imported only here, inside a task

    return FlashInferBackend(spec, device, stages, flags)


class ShardRunner:
    """Runs one shard's cells and collects rows and first-seen tensor bytes."""

    def __init__(self, spec: JobSpec, shard: Shard, run_id: str, context: Optional[dict] = None,
                 draw_first: bool = False):
        """draw_first: the shard's first cases' values start on the CPU threads now, while the CUDA context and
        the backend are built (a task that runs its whole shard; run() starts them otherwise)."""
        self.created = time.perf_counter()  # the task's run_s counts from here
        self.spec, self.shard, self.run_id = spec, shard, run_id
        self.stages = Stages()
        context = dict(context or {})
        self.jit = JitCache(context.pop(JIT_CACHE, None), self.stages)  # FlashInfer's compiled modules
        self.device = pick_device()
        # One intra-op thread, as a Ray task of <= 1 CPU has (Ray sets OMP_NUM_THREADS=1): on the CPU, BLAS results
        # can depend on the thread count; on a GPU, a steady cell's host work (plan, digest launch) took ~25% longer
        # in a process with 16 (bench/cell_profile.py on an H100, 2026-12-07: docs/performance.md).
        torch.set_num_threads(1)
        if self.device.type != "cpu":
            with self.stages("cuda context"):
                torch.empty(1, device=self.device)
            prewarm(self.device)  # the digest kernel loads while the backend and inputs are built
        # The task's flags, parsed once from its environment (Ray's runtime_env set the spec's env there): the
        # backend is built with them and the rows record them (a bad value set on a node fails the task, naming it)
        self.flags = TaskFlags.parse(os.environ, spec.env)
        # request values drawn once per task, shared by its cases, on CPU threads beside the GPU work (a task that runs
        # its whole shard on a GPU: into pinned memory, so each set's move is a queued copy)
        cells = list(cells_for(spec, shard.repeats)) if draw_first else []
        self.ring_note = ""  # why the task has no ring although it asked for one
        threads = draw_threads()
        self.draws = Draws(spec, self.device, threads, stages=self.stages, ring=self._ring(cells, threads))
        self.drew_first = draw_first  # run() starts them otherwise
        if draw_first:
            self._draw_first(cells)
        self.poisoned: Optional[str] = None  # why no cell of this task can run ("not run: ..." error rows)
        self.backend: Optional[AttentionBackend] = None
        self.environment_error = ""  # the task's environment is not the job's: no rows, the run stops (exit 2)
        with self.stages("backend init"):
            try:
                self.backend_name, self.note = resolve_backend(
                    spec, cuda_present(self.device), functools.partial(import_flashinfer, self.stages))
            except EnvironmentMismatch as exc:
                self.backend_name, self.note, self.environment_error = spec.backend, "", str(exc)
                self.poisoned = str(exc)
            except BackendUnavailable as exc:  # flashinfer (or sglang's) unavailable: its rows say so
                self.backend_name = "sglang" if spec.backend == "sglang" else "flashinfer"
                self.note = self.poisoned = str(exc)
            else:
                if self.backend_name in ("flashinfer", "sglang"):
                    self.jit.restore()  # before the first plan: FlashInfer then loads what others compiled
                try:
                    self.backend = make_backend(self.backend_name, spec, self.device, self.stages, self.flags)
                except EnvironmentMismatch as exc:
                    self.environment_error = self.poisoned = str(exc)
                except BackendUnavailable as exc:  # a torch kernel this device lacks: its rows say so
                    self.note = self.poisoned = str(exc)
        self.note = "; ".join(n for n in (self.note, self.ring_note) if n)
        if isinstance(self.backend, KernelProfiling):  # the slot's tasks share the profiling (one per plan)
            self.backend.profile_share, self.backend.profile_from = profile_share(spec, shard), shard.repeats[0]
        with self.stages("environment"):
            env = envinfo.environment(self.device, self.flags.flags,
                                      sglang=envinfo.installed_sglang() if spec.backend == "sglang" else "")
        # use_paged: the flag as the backend read it (backend sglang: as SGLang read it, FB:453)
        self.common = dict(run_id=run_id, slot=shard.slot, shard=shard.shard_id,
                           backend=self.backend_name, version=envinfo.version_name(spec),
                           use_paged=self.backend.use_paged if self.backend else self.flags.use_paged,
                           knobs=json.dumps(effective_knobs(spec, self.flags), sort_keys=True),
                           pid=os.getpid(), **context, **env)
        self.rows: List[dict] = []
        self.blobs: Dict[str, bytes] = {}
        self.ran: set = set()  # (case, phase, mode) of the cells this task has run
        self.since: Optional[float] = None  # when the last cell ended (steady cells are timed from it)
        self.before: List[float] = []  # the STEADY_PARTS stages' seconds then, in their order
        self.trace = SteadyTrace(self.stages)  # when the steady cells ended: a GPU's rate over its tasks (stages.py)
        self.force = False  # an isolated worker: known-bug cells run anyway
        self.lost: Optional[str] = None  # the CUDA context was lost: later cells go to isolated workers
        self.deferred: List[Deferred] = []  # cells for isolated workers
        # (cell, row bounds, output, digests) launched, rows not yet written; up to `depth` cells in flight
        self.pending: Deque[tuple] = collections.deque()
        self.depth = self.flags.digest_depth
        if self.backend is not None:
            self.backend.in_flight = self.depth
        self.lag = digest_lag(self.depth)  # 0: unbounded (bench/cell_profile.py's lag=0)
        # a cell's digest launch replayed from a CUDA graph per layout (DETRUN_DIGEST_GRAPHS)
        self.graphs = (DigestGraphs(self.device, self.stages)
                       if self.flags.digest_graphs and self.device.type == "cuda" else None)
        self.streams: Optional[tuple] = None  # (main, digests): the digests on a stream of their own
        if self.flags.digest_low_stream and self.device.type == "cuda":
            self.use_digest_stream(True)
        # each row's error against an fp64 (CPU) or fp32 (device) reference (spec reference_error)
        self.ref_errors = RefErrors(spec, self.device) if spec.reference_error != "none" else None
        self.collector = Collector(self.stages)  # gc pauses timed; the long-lived heap frozen while cells run

    def _ring(self, cells: List[Cell], threads: int) -> Optional[PinnedRing]:
        """The pinned ring the draw threads write these cells' sets into, on a GPU where the sets are drawn on threads:
        DETRUN_DRAW_RING_MB, or less when the sets take less (a small job pins only what it draws)."""
        if not (cells and self.device.type == "cuda" and on_threads(self.spec, threads) and self.flags.draw_ring_mb):
            return None
        size = min(self.flags.draw_ring_mb << 20, ring_bytes(self.spec, dict.fromkeys(cell.case for cell in cells)))
        try:
            with self.stages(PINNED_RING):
                return PinnedRing(size)
        except RuntimeError as exc:  # the pinned memory refused: the task goes on as with no ring, and says so
            self.ring_note = (f"{DRAW_RING_MB}: {size:,} bytes of pinned memory not allocated "
                              f"({first_line(exc)}); the drawn sets are copied from pageable memory")
            return None

    def use_digest_stream(self, on: bool) -> None:
        """Digests on a low-priority stream of their own, where they fill the SMs the next kernel (on a
        high-priority stream) leaves idle, instead of running between kernels (DETRUN_DIGEST_STREAM,
        docs/performance.md). Graph outputs are then cloned on the kernels' stream: the graph's next replay
        must not wait for a digest on another stream."""
        self.streams = (torch.cuda.Stream(self.device, priority=-1), torch.cuda.Stream(self.device)) if on else None
        if self.backend is not None:
            self.backend.keep_outputs = on

    def main_stream(self):
        """The stream cells run on (a context manager)."""
        return torch.cuda.stream(self.streams[0]) if self.streams else contextlib.nullcontext()

    def _launch(self, cell: Cell, batch, output: Output) -> None:
        """Queue the cell's digests behind its kernel, without waiting for either: the next cell is planned
        and launched while this kernel runs (the backend fences its own host buffers), and this cell's rows
        are written (_flush) after that launch, so the device always has the next kernel queued. Prefill
        digests each request's rows and, in the same launch, its last row alone; decode has one row per
        request."""
        decode = cell.phase == "decode"
        bounds = cell_bounds(cell.phase, batch, self.spec)
        with self.stages("digest"):
            if self.streams:
                after = torch.cuda.Event()
                after.record(self.streams[0])  # after the kernel, on the main stream (named: no current-stream lookup)
                self.streams[1].wait_event(after)
                torch.cuda.set_stream(self.streams[1])  # torch.cuda.stream() would look the current one up
            try:
                digests = PendingDigests([output.out, output.lse], bounds,
                                         [] if decode else [b - 1 for b in bounds[1:]], self.graphs)
            finally:
                if self.streams:
                    torch.cuda.set_stream(self.streams[0])  # the cells' stream (their kernels ran on it)
        self.pending.append((cell, bounds, output, digests, batch))
        if self.streams and self.lag and len(self.pending) >= self.lag:
            self._bound_lag(self.pending[-self.lag][3])

    def _bound_lag(self, behind: PendingDigests) -> None:
        """The next kernel waits on the device for the digests of the cell `lag` back: a digest starved
        behind the high-priority kernels then costs its own run, never a host stall with the queue empty."""
        if behind.event is not None:  # None: the host already waited for it
            cast(tuple, self.streams)[0].wait_event(behind.event)

    def _flush(self, keep: int = 0) -> None:
        """Write the rows of the launched cells, oldest first, leaving the newest `keep` in flight (a device
        error surfacing here is that cell's error)."""
        while len(self.pending) > keep:
            self._write(*self.pending.popleft())

    def _write(self, cell: Cell, bounds: List[int], output: Output, pending: PendingDigests, batch) -> None:
        try:
            with self.stages(DEVICE_WAIT):  # the kernel and its digests (a failure of the kernel surfaces here)
                pending.wait()
            with self.stages("digest", count=False):  # the same cell's digests: counted at their launch
                names = pending.names()
            fields = self._fields(bounds, output, names)
            if self.ref_errors is not None:
                with self.stages("reference error"):
                    texts = self.ref_errors.rows(batch, cell.phase, output.out, output.lse, bounds)
                for f, text in zip(fields, texts):
                    f["ref_error"] = text
            self._rows(cell, Status.OK, output=output, digests=fields)
        except Exception as exc:
            self._failed(cell, exc)

    def _fields(self, bounds: List[int], output: Output, names: List[List[str]]) -> List[dict]:
        """Per request (rows bounds[i]:bounds[i+1]), its digest columns (and first-seen tensor bytes, when
        stored); names holds, after the requests' digests, their last rows' (none: each request is one row)."""
        fields, n = [], len(bounds) - 1
        # per tensor: its column names, dtype, row shape and digests (looked up once per cell, not per request)
        parts = [(f"{name}_digest", f"{name}_dtype", f"{name}_shape", f"last_{name}_digest", t, dtype_name(t),
                  list(t.shape[1:]), digests, len(digests) > n)
                 for name, t, digests in (("out", output.out, names[0]), ("lse", output.lse, names[1]))]
        for i, (a, b) in enumerate(zip(bounds, bounds[1:])):
            f: Dict[str, object] = {}
            for digest_col, dtype_col, shape_col, last_col, t, dtype, tail, digests, lasts in parts:
                digest = digests[i]
                if self.spec.store_tensors and digest not in self.blobs:
                    with self.stages("tensor copy"):
                        self.blobs[digest] = tensor_bytes(t[a:b])
                f[digest_col], f[dtype_col], f[shape_col] = digest, dtype, [b - a, *tail]
                f[last_col] = digests[n + i] if lasts else digest
            fields.append(f)
        return fields

    def _rows(self, cell: Cell, status: str, reason: str = "", output: Optional[Output] = None,
              digests: Optional[List[dict]] = None):
        # the cell's fields, built once; each request's row is a copy with its own (the driver orders the columns)
        base = dict(self.common, case=cell.case, mode=cell.mode, phase=cell.phase, repeat=cell.repeat,
                    status=Status(status).value, reason=reason)  # a plain str
        if output is not None and digests is not None:
            base.update(attn=output.attn, path=output.path, plan=json.dumps(output.plan, sort_keys=True),
                        kernels=output.kernels, plan_ms=output.plan_ms, run_ms=output.run_ms,
                        wiring=json.dumps(output.wiring, sort_keys=True) if output.wiring is not None else "")
        for i, request in enumerate(self.spec.members(cell.case)):
            row = base.copy()
            row["key"] = row_key(cell.case, request, cell.mode, cell.repeat, self.shard.slot, cell.phase)
            row["request"] = request
            if output is not None and digests is not None:
                row.update(digests[i])
            self.rows.append(row)

    def _failed(self, cell: Cell, exc: Exception) -> None:
        """A kernel failure is a result of its cell, not of the run."""
        reason = first_line(exc, limit=500)
        self._rows(cell, Status.ERROR, reason)
        if self.device.type == "cuda" and "CUDA" in str(exc):
            self.lost = self.lost or f"the task's CUDA context was lost at {cell.label}: {reason}"
        traceback.print_exc()

    def _defer(self, cell: Cell, kind: str, reason: str) -> None:
        self.deferred.append(Deferred(case=cell.case, mode=cell.mode, repeat=cell.repeat, phase=cell.phase, kind=kind,
                                      reason=reason))

    def _cell(self, cell: Cell, batches: dict) -> None:
        """Run one cell; a steady one (its case, phase and mode ran before in this task) is timed from the end
        of the cell before it, so the steady cells' seconds cover the loop and all, as a run's wall does."""
        if self.since is None:
            self._mark(time.perf_counter())
        self._profile_window(cell.repeat)
        steady = self._run_cell(cell, batches)
        now = time.perf_counter()
        if steady and self.since is not None:
            add, seconds = self.stages.add, self.stages.seconds
            add(STEADY_CELL, now - self.since)
            for name, part, before in zip(STEADY_PART_NAMES, STEADY_PARTS, self.before):
                add(name, seconds.get(part, 0.0) - before)
            self.trace.cell()
        self._mark(now)

    def _profile_window(self, repeat: int) -> None:
        """The backend's profile session opens before the window's first cell and closes here, between cells,
        past it (the device drains once), so the drain is not inside a steady cell's wall."""
        backend = self.backend
        if isinstance(backend, KernelProfiling) and backend.session_ahead and not self.poisoned:
            was_open = backend.session_open
            with self.stages("forward", count=False):  # the session's start and stop are stages of forward
                inside = backend.profile_window(repeat)
            if was_open and not inside:
                self._mark(time.perf_counter())

    def _open_profile(self, cells: List[Cell], batches: dict) -> None:
        """Where the first cell would open the profile session, open it now while a thread builds the first
        cases' batches (beside.py): CUPTI's set-up holds this thread for seconds, the copies and scatters run
        beside it. The thread's seconds are a row of their own (INPUTS_BESIDE), beside the stages."""
        backend = self.backend
        if not (cells and isinstance(backend, KernelProfiling) and not self.poisoned
                and backend.opens_at(cells[0].repeat)):
            return
        beside = Stages()
        self.draws.stages = beside  # its draws' stages: inside the thread's row, not this thread's
        try:
            cases = dict.fromkeys(cell.case for cell in cells)
            stream = self.streams[0] if self.streams else None
            seconds, built = build_while(lambda: self._profile_window(cells[0].repeat), cases,
                                         lambda case: self._build(case, batches), stream)
        finally:
            self.draws.stages = self.stages
        self.stages.add(INPUTS_BESIDE, seconds, built)

    def _build(self, case: str, batches: dict) -> None:
        """The case's batch into batches, then the next cases' draws started."""
        batches[case] = build_batch(self.spec, case, self.device, self.draws)
        self._draw_ahead(batches)

    def _draw_first(self, cells: List[Cell]) -> None:
        """Start the first cases' values on the CPU threads, up to DRAW_FIRST_BYTES of them (host memory until
        each case takes its sets), at least DRAW_AHEAD cases."""
        size, total = DTYPES[self.spec.dtype].itemsize, 0
        for n, case in enumerate(dict.fromkeys(cell.case for cell in cells)):
            keys = draw_keys(self.spec, case)
            total += sum(rows * heads * self.spec.head_dim * size for _, _, rows, heads in keys)
            if n >= DRAW_AHEAD and total > DRAW_FIRST_BYTES:
                return
            self.draws.prefetch(keys)

    def _draw_ahead(self, batches: dict) -> None:
        """Start drawing the next DRAW_AHEAD cases' values on the CPU threads while this case's cells run: a
        case's largest set (a long prefix) no longer bounds the first repeat's pace, the threads work on the
        cases after it meanwhile."""
        upcoming = [case for case in self.spec.cases if case not in batches][:DRAW_AHEAD]
        for case in upcoming:
            self.draws.prefetch(draw_keys(self.spec, case))

    def _mark(self, now: float) -> None:
        get = self.stages.seconds.get
        self.since, self.before = now, [get(p, 0.0) for p in STEADY_PARTS]

    def _run_cell(self, cell: Cell, batches: dict) -> bool:
        """Run one cell: True when it launched and is steady."""
        if self.poisoned or self.lost:
            self._flush()  # rows stay in cell order
        if self.poisoned:
            self._rows(cell, Status.ERROR, f"not run: {self.poisoned}")
            return False
        if self.lost:  # a fresh process (an isolated worker) runs it, unless this is one
            if self.force or not self.spec.isolation.split_crashed:
                self._rows(cell, Status.ERROR, f"not run: {self.lost}")
            else:
                self._defer(cell, LOST_CONTEXT, self.lost)
            return False
        try:
            if cell.case not in batches:
                with self.stages("inputs"):
                    self._build(cell.case, batches)
                self.collector.settle()  # the cases before: their rows live until the task returns
            batch = batches[cell.case]
            if cell.mode == "cudagraph":  # no other thread may touch the GPU during a capture
                with self.stages("digest: wait for prewarm"):
                    ready()
            backend = cast(AttentionBackend, self.backend)  # built: the task is not poisoned
            forward = {"decode": backend.forward_decode, "dllm": backend.forward_dllm}.get(cell.phase, backend.forward)
            with self.stages("forward"):
                output = forward(batch, cell.mode, cell.repeat)
        except Exception as exc:
            self._flush()  # the cell before keeps its place in the rows
            if isinstance(exc, Unsupported):
                self._rows(cell, Status.SKIPPED, str(exc))
            elif isinstance(exc, KnownBug) and self.spec.isolation.known_bugs == "run":
                self._defer(cell, KNOWN_BUG, str(exc))
            elif isinstance(exc, KnownBug):
                self._rows(cell, Status.KNOWN_BUG, f"not run: {exc}")
            else:
                self._failed(cell, exc)
            return False
        self._flush(self.depth - 1)  # the cells before (their digests ran during this plan), while this kernel runs
        try:
            self._launch(cell, batch, output)
        except Exception as exc:
            self._failed(cell, exc)
            return False
        steady = (cell.case, cell.phase, cell.mode) in self.ran  # inputs, capture, first profile behind it
        self.ran.add((cell.case, cell.phase, cell.mode))
        return steady

    def run(self, cells: Optional[List[Cell]] = None, watchdog: bool = False) -> TaskResult:
        """Run the shard's cells (or only `cells`). With watchdog, a cell that runs longer than
        isolation.cell_timeout_s ends this process (watchdog.py: at most REARM_S later)."""
        if self.environment_error:  # no rows of the wrong environment: the driver stops the run
            self.draws.close()
            return TaskResult(rows=[], blobs={}, note="", deferred=[], environment_error=self.environment_error,
                              timings={"stages": self.stages.as_dict()})
        batches: dict = {}
        dog = (CellWatchdog(self.spec.isolation.cell_timeout_s)
               if watchdog and not os.environ.get("DETRUN_WATCHDOG_S") else None)
        if cells is None:
            cells = list(cells_for(self.spec, self.shard.repeats))
        if isinstance(cells, list) and cells and not self.poisoned and not self.drew_first:
            self._draw_first(cells)  # drawn while the first cell opens the profile session and the cells run
        with self.main_stream(), self.collector:
            self._open_profile(cells, batches)
            for cell in cells:  # the session is open (_open_profile), or the first cell opens it (_cell)
                if dog is not None:
                    dog.before_cell()
                self._cell(cell, batches)
            self._flush()
        if isinstance(self.backend, KernelProfiling):  # the session's kernel names, before the rows leave
            with self.stages("forward", count=False):
                self.backend.close_profile()
            self.note = "; ".join(n for n in (self.note, self.backend.profile_note) if n)
        self.draws.close()
        if dog is not None:
            dog.stop()
        return TaskResult(rows=self.rows, blobs=self.blobs, note=self.note, deferred=self.deferred,
                          environment_error="", timings={"stages": self.stages.as_dict()})


def start_shard(spec_data: dict, shard: Shard, run_id: str, context: Optional[dict] = None,
                force: bool = False, draw_first: bool = False) -> ShardRunner:
    """A task's runner with its backend built: what a task does before its first cell (force: known-bug
    cells run too, as in an isolated worker; draw_first: it will run its whole shard, so its first cases'
    values are drawn while the backend is built)."""
    debug = os.environ.get("DETRUN_WATCHDOG_S")  # dump stacks of a task that hangs (debugging)
    if debug:
        faulthandler.dump_traceback_later(float(debug), repeat=True)
    runner = ShardRunner(spec_from_dict(spec_data), shard, run_id, context, draw_first)
    runner.force = force
    if runner.backend is not None:
        runner.backend.force_known_bugs = force or runner.spec.isolation.known_bugs == "inline"
    return runner


def finish_shard(runner: ShardRunner, cells: Optional[List[Cell]] = None, watchdog: bool = False,
                 timings: Optional[dict] = None) -> TaskResult:
    """Run the shard's cells (or only `cells`) on a started runner; the result's timings say where the
    task's seconds went (see stages.py)."""
    result = runner.run(cells, watchdog)
    runner.jit.save()  # the modules it compiled, for the next machine
    result["timings"].update(timings or {}, stages=runner.stages.as_dict(), jit_cache=runner.jit.record,
                             memory=task_peaks(runner.device), process_started_unix=process_started_unix(),
                             steady_trace=runner.trace.points(), steady_host=runner.trace.host(),
                             slot=runner.shard.slot, run_s=time.perf_counter() - runner.created,
                             returned_unix=time.time())
    return result


def run_shard(spec_data: dict, shard: Shard, run_id: str, context: Optional[dict] = None,
              timings: Optional[dict] = None, cells: Optional[List[Cell]] = None, force: bool = False,
              watchdog: bool = False) -> TaskResult:
    """Run one shard (or some of its cells): start_shard, then finish_shard."""
    return finish_shard(start_shard(spec_data, shard, run_id, context, force, cells is None), cells, watchdog,
                        timings)
