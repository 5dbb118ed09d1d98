"""Compare and history at scale: seconds, CPU seconds and peak RSS, as ratios to the 10 s goal.

    python bench/gen_rows.py /tmp/runs-10m                   # once: 10M rows
    python bench/compare_scale.py /tmp/runs-10m [--cli]
    git archive BEFORE detrun | tar -x -C /tmp/detrun_old    # BEFORE: the commit before the change measured
    python bench/compare_scale.py /tmp/runs-1m --code /tmp/detrun_old

Each measurement runs in a fresh child process, which reports its own peak RSS (getrusage at exit)
and, for the library calls, the seconds of the call alone (no interpreter start or imports);
--cli also times the `detrun` command line (compare over every run under the root) the same way.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from typing import NamedTuple

GOAL_S = 10.0
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIB = {
    "compare": "from detrun.judge.compare import compare_runs; from detrun.judge.findings import judge; "
               "from detrun.store.runs import RunStore; "
               "s = RunStore({root!r}); t = time.perf_counter(); c = compare_runs(s, s.list_runs()); "
               "print('@T', time.perf_counter() - t); "
               "print(c.rows, 'rows,', len(c.mismatches), 'mismatches,', len(c.missing), 'missing, exit', "
               "int(judge(c).exit_code))",
    "history": "from detrun.judge.history import history; from detrun.store.runs import RunStore; "
               "t = time.perf_counter(); h = history(RunStore({root!r})); print('@T', time.perf_counter() - t); "
               "print(len(h.runs), 'runs,', len(h.drifts), 'drifts')",
}
CLI = {
    "detrun compare": "from detrun.cli import main; from detrun.store.runs import RunStore; import sys; "
                      "sys.argv = ['detrun', 'compare', *RunStore({root!r}).list_runs(), "
                      "'--runs-root', {root!r}]; main()",
    "detrun history": "from detrun.cli import main; import sys; "
                      "sys.argv = ['detrun', 'history', '--runs-root', {root!r}]; main()",
}
PROLOGUE = ("import atexit, resource, sys, time; atexit.register(lambda: sys.stderr.write("
            "'@RSS %d\\n' % resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)); ")


def _tagged(text: str, tag: str) -> float:
    return next((float(line.split()[1]) for line in text.splitlines() if line.startswith(tag)), float("nan"))


class Timed(NamedTuple):
    wall: float  # the child process, interpreter start and imports included
    call: float  # the call alone, as the child printed it ("@T seconds"); nan when it did not
    cpu: float  # user + sys of the child
    rss_mib: float  # the child's own peak RSS
    rc: int
    out: str  # its stdout
    last: str  # its last line of stdout that is not a tag (else of stderr)


def timed(code: str, where: str = ROOT) -> Timed:
    """code run in a fresh child process with the detrun checkout at `where` first on its path."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", PROLOGUE + code], cwd=where, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": where})  # this checkout, not an installed one
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lines = [ln for ln in proc.stdout.strip().splitlines() if not ln.startswith("@")]
    return Timed(wall, _tagged(proc.stdout, "@T"), cpu, _tagged(proc.stderr, "@RSS") / 1024, proc.returncode,
                 proc.stdout, (lines or [proc.stderr.strip()[-200:]])[-1])


def measure(name: str, code: str, where: str = ROOT) -> None:
    got = timed(code, where)
    call = f"call {got.call:6.2f} s" if got.call == got.call else "call      -  "
    print(f"{name:16s} wall {got.wall:6.2f} s ({got.wall / GOAL_S:4.2f}x the {GOAL_S:.0f} s goal) | {call} | "
          f"cpu {got.cpu:6.2f} s | peak RSS {got.rss_mib:6.0f} MiB | exit {got.rc} | {got.last[:70]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root")
    ap.add_argument("--cli", action="store_true", help="also time the command line")
    ap.add_argument("--code", default=ROOT, help="the detrun checkout to time (default: this one)")
    ap.add_argument("--only", choices=["compare", "history"], help="time only this library call")
    args = ap.parse_args()
    print(f"runs root {args.root}; code {args.code}; {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f}")
    jobs = {**LIB, **(CLI if args.cli else {})}
    for name, code in ({args.only: LIB[args.only]} if args.only else jobs).items():
        measure(name, code.format(root=args.root), os.path.abspath(args.code))


if __name__ == "__main__":
    main()
