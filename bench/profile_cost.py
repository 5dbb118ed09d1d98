"""What one kernel-audit profile costs a task (profiling.py's `_kernels`: 17.5-19.4 ms a plan in the sweep's
first repeat on two H200s, 246 plans), split into the profiler's start, the run, its stop and reading the
kernel names, and two cheaper ways measured beside it in the same process:

    python bench/profile_cost.py [--cells 60] [--kernels 4] [--size 2048] [--prepare-beside-draws | --prepare-first]

- `now`: a session per cell, names from `prof.events()` (what profiling.py does);
- `raw`: a session per cell, names from the profiler's kineto results (no FunctionEvent tree);
- `one`: one session for every cell, the cells told apart by marker kernels on their stream
  (detrun/kernels/backends/kernel_session.py, what the FlashInfer backend does since 2026-12-06).
Each way must find the same kernel names per cell (checked). A cell is `--kernels` matmuls of `--size`.
The process's first session is split into its prepare (CUPTI's set-up, torch's `_prepare_profiler`, which
releases the GIL) and its start; with --prepare-beside-draws the prepare runs on a thread while this thread
draws CPU values as a task's first repeat does: are both as fast as alone?
Needs CUDA. Prints milliseconds per cell and the ratios of this one run.
"""

import argparse
import statistics
import sys
import time
import warnings

import torch
from torch.profiler import ProfilerActivity, profile

from detrun.kernels.backends.kernel_session import MARKER, NAME_CHARS, ProfileSession


def cell(a, n):
    for _ in range(n):
        a = (a @ a).tanh_()  # two kernels: the GEMM and the elementwise tanh
    return a


def names_events(prof):
    return sorted({e.name for e in prof.events() if str(e.device_type).endswith("CUDA")})


def names_raw(prof):
    return sorted({e.name() for e in prof.profiler.kineto_results.events() if str(e.device_type()).endswith("CUDA")})


def per_cell(a, n, cells, reader):
    """[(start, run, stop, read) ms] of a session per cell; and the names of the last."""
    times, names = [], []
    for _ in range(cells):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        p = profile(activities=[ProfilerActivity.CUDA])
        p.__enter__()
        t1 = time.perf_counter()
        cell(a, n)
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        p.__exit__(None, None, None)
        t3 = time.perf_counter()
        names = reader(p)
        t4 = time.perf_counter()
        times.append([1e3 * x for x in (t1 - t0, t2 - t1, t3 - t2, t4 - t3)])
    return times, names


def one_session(a, n, cells):
    """(ms per cell, names of each cell, the marker's name) with one session as the FlashInfer backend keeps it
    (kernel_session.py): a marker kernel before and after each cell on its stream, no wait between cells."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    session, groups = ProfileSession(torch.device("cuda")), []
    for _ in range(cells):
        with session.cell() as names:
            cell(a, n)
        groups.append(names)
    session.close()
    ms = 1e3 * (time.perf_counter() - t0) / cells
    return ms, groups, MARKER


def draws(seconds: float) -> float:
    """Normal values drawn on this thread's CPU for about `seconds`: values per second."""
    g, n, t0 = torch.Generator().manual_seed(0), 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        torch.randn(1 << 22, generator=g)
        n += 1 << 22
    return n / (time.perf_counter() - t0)


def prepared_first() -> tuple:
    """This process's first session prepared before its CUDA context exists: (the profile, prepare seconds)."""
    p = profile(activities=[ProfilerActivity.CUDA])
    t0 = time.perf_counter()
    p.prepare_trace()
    return p, time.perf_counter() - t0


