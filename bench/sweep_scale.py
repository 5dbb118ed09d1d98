"""A 10,000-cell sweep end to end: cells/s, time to verdict, steady per-cell overhead, peak memory, compare.

    python bench/sweep_scale.py [--address auto]          # submit bench/jobs/sweep10k.yaml, compare
    python bench/sweep_scale.py --run RUN                 # the numbers of a stored run (compare timed here)
    python bench/sweep_scale.py --scale 0.01 --length-scale 0.01 --set heads.qo=4 --set heads.kv=2 \\
        --set head_dim=32                                 # the same sweep at CPU size (reference backend)
--scale multiplies the generators' case counts (cells follow), --length-scale every qo/prefix length.
--workers-per-gpu N: N tasks at once on each GPU (DETRUN_WORKERS_PER_GPU), the repeats split among them
(repeats_per_task / N); the GPU's steady line then times the window in which all its tasks were steady.
--reference RUN: a stored run of the same job with one worker per GPU (the way before): this run's GPU steady
wall per cell against its steady kernel, time to verdict against its kernel time, cells/s against its.
Prints the stage table and steady-state line of `detrun timings`, then one Markdown row for
docs/performance.md. Exits with the verdict's code (0 reproducible, 1 not).
"""

import argparse
import math
import os
import time
from datetime import datetime
from pathlib import Path

import yaml
from rich.console import Console

from detrun.judge.baseline import verdict_of
from detrun.present.render import print_timings, steady_overhead
from detrun.run import runner
from detrun.run.jitcache import cache_root
from detrun.run.resources import gpu_steady_line, host_peak_mb, peaks, run_lines
from detrun.spec.matrix import cells_for, check_size
from detrun.spec.model import JobSpec, apply_overrides, spec_from_dict
from detrun.stages import KERNEL_ROW, gpu_steady, gpu_steady_caveat, run_breakdown
from detrun.store.runs import RunStore

JOB = str(Path(__file__).parent / "jobs" / "sweep10k.yaml")
LENGTHS = (("qo_len", 1), ("prefix_len", 0))  # a length field and its least value


def _scale_lengths(node: dict, factor: float) -> None:
    for name, least in LENGTHS:
        value = node.get(name)
        if isinstance(value, int):
            node[name] = max(least, round(value * factor))
        elif isinstance(value, list):
            node[name] = [max(least, round(v * factor)) for v in value]
    if isinstance(node.get("lengths"), list):
        node["lengths"] = [round(v * factor) for v in node["lengths"]]


def scaled(data: dict, scale: float = 1.0, length_scale: float = 1.0) -> dict:
    """The job with its generators' counts times `scale` (at least 1) and every length times `length_scale`."""
    for gen in data.get("sweep") or []:
        if isinstance(gen.get("count"), int):
            gen["count"] = max(1, round(gen["count"] * scale))
    if length_scale != 1.0:
        for node in list((data.get("requests") or {}).values()) + list(data.get("sweep") or []):
            _scale_lengths(node, length_scale)
            for shape in ("target", "filler"):
                if isinstance(node.get(shape), dict):
                    _scale_lengths(node[shape], length_scale)
    return data


def load(args) -> JobSpec:
    data = yaml.safe_load(Path(args.job).read_text())
    data = scaled(apply_overrides(data, args.overrides, args.job), args.scale, args.length_scale)
    if args.workers_per_gpu > 1:  # one shard per worker
        data["repeats_per_task"] = math.ceil((data.get("repeats_per_task") or data["repeats"]) / args.workers_per_gpu)
    spec = spec_from_dict(data, args.job)
    check_size(spec, 1, args.job)
    return spec


