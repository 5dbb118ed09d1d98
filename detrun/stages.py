"""Stage timers: where a task's seconds go (stored per shard; bench/overhead.py sums them)."""

from __future__ import annotations

import os
import time
from collections import defaultdict
from contextlib import contextmanager
from typing import Dict, Iterator, List, Optional, Tuple

from .errors import DetrunError


class Stages:
    """Seconds and counts per named stage; `with stages("plan"): ...` adds one."""

    def __init__(self) -> None:
        self.seconds: Dict[str, float] = defaultdict(float)
        self.counts: Dict[str, int] = defaultdict(int)

    def add(self, name: str, seconds: float, count: int = 1) -> None:
        self.seconds[name] += seconds
        self.counts[name] += int(count)

    @contextmanager
    def __call__(self, name: str, count: bool = True) -> Iterator[None]:
        """Time the block as this stage (count=False: more seconds of one already counted)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - start, count)

    def as_dict(self) -> Dict[str, dict]:
        return {k: {"s": round(v, 6), "n": self.counts[k]} for k, v in self.seconds.items()}


def process_started_unix() -> Optional[float]:
    """When this process started (Linux /proc), to time a worker's start before our code ran."""
    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return time.time() - uptime + start_ticks / os.sysconf("SC_CLK_TCK")


JIT_RESTORE, JIT_SAVE = "jit cache: restore", "jit cache: save"  # run/jitcache.py; count: the modules moved
# The host never waits for a kernel it launched: it plans and launches the next cell while the kernel runs,
# then waits ("device wait") for the kernel and its digests before writing that cell's rows. "kernel" is
# device time (CUDA events), overlapping the host's stages, so it is reported beside them (KERNEL_ROW), not
# in their sum. Stages nested in another: their parent is reported as "<parent> (rest)" without them. Host
# work done while a kernel runs is counted in its own stage, so the stages add up to the wall.
DEVICE_WAIT = "device wait"
GC_PAUSE = "gc pause"  # Python's garbage collector ran (run/collector.py): inside whatever stage it interrupted
GC_ROW = "gc pauses (inside the stages above)"
# the kernel audit's one session (kernels/backends/kernel_session.py): its start (CUPTI's set-up) and its stop
# (the drain, the trace, the names); "profile" is a cell profiled alone (one more run)
PROFILE_START, PROFILE_STOP = "profile: session start", "profile: session stop"
PLAN_WAIT = "plan wait"  # plan() waits for its pinned staging buffer's last copy (kernels/backends/staging.py)
KERNEL = "kernel"
DIGEST_CAPTURE, DIGEST_REPLAY = "digest graph: capture", "digest graph: replay"
KERNEL_ROW = "kernel (device time, overlaps the stages above)"
# run/beside.py: the first cases' inputs built on a thread during the profile session's start (overlaps it)
INPUTS_BESIDE = "inputs beside the profile session's start (overlaps it)"
# kernels/inputs.py: a set's CPU draw waited for (or drawn on the task's thread) and its copy to the device
DRAW_WAIT, DRAW_MOVE = "inputs: wait for draws", "inputs: move to device"
PINNED_RING = "draws: pinned ring"  # kernels/pinned_ring.py: its host memory allocated (once, at the task's start)
NESTED = {
    "backend init": ("import flashinfer", JIT_RESTORE),
    "inputs": (DRAW_WAIT, DRAW_MOVE),
    "forward": ("plan", PLAN_WAIT, "graph warm-up", "graph capture", "profile", PROFILE_START, PROFILE_STOP),
    # kernels/digest_graphs.py: captures, and the launches replayed (a count: their seconds are the digest's)
    "digest": (DIGEST_CAPTURE, DIGEST_REPLAY),
}
# A cell whose case and mode already ran in its task: its wall (forward + digests + rows), and the
# seconds of these stages within it (recorded as "steady cell: <stage>").
STEADY_CELL = "steady cell"
STEADY_PARTS = (KERNEL, "plan", PLAN_WAIT, "digest", DEVICE_WAIT, GC_PAUSE)
STEADY_PART_NAMES = tuple(f"{STEADY_CELL}: {p}" for p in STEADY_PARTS)  # "steady cell: <stage>", in that order
STEADY_KERNEL = STEADY_PART_NAMES[STEADY_PARTS.index(KERNEL)]
BESIDE = (KERNEL_ROW, GC_ROW, INPUTS_BESIDE)  # rows that overlap the stages that add up to the wall
TASK_STAGES = ("cuda context", PINNED_RING, "backend init", "environment", "inputs", "digest: wait for prewarm",
               "forward", "digest", DEVICE_WAIT, "tensor copy", JIT_SAVE)


