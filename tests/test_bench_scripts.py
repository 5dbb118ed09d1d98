"""Every bench/*.py and scripts/*.py answers --help (its usage docstring) without a GPU or a running Ray,
and no usage text names a commit; every scripts/*.sh parses. Found by glob: a new script is covered."""

import os
import re
import subprocess
import sys

import pytest

from tests.helpers import ROOT

PY_SCRIPTS = sorted(p.relative_to(ROOT).as_posix() for p in [*ROOT.glob("bench/*.py"), *ROOT.glob("scripts/*.py")])
SH_SCRIPTS = sorted(p.relative_to(ROOT).as_posix() for p in ROOT.glob("scripts/*.sh"))
# A commit hash: a word of 7-40 hex digits with at least one digit and one letter.
COMMIT = re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")


def test_the_globs_find_the_scripts():
    assert "bench/sweep_scale.py" in PY_SCRIPTS and "scripts/plan_diff.py" in PY_SCRIPTS
    assert "scripts/gpu_check.sh" in SH_SCRIPTS


@pytest.mark.parametrize("script", PY_SCRIPTS)
def test_help_exits_0_with_its_usage(script):
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # no cluster: --help must not need one
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run([sys.executable, script, "--help"], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "usage" in out.stdout.lower()
    assert not COMMIT.findall(out.stdout), f"{script} --help names a commit: {COMMIT.findall(out.stdout)}"


@pytest.mark.parametrize("script", SH_SCRIPTS)
def test_shell_script_parses_and_its_usage_names_no_commit(script):
    out = subprocess.run(["bash", "-n", script], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    comments = "\n".join(line for line in (ROOT / script).read_text().splitlines() if line.lstrip().startswith("#"))
    assert not COMMIT.findall(comments), f"{script} names a commit: {COMMIT.findall(comments)}"
