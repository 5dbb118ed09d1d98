"""Bad inputs, tried as a user would type them: each command's exit code and its stderr, as a table.

    python bench/bad_inputs.py            # prints a Markdown table (docs/reliability.md holds one)

Runs `python -m detrun.cli` in a scratch directory; nothing here starts Ray (every case must fail
before it would). Exit 2 with one stderr line is what every row should show.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JOB = str(ROOT / "jobs" / "paged.yaml")


def cases(tmp: Path):
    (tmp / "latin1.yaml").write_bytes("name: caf\xe9\n".encode("latin-1"))
    (tmp / "afile").write_text("x")
    (tmp / "runs" / "bad").mkdir(parents=True)
    (tmp / "runs" / "bad" / "manifest.json").write_text('{"run_id": "bad", "spec": [], "gpus": 1, "status": "x"}')
    (tmp / "empty.yaml").write_text("")
    (tmp / "runs" / "torn").mkdir()
    (tmp / "runs" / "torn" / "manifest.json").write_text("{not json")
    return [
        ("non-UTF-8 spec", ["submit", str(tmp / "latin1.yaml")]),
        ("missing spec file", ["submit", str(tmp / "nope.yaml")]),
        ("empty spec file", ["submit", str(tmp / "empty.yaml")]),
        ("no spec, no --resume", ["submit"]),
        ("`--set` value not YAML", ["submit", JOB, "--set", "name=[unclosed"]),
        ("unknown spec field", ["submit", JOB, "--set", "flashinfer.backnd=fa3"]),
        ("unknown top-level key", ["submit", JOB, "--set", "nosuch.key=1"]),
        ("qo_len of 10**9", ["submit", JOB, "--set", "requests.target.qo_len=1000000000"]),
        ("repeats of 10**9", ["submit", JOB, "--set", "repeats=1000000000"]),
        ("prefix naming no request", ["submit", JOB, "--set", "requests.sibling.prefix=nobody"]),
        ("run id escaping the root", ["submit", JOB, "--run-id", "../../x"]),
        ("absolute run id", ["submit", JOB, "--run-id", "/tmp/x"]),
        ("runs root is a file", ["submit", JOB, "--runs-root", str(tmp / "afile")]),
        ("bad --gpus", ["submit", JOB, "--gpus", "zero"]),
        ("bad --expect", ["compare", "x", "--expect", "batch=exact"]),
        ("unwritable --junit", ["compare", "x", "--junit", str(tmp / "afile" / "j.xml")]),
        ("report -o to a directory", ["report", "x", "-o", str(tmp)]),
        ("no such run", ["compare", "nope", "--runs-root", str(tmp / "runs")]),
        ("the same run twice", ["compare", "torn", "torn", "--runs-root", str(tmp / "runs")]),
        ("manifest of the wrong shape", ["compare", "bad", "--runs-root", str(tmp / "runs")]),
        ("unreadable manifest", ["compare", "torn", "--runs-root", str(tmp / "runs")]),
        ("--baseline with two runs", ["compare", "a", "b", "--baseline", "--runs-root", str(tmp / "runs")]),
        ("unknown option", ["compare", "x", "--no-such-option"]),
    ]


def main() -> int:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="detrun-bad-"))
    try:
        print("| input | command | exit | stderr lines | first stderr line |\n|---|---|---|---|---|")
        for what, args in cases(tmp):
            env = dict(os.environ, PYTHONPATH=str(ROOT), RAY_AUTH_MODE="disabled")
            res = subprocess.run([sys.executable, "-m", "detrun.cli", *args], cwd=tmp, env=env,
                                 capture_output=True, text=True, timeout=120)
            lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
            shown = " ".join(args).replace(str(tmp), "$TMP").replace(str(ROOT) + "/", "")
            first = (lines[0] if lines else "").replace(str(tmp), "$TMP").replace(str(ROOT) + "/", "")
            first = first.replace("|", "\\|")[:160]
            print(f"| {what} | `detrun {shown}` | {res.returncode} | {len(lines)} | {first} |")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