def _gap(later: Optional[float], earlier: Optional[float]) -> float:
    return max(0.0, later - earlier) if later is not None and earlier is not None else 0.0


def breakdown(run_timings: dict, shard_timings: Dict[str, dict]) -> List[Tuple[str, float, int]]:
    """(stage, seconds summed over shards, count) in the order a task meets them, then KERNEL_ROW and GC_ROW.

    Shards of one GPU run one after another, so on one GPU the seconds (but BESIDE's) add up to the wall.
    """
    total: Dict[str, float] = defaultdict(float)
    count: Dict[str, int] = defaultdict(int)

    def put(name: str, seconds: float, n: int = 1) -> None:
        total[name] += seconds
        count[name] += n

    put("placement group", run_timings.get("placement_group_s", 0.0))
    for t in shard_timings.values():
        d = t.get("driver", {})
        stages = {k: v["s"] for k, v in t.get("stages", {}).items()}
        counts = {k: v["n"] for k, v in t.get("stages", {}).items()}
        submitted, started = d.get("submitted_unix"), t.get("process_started_unix")
        if started is not None and submitted is not None:
            started = max(started, submitted)  # a worker Ray started ahead of the task: only the wait counts
        put("schedule + start worker process", _gap(started, submitted))
        put("Ray worker boot", _gap(t.get("task_entered_unix"), started))
        put("import torch + detrun", t.get("import_s", 0.0))
        for name in TASK_STAGES:
            inner = NESTED.get(name, ())
            for sub in inner:
                put(sub, stages.get(sub, 0.0), counts.get(sub, 0))
            rest = stages.get(name, 0.0) - sum(stages.get(sub, 0.0) for sub in inner)
            put(f"{name} (rest)" if inner else name, max(0.0, rest), counts.get(name, 0))
        put("task (rest: rows, hooks)", max(0.0, t.get("run_s", 0.0) - sum(stages.get(n, 0.0) for n in TASK_STAGES)))
        put(KERNEL_ROW, stages.get(KERNEL, 0.0), counts.get(KERNEL, 0))
        put(GC_ROW, stages.get(GC_PAUSE, 0.0), counts.get(GC_PAUSE, 0))
        if INPUTS_BESIDE in stages:
            put(INPUTS_BESIDE, stages[INPUTS_BESIDE], counts.get(INPUTS_BESIDE, 0))
        put("return result to driver", _gap(d.get("ready_unix"), t.get("returned_unix")))
        put("driver: fetch result", d.get("get_s", 0.0))
        put("driver: write Parquet + blobs", d.get("write_s", 0.0))
    return [(name, total[name], count[name]) for name in total]


def critical_path(shard_timings: Dict[str, dict]) -> Optional[Tuple[str, float, List[Tuple[str, float]]]]:
    """(shard, seconds, its segments) of the shard written last, timed from the run's first submitted task: what
    bounds the time to a verdict, where the stage sums (breakdown) count shards that ran side by side. Segments:
    waiting for its turn, worker start, imports, until its first steady cell (set-up and first repeat) and the
    steady cells (or its cells, none steady), to the driver and written. None when no shard has the times."""
    done = {}
    for shard, t in shard_timings.items():
        d = t.get("driver", {})
        keys = (d.get("submitted_unix"), t.get("task_entered_unix"), t.get("returned_unix"), d.get("ready_unix"))
        if None not in keys:
            done[shard] = keys[3] + d.get("get_s", 0.0) + d.get("write_s", 0.0)
    if not done:
        return None
    start = min(shard_timings[s]["driver"]["submitted_unix"] for s in done)
    last = max(done, key=done.__getitem__)
    t, d = shard_timings[last], shard_timings[last]["driver"]
    imported = t["task_entered_unix"] + t.get("import_s", 0.0)
    trace = t.get("steady_trace") or []
    cells = ([("until its first steady cell", max(trace[0][0], imported)), ("steady cells", t["returned_unix"])]
             if trace else [("its cells (none steady)", t["returned_unix"])])
    marks = [("waiting for its turn", d["submitted_unix"]), ("worker start", t["task_entered_unix"]),
             ("imports", imported), *cells, ("to the driver and written", done[last])]
    segments, at = [], start
    for name, when in marks:
        segments.append((name, max(0.0, when - at)))
        at = max(at, when)
    return last, done[last] - start, segments


