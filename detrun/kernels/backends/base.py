"""The backend protocol, SGLang's wrapper-selection rule (per profile version), and the CUDA-graph capture helper."""

from __future__ import annotations

import abc
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Hashable, List, Optional, Tuple

import torch

from ...envflags import TaskFlags
from ...record.paths import (  # noqa: F401  (the backends take them from here)
    PATH_DECODE,
    PATH_PAGED,
    PATH_RAGGED,
    PATH_RAGGED_PREFIX,
)
from ...spec.model import JobSpec
from ...spec.sglang import full_prefill_graph
from ...stages import Stages
from ..inputs import Batch


class Unsupported(Exception):
    """This backend cannot run this cell here (recorded as skipped, with the reason)."""


class BackendUnavailable(Exception):
    """The backend asked for cannot run in this task (one line that says why; its cells become error rows)."""


class EnvironmentMismatch(BackendUnavailable):
    """The task's environment is not the one the job names (another SGLang installed, or none): the run stops
    with exit 2 instead of writing rows of the wrong version."""


class SGLangVersionMismatch(EnvironmentMismatch):
    """The installed SGLang is not the version the job names (an environment error: exit 2)."""


class VersionMismatch(EnvironmentMismatch):
    """The task imports another version than its `versions:` environment's (an environment error: exit 2)."""


class KnownBug(Exception):
    """A known upstream defect hit by this cell (recorded with the reason; never a pass)."""


@dataclass
class Output:
    out: torch.Tensor  # [tokens, Hq, D] (decode: [requests, Hq, D])
    lse: torch.Tensor  # [tokens, Hq] float32, base 2 (decode: [requests, Hq])
    path: str
    attn: str  # the kernel family that ran: fa2, fa3, torch-exact, ...
    plan: Dict[str, object] = field(default_factory=dict)
    kernels: List[str] = field(default_factory=list)
    plan_ms: float = 0.0
    timer: Optional["KernelTime"] = None  # the run's kernel time: run_ms waits for it
    # What SGLang did for this row (backend sglang only; judge/wiring.py checks it): forward_mode, graph,
    # use_ragged, extend_no_prefix, and the wrapper labels planned for this batch, run, and run stale.
    wiring: Optional[Dict[str, object]] = None

    @property
    def run_ms(self) -> float:
        """Milliseconds the run took on the device (waits for the run to finish)."""
        return self.timer.wait() if self.timer is not None else 0.0


def sglang_use_ragged(use_paged: bool, deterministic: bool, mode: str, full_prefill_graph: bool = False) -> bool:
    """FlashInferAttnBackend's wrapper choice for a prefill (plain EXTEND). eager: init_forward_metadata (0.5.10
    FB:488-490, 0.5.23 FB:1058-1062; 0.5.23's default breakable prefill graph calls it too): ragged unless
    deterministic inference or the flag. cudagraph: SGLang 0.5.23's full prefill graph plans paged whatever the
    flag (FB:820-838); without one (0.5.10, or no profile) detrun captures the wrapper the flag picks."""
    if mode == "cudagraph":
        return not full_prefill_graph and not use_paged
    return not deterministic and not use_paged


def choose_path(use_paged: bool, deterministic: bool, mode: str, batch: Batch, full_prefill_graph: bool = False) -> str:
    if not sglang_use_ragged(use_paged, deterministic, mode, full_prefill_graph):
        return PATH_PAGED
    return PATH_RAGGED_PREFIX if batch.has_prefix else PATH_RAGGED


class AttentionBackend(abc.ABC):
    """Built once per task with the task's flags (TaskFlags, parsed once from its environment: what SGLang reads
    in its backend's __init__); none given: every flag unset."""

    name: str = "?"

    def __init__(self, spec: JobSpec, device: torch.device, stages: Optional[Stages] = None,
                 flags: Optional[TaskFlags] = None):
        self.spec = spec
        self.device = device
        self.stages = stages if stages is not None else Stages()
        self.flags = flags if flags is not None else TaskFlags()
        self.use_paged = self.flags.use_paged
        self.deterministic = spec.deterministic
        self.prefill_graph = full_prefill_graph(spec.sglang)  # what `cudagraph` prefill models (None: own capture)
        self.graphs: Dict[Hashable, Captured] = {}
        self.force_known_bugs = False  # an isolated worker runs a known-bug cell anyway
        self.in_flight = 1  # cells the worker keeps launched before writing their rows (backends stage for them)
        self.keep_outputs = False  # clone every graph replay's outputs (digests on another stream read them)

    def prefill_mode(self, mode: str, batch: Batch) -> str:
        """The mode a prefill of this batch runs in: a batch SGLang's full prefill graph does not replay (more
        requests than its slots, more tokens than its largest bucket, padded over 2x) runs eager, as SGLang's."""
        if mode == "cudagraph" and self.prefill_graph is not None and not self.prefill_graph.takes(batch.qo_lens):
            return "eager"
        return mode

    def path_for(self, mode: str, batch: Batch) -> str:
        return choose_path(self.use_paged, self.deterministic, mode, batch, self.prefill_graph is not None)

    def _execute(self, run: Callable[[], Tuple[torch.Tensor, ...]], mode: str, key: Hashable = None,
                 plan: Optional[dict] = None, keep: bool = True) -> Tuple[Tuple[torch.Tensor, ...], "KernelTime"]:
        """Run (eager) or replay (cudagraph) one planned computation, without waiting for it: the
        KernelTime waits when read (and records the "kernel" stage then).

        A graph is captured once per key (a batch and path) and replayed by later calls whose plan
        is the same, as SGLang re-plans and replays the graphs it captured; a new plan recaptures.
        keep: a replay's outputs are cloned, for a reader after the graph's next replay (a host copy of the
        tensors, a profiled run); without, they are the graph's own buffers, which work queued after the
        replay (the digests) reads in stream order.
        """
        if mode == "cudagraph":
            graph = self.graphs.get(key) if key is not None else None
            if graph is None or graph.plan != plan:
                graph = capture(run, self.device, self.stages, plan)
                if key is not None:
                    self.graphs[key] = graph
            outputs, timer = graph.replay(keep)
        else:
            outputs, timer = kernel_timed(run, self.device)
        timer.stages = self.stages
        return outputs, timer

    @abc.abstractmethod
    def forward(self, batch: Batch, mode: str, repeat: int = 0) -> Output:
        """Run prefill over the batch in a mode; raise Unsupported or KnownBug to say why not."""

    def forward_decode(self, batch: Batch, mode: str, repeat: int = 0) -> Output:
        """Decode one new token per request: q is the request's last prefill query row (batch.q[last_rows]),
        over its whole cache (batch.full: prefix and all qo_len tokens, itself included). out [bs, Hq, D],
        lse [bs, Hq], in request order; path PATH_DECODE. Raise Unsupported or KnownBug to say why not."""
        raise Unsupported(f"{self.name}: no decode")

    def forward_dllm(self, batch: Batch, mode: str, repeat: int = 0) -> Output:
        """SGLang's DLLM_EXTEND: each request's last dllm_block_size query rows over the rest as prefix (only
        the sglang backend runs it: detrun's model has no DLLM_EXTEND)."""
        raise Unsupported(f"{self.name}: no DLLM_EXTEND (only backend sglang runs SGLang's dLLM path)")