def first_session(a, n, beside: bool, early=None) -> str:
    """This process's first session, its prepare and start timed apart; beside: the prepare on a thread while
    this thread draws (the draws' rate alone first, then beside it); early: (profile, seconds) prepared before
    the CUDA context (prepared_first)."""
    import threading

    p = early[0] if early else profile(activities=[ProfilerActivity.CUDA])
    alone = draws(1.0) if beside else 0.0
    t0 = time.perf_counter()
    if early:
        t0, t1 = t0 - early[1], t0
    elif beside:
        done = {}
        thread = threading.Thread(target=lambda: (p.prepare_trace(), done.setdefault("t", time.perf_counter())))
        thread.start()
        rate = draws(0.2)
        while thread.is_alive():
            rate = min(rate, draws(0.2))
        thread.join()
        t1 = done["t"]
    else:
        p.prepare_trace()
        t1 = time.perf_counter()
    p.start_trace()
    t2 = time.perf_counter()
    cell(a, n)
    torch.cuda.synchronize()
    t3 = time.perf_counter()
    p.stop_trace()
    t4 = time.perf_counter()
    found = len(names_raw(p))
    line = (f"first session in this process: prepare {1e3 * (t1 - t0):.1f} ms"
            f"{' (before the CUDA context)' if early else ''}, start {1e3 * (t2 - t1):.1f} ms, "
            f"stop {1e3 * (t4 - t3):.1f} ms; {found} kernel names")
    if beside:
        line += (f"; the prepare on a thread beside this thread's draws: draws {rate / 1e6:.0f} M values/s at the "
                 f"slowest 0.2 s (alone {alone / 1e6:.0f} M/s)")
    return line


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cells", type=int, default=60)
    ap.add_argument("--kernels", type=int, default=4, help="matmul + tanh pairs per cell")
    ap.add_argument("--size", type=int, default=2048)
    ap.add_argument("--prepare-beside-draws", action="store_true", help="the first prepare on a thread (above)")
    ap.add_argument("--prepare-first", action="store_true",
                    help="the first prepare before this process's CUDA context: is CUPTI's set-up cheaper there?")
    args = ap.parse_args()
    if not torch.cuda.is_available():  # the driver's device count: no context yet
        print("profile_cost.py: needs CUDA (it times torch.profiler's CUDA activity)", file=sys.stderr)
        sys.exit(2)
    # torch.profiler's note that a session's events are cleared at its end: each way reads them before that
    warnings.filterwarnings("ignore", message="Warning: Profiler clears events")
    early = prepared_first() if args.prepare_first else None
    t0 = time.perf_counter()
    a = torch.randn(args.size, args.size, device="cuda") / args.size ** 0.5
    cell(a, args.kernels)
    torch.cuda.synchronize()
    print(f"CUDA context and the first cell: {1e3 * (time.perf_counter() - t0):.1f} ms")
    print(first_session(a, args.kernels, args.prepare_beside_draws, early))  # CUPTI's set-up
    per_cell(a, args.kernels, 3, names_events)  # warm-up: CUPTI and the kernels
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(args.cells):
        cell(a, args.kernels)
    torch.cuda.synchronize()
    bare = 1e3 * (time.perf_counter() - t) / args.cells
    rows = {}
    for way, reader in (("now", names_events), ("raw", names_raw)):
        times, names = per_cell(a, args.kernels, args.cells, reader)
        med = [statistics.median(col) for col in zip(*times)]
        rows[way] = (sum(med), names)
        print(f"{way}: {sum(med):.2f} ms per cell (start {med[0]:.2f}, run {med[1]:.2f}, stop {med[2]:.2f}, "
              f"read names {med[3]:.2f}); {len(names)} kernel names")
    ms, groups, mark = one_session(a, args.kernels, args.cells)
    kept = sorted({n[:NAME_CHARS] for n in rows["now"][1]})  # the names as the rows keep them
    same = len(groups) == args.cells and all(g == kept for g in groups)
    print(f"one: {ms:.2f} ms per cell in one session (marker {mark!r}, {len(groups)} cells told apart); "
          f"same names per cell as `now`: {same}")
    if not same:  # say how: which cells, and what they held
        odd = [i for i, g in enumerate(groups) if g != kept]
        print(f"  cells that differ: {len(odd)} of {len(groups)}, the first (cell {odd[0] if odd else '-'}): "
              f"{groups[odd[0]] if odd else []} against `now`'s {kept}")
    print(f"bare cell {bare:.2f} ms; profile cost over the bare cell: now {rows['now'][0] - bare:.2f} ms, "
          f"raw {rows['raw'][0] - bare:.2f} ms, one {ms - bare:.2f} ms; "
          f"raw/now {rows['raw'][0] / rows['now'][0]:.2f}x, one/now {ms / rows['now'][0]:.2f}x; "
          f"names equal now vs raw: {rows['now'][1] == rows['raw'][1]}")


if __name__ == "__main__":
    main()
