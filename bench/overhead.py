"""Runner overhead: wall time of a whole submit vs the kernel time its rows record.

    python bench/overhead.py jobs/paged.yaml [--address auto]
run_ms is measured around each run() (eager) or graph replay with device syncs; plan_ms around plan().
"""

import argparse
import time

from detrun import runner
from detrun.spec import load_spec
from detrun.store import RunStore


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("job")
    ap.add_argument("--address")
    ap.add_argument("--runs-root", default="runs-bench")
    args = ap.parse_args()
    t0 = time.perf_counter()
    slots = runner.connect(args.address)
    t1 = time.perf_counter()
    store = RunStore(args.runs_root)
    result = runner.submit(load_spec(args.job), store, slots)
    t2 = time.perf_counter()
    rows = [r for r in store.read_rows([result.run_id]).to_pylist() if r["status"] == "ok"]
    # A cell's rows share one run: count each cell once.
    cells = {(r["case"], r["mode"], r["repeat"], r["slot"]): r for r in rows}
    run_s = sum(r["run_ms"] for r in cells.values()) / 1e3
    plan_s = sum(r["plan_ms"] for r in cells.values()) / 1e3
    total = t2 - t0
    print(f"ray connect/start {t1 - t0:.1f} s, submit {t2 - t1:.1f} s, cells {len(cells)}")
    print(f"kernel (run) time {run_s:.3f} s = {100 * run_s / total:.2f}% of wall; plan {plan_s:.3f} s; "
          f"overhead ratio wall/kernel {total / max(run_s, 1e-9):.0f}x")


if __name__ == "__main__":
    main()