def took_time(rows: List[Tuple[str, float, int]]) -> List[Tuple[str, float, int]]:
    """The rows of stages that took time (at least the 0.5 ms the table's 3 decimals show); the others
    folded into one row, last, so that the sum stays the same. BESIDE rows are not summed: one that took
    no time is left out."""
    shown = [r for r in rows if r[1] >= 0.0005]
    hidden = [r for r in rows if r[1] < 0.0005 and r[0] not in BESIDE]
    if not hidden:
        return shown
    return shown + [(f"{len(hidden)} stages under 0.5 ms (--all lists them)", sum(r[1] for r in hidden),
                     sum(r[2] for r in hidden))]


def steady_state(shard_timings: Dict[str, dict]) -> Optional[Tuple[int, float, Dict[str, float]]]:
    """(cells, their seconds, {stage: its seconds in them}) over every shard's steady-state cells, or None."""
    def total(name: str, key: str) -> float:
        return sum(t.get("stages", {}).get(name, {}).get(key, 0) for t in shard_timings.values())

    cells = int(total(STEADY_CELL, "n"))
    if not cells:
        return None
    return cells, total(STEADY_CELL, "s"), {p: total(name, "s") for p, name in zip(STEADY_PARTS, STEADY_PART_NAMES)}


class SteadyTrace:
    """When a task's steady cells ended: (unix time, steady cells so far, their kernel seconds so far) at the
    first, every EVERY-th and the last; gpu_steady reads the rate of a GPU whose tasks ran at once from it."""

    EVERY = 64
    CLOCKS_EVERY = 8  # host_clocks() (two system calls, ~3 us) at each of the first 8 steady cells, then every 8th

    def __init__(self, stages: Stages) -> None:
        self.stages, self.n = stages, 0
        self.marks: List[Tuple[float, int, float]] = []
        self.last: Optional[Tuple[float, int, float]] = None
        self.clocks: List[Tuple[float, float, float]] = []  # host_clocks() at the first and the latest read

    def cell(self) -> None:
        """One more steady cell ended now."""
        self.n += 1
        self.last = (time.time(), self.n, self.stages.seconds.get(STEADY_KERNEL, 0.0))
        if self.n <= self.CLOCKS_EVERY or self.n % self.CLOCKS_EVERY == 0:
            self.clocks[1 if self.clocks else 0:] = [host_clocks()]
        if self.n == 1 or self.n % self.EVERY == 0:
            self.marks.append(self.last)

    def points(self) -> List[Tuple[float, int, float]]:
        return self.marks + ([self.last] if self.last is not None and self.last != self.marks[-1] else [])

    def host(self) -> Optional[Dict[str, float]]:
        """From the first steady cell's end to the latest whose clocks were read (any of the first 8, then every
        8th: all but up to 7 last cells): wall seconds, the CPU seconds of the thread that ran the cells and of the
        whole process, and the process's niceness (None before two steady cells)."""
        if len(self.clocks) < 2:
            return None
        (w0, t0, p0), (w1, t1, p1) = self.clocks
        return {"wall_s": w1 - w0, "thread_cpu_s": t1 - t0, "process_cpu_s": p1 - p0, "niceness": os.nice(0)}


def host_clocks() -> Tuple[float, float, float]:
    """(wall, this thread's CPU, this process's CPU) seconds now."""
    return time.perf_counter(), time.thread_time(), time.process_time()


