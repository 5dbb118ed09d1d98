"""Environment flags and settings, each name defined here once: a task's flags (TaskFlags, parsed once per task
from its environment, with SGLang's parsing rules) and the driver's settings (driver_settings, read when a
command starts: a bad value is a usage error, exit 2)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, fields
from typing import Dict, Iterable, Mapping, Optional, Tuple

from .errors import DetrunError

USE_PAGED_FLAG = "SGLANG_FLASHINFER_USE_PAGED"
TENSOR_CORE_FLAG = "SGLANG_FLASHINFER_USE_TENSOR_CORE"
DETERMINISTIC_FLAG = "SGLANG_ENABLE_DETERMINISTIC_INFERENCE"

TRUE_WORDS = ("true", "1", "yes", "y")
FALSE_WORDS = ("false", "0", "no", "n")

# Flags whose value SGLang parses as EnvBool; detrun validates them up front.
BOOL_FLAGS = frozenset({USE_PAGED_FLAG, DETERMINISTIC_FLAG, TENSOR_CORE_FLAG})
# Ray owns these: a spec that sets them would break one-task-one-GPU.
FORBIDDEN_FLAGS = frozenset({"CUDA_VISIBLE_DEVICES", "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"})


def parse_bool(name: str, value: str) -> bool:
    """Parse as SGLang's EnvBool does (environ.py: value.lower(), no stripping, in true/1/yes/y or false/0/no/n),
    but raise where SGLang would warn and read the default (False), so no value means one thing here and another
    in SGLang."""
    low = str(value).lower()
    if low in TRUE_WORDS:
        return True
    if low in FALSE_WORDS:
        return False
    raise ValueError(
        f"{name}={value!r} is not a boolean: SGLang would warn and read it as false "
        f"(use one of {', '.join(TRUE_WORDS + FALSE_WORDS)})"
    )


DIGEST_DEPTH = "DETRUN_DIGEST_DEPTH"
DIGEST_STREAM = "DETRUN_DIGEST_STREAM"
DIGEST_GRAPHS = "DETRUN_DIGEST_GRAPHS"
DEFAULT_DIGEST_DEPTH, DEFAULT_DIGEST_STREAM = "4", "low"  # docs/performance.md, "Steady overhead"
DEFAULT_DIGEST_GRAPHS = "on"  # docs/performance.md, "A cell's digest launch from a CUDA graph"
KERNEL_TRACER = "DETRUN_KERNEL_TRACER"
KERNEL_TRACERS = ("auto", "cupti", "torch")  # docs/performance.md, "CUPTI's kernel records on an H100"
DRAW_RING_MB = "DETRUN_DRAW_RING_MB"
DEFAULT_DRAW_RING_MB = "0"  # off until measured on a GPU: docs/performance.md, "The drawn sets through a pinned ring"


def digest_depth(value: str) -> int:
    """DETRUN_DIGEST_DEPTH: how many launched cells a task keeps in flight before writing the oldest one's
    rows (a whole number >= 1). ValueError naming it otherwise."""
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{DIGEST_DEPTH}={value!r}: expected a whole number >= 1")
    return int(value)


def digest_stream(value: str) -> bool:
    """DETRUN_DIGEST_STREAM: "low" (digests on a low-priority stream of their own, beside the next kernels)
    or "same" (on the kernels' stream, after each). True for "low"; ValueError naming it otherwise."""
    if value not in ("low", "same"):
        raise ValueError(f"{DIGEST_STREAM}={value!r}: expected low or same")
    return value == "low"


def digest_graphs(value: str) -> bool:
    """DETRUN_DIGEST_GRAPHS: "on" (a cell's digest launch replayed from a CUDA graph per layout,
    kernels/digest_graphs.py) or "off" (launched from Python each time); a boolean word says the same (YAML reads
    an unquoted off as false). ValueError naming it otherwise."""
    low = value.lower()
    if low not in ("on", "off", *TRUE_WORDS, *FALSE_WORDS):
        raise ValueError(f"{DIGEST_GRAPHS}={value!r}: expected on or off")
    return low == "on" or low in TRUE_WORDS


def kernel_tracer(value: str) -> str:
    """DETRUN_KERNEL_TRACER: what records the kernel audit's session: "cupti" (CUPTI's activity API through
    cupti-python, kernel records only: kernel_session_cupti.py), "torch" (torch.profiler, kineto) or "auto" (cupti
    where cupti-python imports, else torch). ValueError naming it otherwise."""
    if value not in KERNEL_TRACERS:
        *most, last = KERNEL_TRACERS
        raise ValueError(f"{KERNEL_TRACER}={value!r}: expected {', '.join(most)} or {last}")
    return value


def draw_ring_mb(value: str) -> int:
    """DETRUN_DRAW_RING_MB: MiB of pinned host memory a task on a GPU draws its value sets into
    (kernels/pinned_ring.py; 0: none, each set is copied from pageable memory). ValueError naming it otherwise."""
    if not value.isdecimal():
        raise ValueError(f"{DRAW_RING_MB}={value!r}: expected a whole number of MiB (0: no ring)")
    return int(value)


TASK_SETTINGS = {DIGEST_DEPTH: digest_depth, DIGEST_STREAM: digest_stream, DIGEST_GRAPHS: digest_graphs,
                 KERNEL_TRACER: kernel_tracer, DRAW_RING_MB: draw_ring_mb}  # checks


def tensor_core_flag(raw: Optional[str]) -> Optional[bool]:
    """SGLANG_FLASHINFER_USE_TENSOR_CORE as SGLang's should_use_tensor_core reads it: value.lower() == "true"
    (anything else is false); None when unset (SGLang's GQA rule decides)."""
    return None if raw is None else str(raw).lower() == "true"


def use_paged_of(environ: Mapping[str, str]) -> bool:
    """SGLANG_FLASHINFER_USE_PAGED in an environment (a task's, or a row's recorded flags), as SGLang reads it
    (unset: False; a value SGLang would misread raises ValueError naming it)."""
    raw = environ.get(USE_PAGED_FLAG)
    return raw is not None and parse_bool(USE_PAGED_FLAG, raw)


@dataclass(frozen=True)
class TaskFlags:
    """A task's flags, parsed once from its environment (Ray's runtime_env set the spec's `env:` there): the
    backend is built with it and the task's rows record it (use_paged, flags, knobs)."""

    use_paged: bool = False  # SGLANG_FLASHINFER_USE_PAGED
    tensor_core: Optional[bool] = None  # SGLANG_FLASHINFER_USE_TENSOR_CORE (None: unset)
    digest_depth: int = int(DEFAULT_DIGEST_DEPTH)  # DETRUN_DIGEST_DEPTH
    digest_low_stream: bool = DEFAULT_DIGEST_STREAM == "low"  # DETRUN_DIGEST_STREAM
    digest_graphs: bool = DEFAULT_DIGEST_GRAPHS == "on"  # DETRUN_DIGEST_GRAPHS
    kernel_tracer: str = KERNEL_TRACERS[0]  # DETRUN_KERNEL_TRACER
    draw_ring_mb: int = int(DEFAULT_DRAW_RING_MB)  # DETRUN_DRAW_RING_MB
    recorded: Tuple[Tuple[str, str], ...] = ()  # (name, value) as the task saw them: the row's `flags`

    @classmethod
    def parse(cls, environ: Mapping[str, str], names: Iterable[str] = ()) -> "TaskFlags":
        """From a task's environment; names: the spec's own flags, recorded with every boolean flag that is set.
        A bad value raises ValueError naming it."""
        return cls(
            use_paged=use_paged_of(environ),
            tensor_core=tensor_core_flag(environ.get(TENSOR_CORE_FLAG)),
            digest_depth=digest_depth(environ.get(DIGEST_DEPTH, DEFAULT_DIGEST_DEPTH)),
            digest_low_stream=digest_stream(environ.get(DIGEST_STREAM, DEFAULT_DIGEST_STREAM)),
            digest_graphs=digest_graphs(environ.get(DIGEST_GRAPHS, DEFAULT_DIGEST_GRAPHS)),
            kernel_tracer=kernel_tracer(environ.get(KERNEL_TRACER, KERNEL_TRACERS[0])),
            draw_ring_mb=draw_ring_mb(environ.get(DRAW_RING_MB, DEFAULT_DRAW_RING_MB)),
            recorded=tuple((k, environ[k]) for k in sorted(set(names) | BOOL_FLAGS) if k in environ))

    @property
    def flags(self) -> Dict[str, str]:
        """The row's `flags` (name -> value)."""
        return dict(self.recorded)


@dataclass(frozen=True)
class DriverSettings:
    """What the driver (the process running `detrun`) reads from its environment: waits in seconds, workers per GPU."""

    heartbeat_s: float = 10.0  # DETRUN_HEARTBEAT_S: between heartbeats in a running run's manifest
    pg_timeout_s: float = 60.0  # DETRUN_PG_TIMEOUT_S: to reserve the run's GPUs (its placement group)
    node_loss_grace_s: float = 30.0  # DETRUN_NODE_LOSS_GRACE_S: for a dead node's bundle to be re-placed
    isolation_grace_s: float = 60.0  # DETRUN_ISOLATION_GRACE_S: an isolated cell's task, beyond its cell timeout
    # DETRUN_WORKERS_PER_GPU: tasks (worker processes) a GPU runs at once, each on 1/N of it (Ray fractional GPUs),
    # so one's host work overlaps another's kernels; rows keep the GPU's slot (docs/performance.md)
    workers_per_gpu: int = 1
    # DETRUN_WORKER_NICENESS: the niceness Ray starts the tasks' worker processes at (Ray's own default is 15)
    worker_niceness: int = 0


DRIVER_VARIABLES = {"heartbeat_s": "DETRUN_HEARTBEAT_S", "pg_timeout_s": "DETRUN_PG_TIMEOUT_S",
                    "node_loss_grace_s": "DETRUN_NODE_LOSS_GRACE_S", "isolation_grace_s": "DETRUN_ISOLATION_GRACE_S"}
WORKERS_PER_GPU, MAX_WORKERS_PER_GPU = "DETRUN_WORKERS_PER_GPU", 8
WORKER_NICENESS = "DETRUN_WORKER_NICENESS"


def _whole(environ: Mapping[str, str], name: str, low: int, high: int, default: int, note: str = "") -> int:
    """A whole-number setting in [low, high] (default when unset; note: said after it in the error)."""
    raw = environ.get(name, str(default))
    if not raw.strip().isdigit() or not low <= int(raw) <= high:
        raise DetrunError(f"{name}={raw!r}: expected a whole number from {low} to {high} (unset: {default}{note})")
    return int(raw)


def driver_settings(environ: Optional[Mapping[str, str]] = None) -> DriverSettings:
    """The driver's settings from its environment (os.environ by default), checked: the CLI reads them when a
    command starts, so a bad value is a one-line usage error (DetrunError, exit 2) naming the variable."""
    environ = os.environ if environ is None else environ
    values: Dict[str, float] = {}
    workers = _whole(environ, WORKERS_PER_GPU, 1, MAX_WORKERS_PER_GPU, 1)
    nice = _whole(environ, WORKER_NICENESS, 0, 19, 0, "; Ray's own default is 15")
    for field in fields(DriverSettings):
        if field.name not in DRIVER_VARIABLES:
            continue
        name = DRIVER_VARIABLES[field.name]
        raw = environ.get(name)
        if raw is None:
            continue
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value <= 0:
            raise DetrunError(f"{name}={raw!r}: expected a number of seconds > 0 (unset: {field.default})")
        values[field.name] = value
    return DriverSettings(**values, workers_per_gpu=workers, worker_niceness=nice)
