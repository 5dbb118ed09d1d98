"""The driver's heartbeat in a running run's manifest: `detrun status` tells a dead driver from a live one.

The manifest of a running run holds `driver: {host, pid, heartbeat_unix, period_s}`; the runner refreshes
it once a period (DETRUN_HEARTBEAT_S, default 10 s). A run whose driver has not beaten for STALE_PERIODS
periods is stale, unless the driver is a live process on this host (then it is only slow).
"""

from __future__ import annotations

import os
import socket
import time
from typing import Optional

from ..envflags import driver_settings
from ..record.manifest import DriverRecord, Manifest
from ..record.status import RunStatus

STALE_PERIODS = 3


def driver_record() -> DriverRecord:
    """This process as the run's driver, beating now."""
    return DriverRecord(host=socket.gethostname(), pid=os.getpid(), heartbeat_unix=time.time(),
                        period_s=driver_settings().heartbeat_s)


def _alive(pid: object) -> bool:
    """Whether pid is a live process here (a zombie is not)."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def silent_for(manifest: Manifest, now: Optional[float] = None) -> Optional[float]:
    """Seconds without a heartbeat if the run is stale (running, its driver gone); else None."""
    driver = manifest.get("driver")
    if manifest.get("status") != RunStatus.RUNNING or not isinstance(driver, dict):
        return None
    try:
        age = (time.time() if now is None else now) - float(driver["heartbeat_unix"])
        limit = STALE_PERIODS * float(driver.get("period_s", driver_settings().heartbeat_s))
    except (KeyError, TypeError, ValueError):
        return None
    if age <= limit or (driver.get("host") == socket.gethostname() and _alive(driver.get("pid"))):
        return None
    return age


def run_state(manifest: Manifest, now: Optional[float] = None) -> str:
    """The manifest's status, or `stale (...)` for a running run whose driver is gone."""
    age = silent_for(manifest, now)
    if age is None:
        return str(manifest.get("status"))
    return f"stale (no heartbeat for {age:.0f} s; the driver is gone)"