def timed(fn: Callable[[], object], device: torch.device, sync: bool = True) -> Tuple[object, float]:
    """Run fn, return (result, wall milliseconds); with sync, the device is synchronised around it
    (without, the host's time only: the work fn queued is not waited for)."""
    sync = sync and device.type == "cuda"
    if sync:
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    result = fn()
    if sync:
        torch.cuda.synchronize(device)
    return result, (time.perf_counter() - start) * 1e3


class KernelTime:
    """Device time of queued work between two CUDA events (or a wall time already taken), read late so
    the host can do other work while the device runs; wait() adds it to stages' "kernel" once."""

    def __init__(self, ms: float = 0.0, events: Optional[tuple] = None, stages: Optional[Stages] = None):
        self.ms, self.events, self.stages, self.counted = ms, events, stages, False

    def wait(self) -> float:
        if self.events is not None:
            start, end = self.events
            end.synchronize()
            self.ms, self.events = start.elapsed_time(end), None
        if not self.counted and self.stages is not None:
            self.stages.add("kernel", self.ms / 1e3)
            self.counted = True
        return self.ms


def kernel_timed(fn: Callable[[], Any], device: torch.device) -> Tuple[Any, KernelTime]:
    """Run fn, return (result, its KernelTime): on a GPU, CUDA-event time of what fn queued on the current
    stream (work queued before it, a digest say, is not counted), not waited for here; else wall time."""
    if device.type != "cuda":
        result, ms = timed(fn, device)
        return result, KernelTime(ms)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    stream = torch.cuda.current_stream(device)  # looked up once, by device (cheaper than the default's lookup)
    start.record(stream)
    result = fn()
    end.record(stream)
    return result, KernelTime(events=(start, end))


@dataclass
class Captured:
    """A captured CUDA graph, the outputs it writes, and the plan it was captured under."""

    graph: "torch.cuda.CUDAGraph"
    outputs: Tuple[torch.Tensor, ...]
    device: torch.device
    plan: Optional[dict] = None

    def replay(self, clone: bool = True) -> Tuple[Tuple[torch.Tensor, ...], KernelTime]:
        """(outputs, cloned unless told not to, and the replay time); outputs are NaN first, so the replay
        must write every element."""
        for t in self.outputs:
            t.fill_(float("nan"))
        _, timer = kernel_timed(self.graph.replay, self.device)
        return tuple(t.clone() for t in self.outputs) if clone else self.outputs, timer


def capture(fn: Callable[[], Tuple[torch.Tensor, ...]], device: torch.device, stages: Optional[Stages] = None,
            plan: Optional[dict] = None, after_warmup: Optional[Callable[[], None]] = None) -> Captured:
    """Warm fn up on a side stream, then capture it in a CUDA graph (after_warmup runs between the two, as
    SGLang's runners call on_after_cuda_graph_warmup)."""
    if device.type != "cuda":
        raise Unsupported(f"cudagraph mode needs a CUDA device (this task runs on {device.type})")
    stages = stages if stages is not None else Stages()
    with stages("graph warm-up"):
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            fn()
        torch.cuda.current_stream(device).wait_stream(side)
        torch.cuda.synchronize(device)
    if after_warmup is not None:
        after_warmup()
    with stages("graph capture"):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outputs = fn()
    return Captured(graph, tuple(outputs), device, plan)


def capture_and_replay(
    fn: Callable[[], Tuple[torch.Tensor, ...]], device: torch.device, stages: Optional[Stages] = None
) -> Tuple[Tuple[torch.Tensor, ...], float]:
    """Capture fn in a new CUDA graph and replay it once; (cloned outputs, replay ms)."""
    outputs, timer = capture(fn, device, stages).replay()
    return outputs, timer.wait()
