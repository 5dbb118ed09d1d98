"""Bytes stored per run, with blobs shared by content under the runs root (issue 17, item 4).

    python bench/blob_storage.py jobs/paged.yaml --nights 10 [--runs-root DIR]

Runs `detrun submit JOB --runs-root DIR` N times in this process (the command's own code; one local Ray
for all), measuring the root after each: run 2's bytes added as a share of run 1's, the total after N
runs against N x run 1, and what the per-run layout (every run with its own copy of its blobs) would
hold: each run's directory plus the blobs its rows name.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time

from detrun import exitpolicy
from detrun.cli import app
from detrun.store.runs import RunStore


def tree_bytes(path: str) -> tuple:
    """(bytes, files) under path."""
    total = files = 0
    for folder, _, names in os.walk(path):
        for name in names:
            total += os.path.getsize(os.path.join(folder, name))
            files += 1
    return total, files


def per_run_layout(store: RunStore, run_id: str) -> int:
    """Bytes the run would hold with its own blobs: its directory plus each blob its rows name."""
    blobs = 0
    for digest in store.blob_refs(run_id):
        path = os.path.join(store.base, "blobs", digest[:2], f"{digest}.bin")
        blobs += os.path.getsize(path) if os.path.exists(path) else 0
    return tree_bytes(os.path.join(store.base, run_id))[0] + blobs


def submit(job: str, root: str, run_id: str) -> float:
    start = time.perf_counter()
    with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
        code = exitpolicy.run(app, ["submit", job, "--runs-root", root, "--run-id", run_id])
    if code != 0:
        sys.exit(f"detrun submit {job} ({run_id}) exited {code}; see detrun compare {run_id} --runs-root {root}")
    return time.perf_counter() - start


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("job")
    ap.add_argument("--nights", type=int, default=10)
    ap.add_argument("--runs-root", help="an empty folder (default: a new temporary one)")
    args = ap.parse_args()
    root = args.runs_root or tempfile.mkdtemp(prefix="blob-bench-")
    print(f"{args.job} x {args.nights} into {root}; {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f}")
    print(f"{'run':>5} {'wall s':>7} {'root bytes':>12} {'added':>10} {'% of run 1':>10} {'blob files':>10} "
          f"{'per-run layout':>15}")
    store, sizes, old_layout = RunStore(root), [0], 0
    for night in range(1, args.nights + 1):
        wall = submit(args.job, root, f"night-{night:02d}")
        sizes.append(tree_bytes(root)[0])
        old_layout += per_run_layout(store, f"night-{night:02d}")
        added = sizes[-1] - sizes[-2]
        print(f"{night:>5} {wall:>7.1f} {sizes[-1]:>12,} {added:>10,} {100 * added / sizes[1]:>9.1f}% "
              f"{tree_bytes(os.path.join(root, 'blobs'))[1]:>10} {old_layout:>15,}")
    n, first = args.nights, sizes[1]
    print(f"run 2 added {sizes[2] - first:,} bytes = {100 * (sizes[2] - first) / first:.2f}% of run 1 ({first:,})"
          if n > 1 else f"run 1: {first:,} bytes")
    print(f"{n} runs: {sizes[-1]:,} bytes = {sizes[-1] / first:.2f}x run 1 (vs {n}x = {n * first:,}); "
          f"the per-run layout would hold {old_layout:,} ({old_layout / sizes[-1]:.1f}x more)")


if __name__ == "__main__":
    main()
