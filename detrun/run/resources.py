"""Peak memory of each task (host RSS, device allocated and reserved) and of the driver, recorded in a
run's timings, and the lines `detrun timings` prints from them (and from the JIT cache's record; the command
itself: detrun/api.py)."""

from __future__ import annotations

import resource
import sys
from typing import Dict, List, Optional, Tuple


def host_peak_mb() -> float:
    """This process's peak resident memory (ru_maxrss: KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / 2**20 if sys.platform == "darwin" else peak / 2**10, 1)


def task_peaks(device) -> Dict[str, float]:
    """A task's peaks: host RSS of its process and, on CUDA, torch's peak allocated and reserved bytes."""
    peaks = {"host_peak_mb": host_peak_mb()}
    if getattr(device, "type", "cpu") == "cuda":
        import torch

        peaks["device_allocated_peak_mb"] = round(torch.cuda.max_memory_allocated(device) / 2**20, 1)
        peaks["device_reserved_peak_mb"] = round(torch.cuda.max_memory_reserved(device) / 2**20, 1)
    return peaks


PEAKS = (("host_peak_mb", "task host RSS"), ("device_allocated_peak_mb", "device allocated"),
         ("device_reserved_peak_mb", "device reserved"))


def peaks(shard_timings: Dict[str, dict]) -> Dict[str, Tuple[float, str]]:
    """Each recorded peak's largest value over a run's tasks, and the task (shard) that had it."""
    out = {}
    for key, _ in PEAKS:
        have = {name: t["memory"][key] for name, t in sorted(shard_timings.items()) if key in t.get("memory", {})}
        if have:
            name = max(have, key=lambda n: have[n])
            out[key] = (have[name], name)
    return out


def memory_line(run_timings: dict, shard_timings: Dict[str, dict]) -> Optional[str]:
    """Peak memory: the largest task's host RSS and device peaks (which task), the driver's RSS."""
    found = peaks(shard_timings)
    parts = [f"{what} {found[key][0]:.0f} MB ({found[key][1]})" for key, what in PEAKS if key in found]
    if "driver_peak_rss_mb" in run_timings:
        parts.append(f"driver RSS {run_timings['driver_peak_rss_mb']:.0f} MB")
    tasks = sum(1 for t in shard_timings.values() if t.get("memory"))
    return f"peak memory (largest of {tasks} tasks): " + ", ".join(parts) if parts else None


def gpu_steady_line(shard_timings: Dict[str, dict]) -> str:
    """The GPUs' steady line: wall per cell while all of a GPU's tasks ran steady cells (stages.gpu_steady)."""
    from ..stages import gpu_steady, gpu_steady_caveat, host_busy

    found = gpu_steady(shard_timings)
    if found is None:
        return "GPU steady: no window in which all of a GPU's tasks ran steady cells at once"
    cells, seconds, kernel, tasks = found
    cell, own = 1e3 * seconds / cells, 1e3 * kernel / cells
    line = (f"GPU steady: {cell:.3f} ms per cell ({cells:.0f} cells of {tasks} task(s) in {seconds:.1f} s, "
            f"{cells / seconds:.1f} cells/s)")
    line += (f", kernel {own:.3f} ms (CUDA events): overhead {100 * (cell / own - 1):.1f}%" if kernel
             else ", kernel not timed (no CUDA)")
    caveat = gpu_steady_caveat(shard_timings, found)
    busy = host_busy(shard_timings)
    return line + (f"; {caveat}" if caveat else "") + (f"; {busy}" if busy else "")


def critical_path_line(shard_timings: Dict[str, dict]) -> str:
    """The shard written last, segment by segment from the first submit ("" without its times)."""
    from ..stages import critical_path

    found = critical_path(shard_timings)
    if found is None:
        return ""
    shard, seconds, segments = found
    parts = ", ".join(f"{name} {s:.1f} s" for name, s in segments if s >= 0.05)
    return f"critical path: shard {shard} written {seconds:.1f} s after the first submit ({parts})"


def run_lines(store, run_id: str) -> List[str]:
    """The lines after a run's stage table: peak memory, the JIT cache's transfers (those it recorded); with
    several workers per GPU, what a task's steady cell then holds and the GPUs' steady line (which says how busy
    the host was), else how busy the host was."""
    from ..stages import host_busy
    from .jitcache import summary_line

    shards, run = store.read_timings(run_id), store.manifest(run_id).get("timings") or {}
    lines = [memory_line(run, shards), summary_line(shards), critical_path_line(shards)]
    workers = run.get("workers_per_gpu", 1)
    if workers > 1:
        lines += [f"{workers} workers per GPU (DETRUN_WORKERS_PER_GPU): a task's steady cell above counts the other "
                  "tasks' kernels on its GPU too; the GPU's own:", gpu_steady_line(shards)]
    else:
        lines.append(host_busy(shards))
    return [line for line in lines if line]


def no_steady_cells(spec_data: dict, gpus: int) -> str:
    """Why a run has no steady-state line: which of its cells would have been steady, and why none was."""
    from ..spec.matrix import shards
    from ..spec.model import spec_from_dict

    spec = spec_from_dict(spec_data, "the run's manifest")
    if max(len(shard.repeats) for shard in shards(spec, gpus)) == 1:
        return (f"no steady cells: every (case, phase, mode) ran once per task "
                f"(repeats_per_task: {spec.repeats_per_task or spec.repeats})")
    return "no steady cells: no cell ran again in its task (its repeats were skipped, errored or isolated)"