def _iso_s(manifest: dict) -> float:
    """Seconds from a stored run's creation to its finish (its manifest's timestamps)."""
    return (datetime.fromisoformat(manifest["finished"]) - datetime.fromisoformat(manifest["created"])).total_seconds()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--job", default=JOB)
    ap.add_argument("--run", help="a stored run to report on (nothing is submitted)")
    ap.add_argument("--address")
    ap.add_argument("--set", action="append", default=[], dest="overrides")
    ap.add_argument("--scale", type=float, default=1.0, help="times the generators' case counts")
    ap.add_argument("--length-scale", type=float, default=1.0, help="times every qo_len and prefix_len")
    ap.add_argument("--runs-root", default="runs-bench")
    ap.add_argument("--run-id", help="the new run's id (default: the job's name and a time stamp)")
    ap.add_argument("--no-jit-cache", action="store_true")
    ap.add_argument("--workers-per-gpu", type=int, default=1, help="tasks at once per GPU (DETRUN_WORKERS_PER_GPU)")
    ap.add_argument("--reference", help="a stored run of the job with one worker per GPU, in the same runs root")
    args = ap.parse_args()
    os.environ["DETRUN_WORKERS_PER_GPU"] = str(args.workers_per_gpu)  # read by the driver at submit
    store, start = RunStore(args.runs_root), time.perf_counter()
    if args.run:
        run_id, manifest = args.run, store.manifest(args.run)
        spec, gpus, connect_s, submit_s = spec_from_dict(manifest["spec"], run_id), int(manifest["gpus"]), 0.0, None
    else:
        spec = load(args)
        gpus = runner.connect(args.address)
        connect_s = time.perf_counter() - start
        options = runner.RunOptions(jit_cache=None if args.no_jit_cache else cache_root(store))
        run_id = runner.submit(spec, store, gpus, args.job, run_id=args.run_id, options=options).run_id
        submit_s = time.perf_counter() - start
    compared = time.perf_counter()
    verdict = verdict_of(store, [run_id])
    done = time.perf_counter()
    compare_s = done - compared
    to_verdict = done - start if submit_s is not None else _iso_s(store.manifest(run_id)) + compare_s

    console = Console(highlight=False, width=140)
    rows, tasks_s, steady = run_breakdown(store, run_id)
    print_timings(rows, tasks_s, steady, console)
    lines = run_lines(store, run_id)
    for line in lines:
        print(line)
    cells = len(list(cells_for(spec, tuple(range(spec.repeats))))) * gpus
    print(f"run {run_id}: {len(spec.cases)} cases x {len(spec.modes)} modes x {spec.repeats} repeats x {gpus} GPU(s) "
          f"= {cells} cells; verdict: {verdict.headline}")
    print(f"cells/s: {cells / tasks_s:.1f} ({cells} cells in {tasks_s:.1f} s from placement group to the last shard)")
    how = (f"connect {connect_s:.1f} s + submit {submit_s - connect_s:.1f} s + compare" if submit_s is not None
           else "manifest created -> finished, + compare now")
    print(f"time to verdict: {to_verdict:.1f} s ({how} {compare_s:.2f} s)")
    print(f"compare: {compare_s:.2f} s; this process's peak RSS (driver and compare): {host_peak_mb():.0f} MB")
    kernel_s = _kernel_s(rows)
    if kernel_s and args.workers_per_gpu > 1:  # a kernel's CUDA events then hold the other tasks' time slices
        print(f"time to verdict / kernel time: not here with {args.workers_per_gpu} workers per GPU (kernel "
              f"{kernel_s:.1f} s by CUDA events holds the other tasks' time slices): see the --reference line")
    elif kernel_s:
        print(f"time to verdict / kernel time: {to_verdict / kernel_s:.2f}x (kernel {kernel_s:.1f} s, CUDA events)")
    timings = store.read_timings(run_id)
    if not any(line.startswith("GPU steady") for line in lines):  # run_lines prints it with several workers
        print(gpu_steady_line(timings))
    found = gpu_steady(timings)
    if args.reference:
        print(against(store, args.reference, found, to_verdict, cells / tasks_s, gpu_steady_caveat(timings, found)))
    print(markdown_row(store, run_id, cells, tasks_s, to_verdict, compare_s, steady))
    return int(verdict.exit_code)


def _kernel_s(rows) -> float:
    return next((seconds for name, seconds, _ in rows if name == KERNEL_ROW), 0.0)


def against(store, reference: str, found, to_verdict: float, cells_per_s: float, caveat: str = "") -> str:
    """This run against a reference run with one worker per GPU: its steady kernel is the kernel alone (with
    several processes on a GPU, a kernel's CUDA events may include another process's time slice)."""
    rows, tasks_s, steady = run_breakdown(store, reference)
    spec = spec_from_dict(store.manifest(reference)["spec"], reference)
    ref_cells = len(list(cells_for(spec, tuple(range(spec.repeats))))) * int(store.manifest(reference)["gpus"])
    ref_rate = ref_cells / tasks_s
    parts = [f"reference {reference}: cells/s {ref_rate:.1f} (this run {cells_per_s / ref_rate:.2f}x), "
             f"run created -> finished {_iso_s(store.manifest(reference)):.1f} s"]
    kernel_s = _kernel_s(rows)
    if kernel_s:
        parts.append(f"time to verdict / its kernel time {to_verdict / kernel_s:.2f}x (kernel {kernel_s:.1f} s)")
    if steady and steady[2]["kernel"] > 0:
        n, cell_s, got = steady
        alone = 1e3 * got["kernel"] / n
        parts.append(f"its steady overhead {steady_overhead(cell_s, got):.1f}% (kernel {alone:.3f} ms)")
        if found is not None:
            cell = 1e3 * found[1] / found[0]
            parts.append(f"this run's GPU steady overhead vs that kernel: {100 * (cell / alone - 1):.1f}%"
                         + (f" ({caveat})" if caveat else ""))
    return "; ".join(parts)


def markdown_row(store, run_id: str, cells: int, tasks_s: float, to_verdict: float, compare_s: float, steady) -> str:
    """One row for docs/performance.md (its header first)."""
    found = peaks(store.read_timings(run_id))
    mb = lambda key: f"{found[key][0]:.0f}" if key in found else "-"  # noqa: E731
    driver = (store.manifest(run_id).get("timings") or {}).get("driver_peak_rss_mb")
    cell = over = "-"
    if steady:
        n, cell_s, parts = steady
        cell = f"{1e3 * cell_s / n:.2f} ms (kernel {1e3 * parts['kernel'] / n:.2f} ms)"
        overhead = steady_overhead(cell_s, parts)
        over = f"{overhead:.1f}%" if overhead is not None else "-"
    head = ("| cells | cells/s | time to verdict s | compare s | steady cell | steady overhead | task host MB "
            "| device allocated / reserved MB | driver MB |\n|" + "---|" * 9 + "\n")
    return head + (f"| {cells} | {cells / tasks_s:.1f} | {to_verdict:.1f} | {compare_s:.2f} | {cell} | {over} | "
                   f"{mb('host_peak_mb')} | {mb('device_allocated_peak_mb')} / {mb('device_reserved_peak_mb')} | "
                   f"{f'{driver:.0f}' if driver else '-'} |")


if __name__ == "__main__":
    raise SystemExit(main())
