"""Every bench/*.py and scripts/*.py answers --help (its usage docstring) without a GPU or a running Ray,
and no usage text names a commit; every scripts/*.sh parses. Found by glob: a new script is covered."""

import os
import re
import runpy
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


@pytest.fixture
def as_main(monkeypatch):
    """run(script, *args): the script run in this process as `python SCRIPT ARGS` runs it (__main__, its
    folder first on sys.path, no RAY_ADDRESS), its exit code returned; what it changes in os.environ,
    sys.path and sys.modules (its sibling modules) is undone afterwards. A fresh interpreter per script
    spent seconds importing torch for each --help."""
    saved_env, modules = dict(os.environ), set(sys.modules)

    def run(script: str, *args: str):
        os.environ.pop("RAY_ADDRESS", None)  # no cluster: --help must not need one
        monkeypatch.setattr(sys, "argv", [script, *args])
        monkeypatch.setattr(sys, "path", [str((ROOT / script).parent), *sys.path])
        try:
            runpy.run_path(str(ROOT / script), run_name="__main__")
        except SystemExit as exc:
            return 0 if exc.code is None else exc.code
        return 0

    yield run
    os.environ.clear()
    os.environ.update(saved_env)
    folders = (str(ROOT / "bench"), str(ROOT / "scripts"))
    for name in set(sys.modules) - modules:
        if str(getattr(sys.modules[name], "__file__", "") or "").startswith(folders):
            del sys.modules[name]


@pytest.mark.parametrize("script", PY_SCRIPTS)
def test_help_exits_0_with_its_usage(script, as_main, capsys):
    code = as_main(script, "--help")
    out = capsys.readouterr()
    assert code == 0, out.out[-2000:] + out.err[-2000:]
    assert "usage" in out.out.lower()
    assert not COMMIT.findall(out.out), f"{script} --help names a commit: {COMMIT.findall(out.out)}"


@pytest.mark.parametrize("script", SH_SCRIPTS)
def test_shell_script_parses_and_its_usage_names_no_commit(script):
    out = subprocess.run(["bash", "-n", script], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    comments = "\n".join(line for line in (ROOT / script).read_text().splitlines() if line.lstrip().startswith("#"))
    assert not COMMIT.findall(comments), f"{script} names a commit: {COMMIT.findall(comments)}"


def test_plan_diff_kernels_fails_on_a_plan_whose_flashinfer_kernels_differ(store, as_main, capsys):
    """scripts/plan_diff.py --kernels: the same FlashInfer kernels per (mode, path, plan) exit 0 (other names,
    a fill say, only listed); one plan's kernel swapped for the ragged one exits 1 and names it."""
    from tests.helpers import rewrite_rows, run_inline, small

    paged = "void flashinfer::BatchPrefillWithPagedKVCacheKernel<128u>"
    for run in ("old", "new"):
        run_inline(store, small(modes=["eager"], repeats=1), run)
    assert as_main("scripts/plan_diff.py", "old", "new", "--runs-root", store.root, "--kernels") == 1
    assert "nothing compared" in capsys.readouterr().out  # no kernels recorded: not a pass
    fill = "void at::native::vectorized_elementwise_kernel<FillFunctor>"
    rewrite_rows(store, "old", lambda r: r.update(kernels=[paged, fill]))
    rewrite_rows(store, "new", lambda r: r.update(kernels=[paged]))
    assert as_main("scripts/plan_diff.py", "old", "new", "--runs-root", store.root, "--kernels") == 0
    out = capsys.readouterr().out
    assert "different: 0" in out and "not FlashInfer's, only in old: void at::native" in out
    first = {}

    def tamper(r):  # the first plan met: its kernel becomes the ragged one
        first.setdefault("plan", r["plan"])
        if r["plan"] == first["plan"]:
            r.update(kernels=[paged.replace("Paged", "Ragged")])

    rewrite_rows(store, "new", tamper)
    assert as_main("scripts/plan_diff.py", "old", "new", "--runs-root", store.root, "--kernels") == 1
    assert "different: 1" in capsys.readouterr().out
