"""Processes the tests start in their own session (a `ray start` head, a `detrun submit`), found and ended
by session id: every process Ray starts from them keeps that session (its workers get their own process
groups, not their own sessions). Nothing is ended by name."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Dict, List

from tests.helpers import ROOT


def session_processes(sid: int) -> Dict[int, str]:
    """pid -> name (comm) of every live process in session sid."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        name, rest = stat.split("(", 1)[1].rsplit(")", 1)
        state, _, _, session = rest.split()[:4]
        if int(session) == sid and state != "Z":
            found[int(entry)] = name
    return found


def end_session(sid: int, timeout: float = 20.0) -> None:
    """SIGKILL each process of session sid by its pid, then wait until none is left."""
    deadline = time.monotonic() + timeout
    while session_processes(sid):
        for pid in session_processes(sid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        assert time.monotonic() < deadline, f"session {sid} still has {session_processes(sid)}"
        time.sleep(0.2)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _answers(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=5).close()
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False
    return True


def detrun(*args: str, env: Dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    """`python3 -m detrun.cli ARGS` from the repository root."""
    return subprocess.run([sys.executable, "-m", "detrun.cli", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


class RayHead:
    """`ray start --head` with the dashboard on 127.0.0.1:<free port>, 1 fake GPU, 2 CPUs, in its own temp dir
    (short: Ray's socket paths must fit 107 bytes) and session; stop() ends that session (what
    `ray stop --force` does, to this head only) and removes the temp dir. Ray's fixed default ports
    (GCS 6379, client server 10001, job agent 52365) are free ones here: another Ray on this machine
    holding them would leave this head without a job agent."""

    def __init__(self, env: Dict[str, str]):
        self.port, self.agent_port, client_port = free_port(), free_port(), free_port()
        self.env, self.address = env, f"http://127.0.0.1:{self.port}"
        self.temp_dir = temp_dir = tempfile.mkdtemp(prefix="detrun-ray-", dir="/tmp")
        cmd = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--port=0",
               "--include-dashboard=true", "--dashboard-host=127.0.0.1", f"--dashboard-port={self.port}",
               f"--dashboard-agent-listen-port={self.agent_port}", f"--ray-client-server-port={client_port}",
               "--num-gpus=1", "--num-cpus=2", "--disable-usage-stats", f"--temp-dir={temp_dir}"]
        self.proc = subprocess.Popen(cmd, cwd=temp_dir, env=env, start_new_session=True, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)

    def wait_ready(self, timeout: float = 90.0) -> None:
        """Until `ray start` returned 0 and the dashboard and the job agent answer HTTP (401 is an answer)."""
        out, _ = self.proc.communicate(timeout=timeout)
        assert self.proc.returncode == 0, out[-3000:]
        deadline = time.monotonic() + timeout
        for url in (f"{self.address}/api/version", f"http://127.0.0.1:{self.agent_port}/api/local_raylet_healthz"):
            while not _answers(url):
                assert time.monotonic() < deadline, f"{url} never answered"
                time.sleep(0.5)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        end_session(self.proc.pid)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def names(processes: Dict[int, str]) -> List[str]:
    return sorted(set(processes.values()))
