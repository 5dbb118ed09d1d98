"""tests/quick_exit.py: a test process that imported SGLang ends with pytest's own status, its teardown
skipped; without SGLang imported the teardown runs as before. Each case is a pytest in a subprocess whose test
module registers a teardown that crashes (SIGSEGV at exit, as CI saw) or leaves a mark."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

MODULE = """
import atexit, os, signal, sys, types
if {sglang}:
    sys.modules["sglang"] = types.ModuleType("sglang")  # what an SGLang test leaves behind
atexit.register({teardown})

def test_it():
    assert {passes}
"""
CRASH = "lambda: os.kill(os.getpid(), signal.SIGSEGV)"


def _pytest(tmp_path: Path, plugin: bool, **fields) -> subprocess.CompletedProcess:
    (tmp_path / "test_case.py").write_text(textwrap.dedent(MODULE.format(**fields)))
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path / "test_case.py")]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(args + (["-p", "tests.quick_exit"] if plugin else []), cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)


def test_a_crash_in_teardown_after_sglang_no_longer_ends_a_passing_run(tmp_path):
    assert _pytest(tmp_path, plugin=False, sglang=True, teardown=CRASH, passes=True).returncode == -11
    done = _pytest(tmp_path, plugin=True, sglang=True, teardown=CRASH, passes=True)
    assert done.returncode == 0 and "1 passed" in done.stdout


def test_a_failing_run_keeps_its_status(tmp_path):
    done = _pytest(tmp_path, plugin=True, sglang=True, teardown=CRASH, passes=False)
    assert done.returncode == 1 and "1 failed" in done.stdout


def test_without_sglang_the_teardown_runs(tmp_path):
    mark = tmp_path / "mark"
    done = _pytest(tmp_path, plugin=True, sglang=False, teardown=f"lambda: open({str(mark)!r}, 'w').close()",
                   passes=True)
    assert done.returncode == 0 and mark.exists()
