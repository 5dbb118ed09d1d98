"""Where a steady-state cell's time goes, in one process (no Ray): wall per cell, then the same cells
under cProfile (host functions) and under torch.profiler (device kernels and how busy the GPU was).

    python bench/cell_profile.py bench/jobs/long.yaml [--set k=v ...] [--repeats 8] [--code DIR]
    python bench/cell_profile.py bench/jobs/sweep10k.yaml --repeats 3 --rounds 3 \
        --variants "default lag=0 gc=auto same"     # knobs timed in turn, in one process
    python bench/cell_profile.py bench/jobs/sweep10k.yaml --repeats 2 --in-ray   # the same in a Ray task
    python bench/cell_profile.py bench/jobs/sweep10k.yaml --repeats 2 --in-ray --ray-env RAY_worker_niceness=0

--in-ray runs it all in a Ray worker (a local Ray, one task asking for one GPU and one CPU, as detrun's shard
tasks do; its output returned with its result), to tell what a Ray worker costs the host work from what the
host costs. Each round also prints
how much of its wall the cells' thread was on a CPU.

The first repeat of every case, phase and mode is the warm-up (inputs, capture, kernel profile) and is not
counted; the later repeats are steady state, as `detrun timings` counts them.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import io
import os
import pstats
import statistics
import sys
import time
from typing import Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# --code DIR: time the detrun package of another checkout (the code before a change, say)
CODE = (os.path.abspath(sys.argv[sys.argv.index("--code") + 1]) if "--code" in sys.argv[:-1]
        else os.environ.get("CELL_PROFILE_CODE", ROOT))  # --in-ray: the task's argv is Ray's
sys.path.insert(0, CODE)

import torch  # noqa: E402

from detrun.run import worker  # noqa: E402
from detrun.run.worker import ShardRunner  # noqa: E402
from detrun.spec.matrix import Shard, cells_for  # noqa: E402
from detrun.spec.model import load_spec  # noqa: E402
from detrun.stages import host_clocks  # noqa: E402


def run_cells(runner: ShardRunner, spec, repeats, batches) -> int:
    n = 0
    streams = getattr(runner, "main_stream", contextlib.nullcontext)  # the code before had no digest stream
    collector = getattr(runner, "collector", contextlib.nullcontext())  # nor gc pauses timed, nor a frozen heap
    with streams(), collector:
        for cell in cells_for(spec, tuple(repeats)):
            runner._cell(cell, batches)
            n += 1
        flush = getattr(runner, "_flush", None)  # the code before the overlapped digests had none
        if flush:
            flush()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return n


def apply(runner: ShardRunner, variant: str, defaults: tuple) -> None:
    """A variant: "default" (the task's settings), or knobs joined by "+": depth=N (cells in flight), stream or
    same (digests on a low-priority stream of their own, or on the cells' stream), lag=N (how far digests may
    fall behind; 0: unbounded), gc=auto (the collector scans the whole heap, nothing frozen), graphs=off (digests
    launched from Python, not replayed from CUDA graphs)."""
    knobs = dict(k.partition("=")[::2] for k in variant.split("+") if k != "default")
    depth, stream, graphs = defaults  # the task's settings, then the variant's knobs
    if hasattr(runner, "graphs"):  # --code: a checkout before digest graphs has none
        runner.graphs = None if knobs.get("graphs") == "off" else graphs
    runner.depth = int(knobs.get("depth", depth))
    if runner.backend is not None:
        runner.backend.in_flight = runner.depth
    if hasattr(runner, "lag"):  # --code: a checkout before digests' lag was bounded has none
        runner.lag = int(knobs["lag"]) if "lag" in knobs else worker.digest_lag(runner.depth)
    if hasattr(runner, "collector"):
        runner.collector.freeze = knobs.get("gc", "freeze") == "freeze"
    want = "stream" in knobs or (stream and "same" not in knobs)
    # streams made again only when the setting changes: a new stream's allocations take new blocks, and the
    # digest graphs are keyed by the outputs' addresses (the sweep's task makes its streams once)
    if hasattr(runner, "use_digest_stream") and torch.cuda.is_available() and want != (runner.streams is not None):
        runner.use_digest_stream(want)


class FullCollections:
    """The full (generation 2) collections while it is entered: how many, and the longest, in ms."""

    def __enter__(self):
        self.pauses: List[float] = []
        self.start = 0.0
        gc.callbacks.append(self._seen)
        return self

    def _seen(self, phase: str, info: dict) -> None:
        if info["generation"] == 2:
            if phase == "start":
                self.start = time.perf_counter()
            else:
                self.pauses.append((time.perf_counter() - self.start) * 1e3)

    def __exit__(self, *exc):
        gc.callbacks.remove(self._seen)

    def __str__(self) -> str:
        longest = f", longest {max(self.pauses):.1f} ms" if self.pauses else ""
        return f"{len(self.pauses)} full gc collections{longest}"


def full_collection_ms() -> str:
    """One forced full collection with the heap as the task has it, frozen and not."""
    def timed() -> float:
        t = time.perf_counter()
        gc.collect()
        return (time.perf_counter() - t) * 1e3

    gc.freeze()
    frozen = timed()
    gc.unfreeze()
    objects = len(gc.get_objects())
    return f"a full gc collection of this process: {timed():.1f} ms ({objects} objects), {frozen:.1f} ms frozen"


def measure(runner: ShardRunner, spec, repeats, batches) -> Tuple[int, float, float, Dict[str, float], str]:
    """(cells, wall ms per cell, kernel ms per cell, every stage's ms per cell, the full gc collections and
    the thread's CPU share) of these repeats."""
    before, counted = dict(runner.stages.seconds), dict(runner.stages.counts)
    w0, t0, p0 = host_clocks()
    with FullCollections() as full:
        n = run_cells(runner, spec, repeats, batches)
    w1, t1, p1 = host_clocks()
    wall = (w1 - w0) / n * 1e3
    per_cell = {k: (v - before.get(k, 0.0)) / n * 1e3 for k, v in runner.stages.seconds.items()}
    host = (f"the cells' thread on a CPU {100 * (t1 - t0) / (w1 - w0):.0f}% of the wall, the process "
            f"{(p1 - p0) / (w1 - w0):.2f} CPUs")
    graphs = [f"{runner.stages.counts.get(k, 0) - counted.get(k, 0)} {k.split(': ')[-1]}s"
              for k in ("digest graph: replay", "digest graph: capture")]
    return n, wall, per_cell.get("kernel", 0.0), per_cell, f"{full}; {host}; digest graphs: {', '.join(graphs)}"


def in_ray(argv: List[str], env: Dict[str, str]) -> None:
    """main(argv) in a task of a local Ray, as detrun's shard tasks run (one GPU, one CPU), with env in its
    runtime_env too (RAY_worker_niceness=0, say); prints the task's output."""
    import ray

    path = os.pathsep.join([CODE, os.path.join(ROOT, "bench"), os.environ.get("PYTHONPATH", "")])
    ray.init(include_dashboard=False,
             runtime_env={"env_vars": {"PYTHONPATH": path, "CELL_PROFILE_CODE": CODE, **env}})

    @ray.remote(num_gpus=1 if torch.cuda.is_available() else 0, num_cpus=1)
    def task(args: List[str]) -> str:
        import cell_profile  # this file, from the bench directory on the task's PYTHONPATH

        text = io.StringIO()
        with contextlib.redirect_stdout(text):
            cell_profile.main(args)
        return text.getvalue()

    print(f"in a Ray task:\n{ray.get(task.remote(argv))}", end="", flush=True)
    ray.shutdown()


def main(argv: Optional[List[str]] = None):
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("job")
    ap.add_argument("--set", action="append", default=[], dest="overrides")
    ap.add_argument("--repeats", type=int, default=8, help="steady repeats per phase")
    ap.add_argument("--code", default=ROOT, help="the checkout whose detrun package runs (default: this one)")
    ap.add_argument("--variants", default="default",
                    help='space-separated, each "default" or knobs joined by +: depth=N, stream, same, graphs=off '
                         '(see apply)')
    ap.add_argument("--rounds", type=int, default=1, help="times each variant is timed, interleaved")
    ap.add_argument("--in-ray", action="store_true", help="run it all in a task of a local Ray (see above)")
    ap.add_argument("--rounds-only", action="store_true", help="the timed rounds, not cProfile nor torch.profiler")
    ap.add_argument("--ray-env", action="append", metavar="K=V", help="with --in-ray: in the task's runtime_env")
    args = ap.parse_args(argv)
    if args.in_ray:  # the task runs these arguments without --in-ray (its --ray-env then goes unread)
        return in_ray([a for a in argv if a != "--in-ray"], dict(kv.partition("=")[::2] for kv in args.ray_env or ()))
    spec = load_spec(args.job, args.overrides)
    os.environ.update(spec.env)  # what Ray's runtime_env does for a task
    r, variants = args.repeats, args.variants.split()
    timed_repeats = args.rounds * len(variants) * r
    threads = torch.get_num_threads()
    runner = ShardRunner(spec, Shard(0, tuple(range(1 + timed_repeats + 2 * r))), "cell-profile")
    print(f"process {os.getpid()}: niceness {os.nice(0)}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}, "
          f"torch threads {threads} (the runner's {torch.get_num_threads()}), CPU affinity "
          f"{len(os.sched_getaffinity(0))} of {os.cpu_count()}", flush=True)
    batches: dict = {}
    defaults = runner.depth, getattr(runner, "streams", None) is not None, getattr(runner, "graphs", None)
    run_cells(runner, spec, [0], batches)  # warm-up: inputs, graphs, kernel profile

    print(f"code {CODE}")
    results: Dict[str, List[Tuple[float, float]]] = {v: [] for v in variants}
    at = 1
    for round_ in range(args.rounds):
        for variant in variants:
            apply(runner, variant, defaults)
            n, wall, kernel, per_cell, full = measure(runner, spec, range(at, at + r), batches)
            at += r
            results[variant].append((wall, kernel))
            over = 100 * (wall - kernel) / max(kernel, 1e-9)
            print(f"{args.job} {' '.join(args.overrides)} [{variant}, round {round_ + 1}]: {n} steady cells, "
                  f"{wall:.3f} ms per cell, kernel {kernel:.3f} ms, overhead {over:.1f}% of kernel time "
                  f"({runner.backend_name})")
            shown = ", ".join(f"{k} {v:.3f}" for k, v in per_cell.items() if v > 0.0005)
            print(f"  stages, ms per steady cell: {shown}; {full}")
    if len(variants) > 1 or args.rounds > 1:
        print("| variant | wall ms per cell (median) | kernel ms | overhead (median of rounds) |")
        print("|---|---|---|---|")
        for variant, runs in results.items():
            wall = statistics.median(w for w, _ in runs)
            kernel = statistics.median(k for _, k in runs)
            over = statistics.median(100 * (w - k) / max(k, 1e-9) for w, k in runs)
            print(f"| {variant} | {wall:.3f} | {kernel:.3f} | {over:.1f}% |")
    if args.rounds_only:
        return
    print(full_collection_ms())
    apply(runner, variants[0], defaults)
    r0 = at
    prof = cProfile.Profile()
    prof.enable()
    n = run_cells(runner, spec, range(r0, r0 + r), batches)
    prof.disable()
    text = io.StringIO()
    stats = pstats.Stats(prof, stream=text)
    stats.sort_stats("tottime").print_stats(30)
    stats.sort_stats("cumulative").print_stats(45)
    print(f"cProfile, {n} cells (times are for all of them; cProfile slows Python down):")
    print("\n".join(line for line in text.getvalue().splitlines() if line.strip()))

    from torch.profiler import ProfilerActivity, profile

    t = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
        n = run_cells(runner, spec, range(r0 + r, r0 + 2 * r), batches)
    wall = (time.perf_counter() - t) * 1e3
    events = p.key_averages()
    if not torch.cuda.is_available():
        print(events.table(sort_by="self_cpu_time_total", row_limit=15, max_name_column_width=60))
        return
    busy = sum(e.self_device_time_total for e in events) / 1e3
    print(f"torch.profiler, {n} cells: wall {wall / n:.3f} ms per cell (profiled), device busy {busy / n:.3f} ms "
          f"per cell ({100 * busy / wall:.1f}%)")
    print(events.table(sort_by="self_device_time_total", row_limit=15, max_name_column_width=60))
    print(events.table(sort_by="self_cpu_time_total", row_limit=25, max_name_column_width=60))


if __name__ == "__main__":
    main()
