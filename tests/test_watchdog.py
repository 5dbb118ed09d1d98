"""The shard task's cell watchdog (detrun/run/watchdog.py): armed about once a second, not once per cell; a
cell running past its timeout still ends the process, a cell within it never does."""

import subprocess
import sys
import textwrap

from detrun.run import watchdog
from detrun.run.watchdog import REARM_S, CellWatchdog


def test_armed_once_a_second_and_every_cell_covered_for_its_whole_timeout(monkeypatch):
    armed = []
    monkeypatch.setattr(watchdog.faulthandler, "dump_traceback_later",
                        lambda timeout, exit: armed.append((now[0], timeout, exit)))
    monkeypatch.setattr(watchdog.faulthandler, "cancel_dump_traceback_later", lambda: armed.append(None))
    now = [100.0]
    dog = CellWatchdog(300.0, clock=lambda: now[0])
    starts = []
    for _ in range(10_000):  # the sweep's steady cells: 1.5 ms each
        starts.append(now[0])
        dog.before_cell()
        now[0] += 0.0015
    assert len(armed) == 15  # was 10,000 (one per cell)
    assert all(timeout == 300.0 + REARM_S and exit for _, timeout, exit in armed)
    for t in starts:  # the arming in force when the cell started fires T..T+REARM_S after it
        at = max(a for a, _, _ in armed if a <= t)
        assert t - REARM_S < at <= t
    dog.stop()
    assert armed[-1] is None and dog.armed_at is None


RUN = textwrap.dedent("""
    import sys, time
    from detrun.run.watchdog import CellWatchdog
    dog = CellWatchdog(float(sys.argv[1]))
    for seconds in map(float, sys.argv[2:]):
        dog.before_cell()
        time.sleep(seconds)  # the cell
    dog.stop()
    print("done")
""")


def _run(*args: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", RUN, *map(str, args)], capture_output=True, text=True, timeout=60)


def test_a_cell_past_its_timeout_ends_the_process_with_every_stack():
    out = _run(0.5, 0.1, 600)  # the second cell hangs past _run's 60 s: only the watchdog ends it in time
    assert out.returncode == 1 and "done" not in out.stdout
    assert "Timeout (" in out.stderr and "most recent call first" in out.stderr  # faulthandler's dump


def test_cells_within_their_timeout_never_end_the_process():
    # 0.6 s cells under a 1 s timeout for 3 s (each ends >= 0.4 s before its deadline): an arming without
    # REARM_S on its deadline, or one never armed again, would have ended it
    out = _run(1.0, *[0.6] * 5)
    assert out.returncode == 0 and out.stdout.strip() == "done", out.stderr