def host_busy(shard_timings: Dict[str, dict]) -> str:
    """How busy the host was over the tasks' steady cells: the cells' thread on a CPU and the process's CPUs (""
    when no task recorded it). Well under 100%: the thread was off its CPU (descheduled, or blocked in a wait that
    sleeps). CUDA's waits for the device spin by default, so near 100% means host work or a device wait: the
    steady line's `device wait` tells them apart."""
    found = [t["steady_host"] for t in shard_timings.values() if t.get("steady_host")]
    wall = sum(h["wall_s"] for h in found)
    if not found or wall <= 0:
        return ""
    thread = sum(h["thread_cpu_s"] for h in found) / wall
    process = sum(h["process_cpu_s"] for h in found) / wall
    nice = sorted({h["niceness"] for h in found if "niceness" in h})
    at = f", niceness {'/'.join(map(str, nice))}" if nice else ""
    return (f"host in the steady cells: the cells' thread on a CPU {100 * thread:.0f}% of the wall (device waits "
            f"spin on it too), the process {process:.2f} CPUs ({len(found)} task(s), {wall:.1f} s{at})")


def _at(points: List[list], when: float) -> Tuple[float, float]:
    """(steady cells, kernel seconds) of a trace at `when`, linear between its points."""
    for (t0, n0, k0), (t1, n1, k1) in zip(points, points[1:]):
        if t0 <= when <= t1:
            f = (when - t0) / (t1 - t0) if t1 > t0 else 1.0
            return n0 + f * (n1 - n0), k0 + f * (k1 - k0)
    return float(points[-1][1]), float(points[-1][2])


def gpu_steady(shard_timings: Dict[str, dict]) -> Optional[Tuple[float, float, float, int]]:
    """(steady cells, seconds, kernel seconds, tasks) over each GPU slot's window in which every one of its
    tasks that ran steady cells was in its steady phase (DETRUN_WORKERS_PER_GPU: several at once): the GPU's
    wall per cell, whatever the number of processes feeding it. Slots add up; None without such a window (a
    GPU whose shards did not all run at once, e.g. more shards than workers, has none)."""
    slots: Dict[int, List[List[list]]] = defaultdict(list)
    for t in shard_timings.values():
        if len(t.get("steady_trace") or ()) > 1 and "slot" in t:
            slots[t["slot"]].append(t["steady_trace"])
    cells = seconds = kernel = 0.0
    tasks = 0
    for traces in slots.values():
        start, end = max(p[0][0] for p in traces), min(p[-1][0] for p in traces)
        if end <= start:
            continue
        for points in traces:
            (n0, k0), (n1, k1) = _at(points, start), _at(points, end)
            cells, kernel = cells + n1 - n0, kernel + k1 - k0
        seconds, tasks = seconds + end - start, tasks + len(traces)
    return (cells, seconds, kernel, tasks) if cells else None


GPU_STEADY_MIN_S = 5.0  # a GPU steady window shorter than this (seconds), or holding under a quarter of the
GPU_STEADY_MIN_SHARE = 0.25  # tasks' steady cells, is reported but not judged (gpu_steady_caveat)


def gpu_steady_caveat(shard_timings: Dict[str, dict], found: Optional[Tuple[float, float, float, int]]) -> str:
    """Why a GPU steady figure cannot be judged ("" when it can): a short window, or one holding few of the
    steady cells (with several workers per GPU the tasks' steady phases may overlap only briefly, e.g. when
    only the task holding repeat 0 profiles; on the H100, 2026-12-05: 1.1 s, 625 of 9,500 cells)."""
    if found is None:
        return ""
    total = sum(t["steady_trace"][-1][1] - t["steady_trace"][0][1] for t in shard_timings.values()
                if len(t.get("steady_trace") or ()) > 1 and "slot" in t)
    cells, seconds = found[0], found[1]
    if seconds >= GPU_STEADY_MIN_S and cells >= GPU_STEADY_MIN_SHARE * total:
        return ""
    return (f"too short to judge: a {seconds:.1f} s window holding {cells:.0f} of the tasks' {total:.0f} steady "
            f"cells (needs >= {GPU_STEADY_MIN_S:.0f} s and >= {GPU_STEADY_MIN_SHARE:.0%})")


def run_breakdown(store, run_id: str) -> Tuple[List[Tuple[str, float, int]], float, Optional[tuple]]:
    """(breakdown of a stored run, seconds from placement group to the last shard written, steady_state)."""
    run = store.manifest(run_id).get("timings") or {}
    shards = store.read_timings(run_id)
    if not shards:
        raise DetrunError(f"run {run_id} recorded no timings (made before detrun recorded them, or no shard finished)")
    wall = run.get("placement_group_s", 0.0) + run.get("tasks_s", 0.0)
    return breakdown(run, shards), wall, steady_state(shards)
