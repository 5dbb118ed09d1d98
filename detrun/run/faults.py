"""Faults that tests inject into a shard task, through one seam: runner calls `at_task_start()` once per task.

Inert unless a variable below is set; only tests set them, in a test spec's `env:` (it reaches the task's
process via Ray's runtime_env, where monkeypatching cannot: the tasks, and often the driver, are other
processes). docs/environment.md lists them.
"""

from __future__ import annotations

import os
import time

CRASH_ONCE = "DETRUN_TEST_CRASH_ONCE"  # path of a marker file: the first task to create it dies
SLEEP_S = "DETRUN_TEST_SLEEP_S"  # seconds every task sleeps before running
WAIT_FOR = "DETRUN_TEST_WAIT_FOR"  # path of a file: every task writes PATH.waiting-PID, then waits until PATH exists
WAIT_LIMIT_S = 300.0


def at_task_start() -> None:
    """A crash (the first task to create CRASH_ONCE's marker exits), a wait for WAIT_FOR's file (a task that
    runs until the test releases it, at most WAIT_LIMIT_S) or a sleep (SLEEP_S), when asked for."""
    marker = os.environ.get(CRASH_ONCE)
    if marker:
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            pass
        else:
            os._exit(1)  # a worker crash: Ray retries it (max_retries), it is no exception of ours
    release = os.environ.get(WAIT_FOR)
    if release:
        open(f"{release}.waiting-{os.getpid()}", "w").close()  # the test sees this task got here
    deadline = time.monotonic() + WAIT_LIMIT_S
    while release and not os.path.exists(release) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(float(os.environ.get(SLEEP_S, "0")))
