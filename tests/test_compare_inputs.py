"""compare reads exactly the runs it is given: directories from several roots, one id twice, renamed runs."""

import shutil

import pytest
from typer.testing import CliRunner

from detrun.cli import app
from detrun.errors import DetrunError
from detrun.judge.baseline import comparison
from detrun.judge.claims import Checks
from detrun.judge.compare import compare_runs
from detrun.judge.findings import judge
from detrun.store.runs import RunReader, RunStore
from detrun.store.runset import RunSet, run_dirs
from tests.helpers import TINY, flip_one_ulp, is_alone_target, run_inline, small


def _compare(*args):
    return CliRunner().invoke(app, ["compare", *args])


def test_run_directories_from_two_roots_are_each_read(tmp_path):
    one, two = RunStore(str(tmp_path / "one")), RunStore(str(tmp_path / "two"))
    run_inline(one, small(**TINY), "a")
    run_inline(two, small(**TINY), "b")
    flip_one_ulp(one, "a", is_alone_target)  # the tampered run sits in the first root
    out = _compare(str(tmp_path / "one" / "a"), str(tmp_path / "two" / "b"))
    assert out.exit_code == 1 and "a:alone/target/eager/r0/g0" in out.output
    assert _compare(str(tmp_path / "two" / "b"), str(tmp_path / "one" / "a")).exit_code == 1


def test_two_runs_with_one_id_stay_two_runs(tmp_path):
    one, two = RunStore(str(tmp_path / "one")), RunStore(str(tmp_path / "two"))
    run_inline(one, small(**TINY), "night")
    run_inline(two, small(**TINY), "night")
    a, b = str(tmp_path / "one" / "night"), str(tmp_path / "two" / "night")
    store, labels = run_dirs("runs", [a, b])
    assert labels == [a, b]
    cmp = compare_runs(store, labels)
    assert judge(cmp).exit_code == 0 and not cmp.duplicates and cmp.runs == [a, b]
    assert any(v.axis == "run" and v.status == "equal" for v in cmp.verdicts)
    flip_one_ulp(two, "night", is_alone_target)
    flipped = compare_runs(*run_dirs("runs", [a, b]))
    assert judge(flipped).exit_code == 1 and not flipped.duplicates
    assert any(m.axis == "run" and m.b.startswith(f"{b}:") for m in flipped.mismatches)


def test_a_run_set_and_a_store_are_one_reader_and_only_a_store_has_a_runs_root(tmp_path):
    """Both read through RunReader; what takes more than reading (a baseline's documents) needs one runs root."""
    one, two = RunStore(str(tmp_path / "one")), RunStore(str(tmp_path / "two"))
    run_inline(one, small(**TINY), "a")
    run_inline(two, small(**TINY), "b")
    runs, labels = run_dirs("runs", [str(tmp_path / "one" / "a"), str(tmp_path / "two" / "b")])
    assert isinstance(runs, RunSet) and isinstance(one, RunReader) and labels == ["a", "b"]
    assert runs.manifest("b")["run_id"] == "b" and runs.read_rows(["a"]).num_rows == one.read_rows(["a"]).num_rows
    assert one.runs_root("--baseline") is one
    with pytest.raises(DetrunError, match=r"runs from several places \(.*\) can only be compared, not used for "
                                          r"--baseline; pass run ids under one --runs-root"):
        comparison(runs, ["a"], Checks(baseline=True))


def test_the_same_run_twice_is_refused(store, tmp_path):
    run_inline(store, small(**TINY), "a")
    out = _compare("a", "a", "--runs-root", store.root)
    assert out.exit_code == 2 and "the same run is given twice" in out.output
    assert _compare("a", str(tmp_path / "runs" / "a"), "--runs-root", store.root).exit_code == 2


def test_a_renamed_run_directory_is_its_own_run(store, tmp_path):
    run_inline(store, small(**TINY), "a")
    shutil.copytree(tmp_path / "runs" / "a", tmp_path / "runs" / "a-copy")
    cmp = compare_runs(store, ["a", "a-copy"])
    assert judge(cmp).exit_code == 0 and not cmp.duplicates and not cmp.missing
    assert sum(v.groups for v in cmp.verdicts if v.axis == "run") > 0
    flip_one_ulp(store, "a-copy", is_alone_target)
    bad = compare_runs(store, ["a", "a-copy"])
    assert judge(bad).exit_code == 1 and any(m.b.startswith("a-copy:") for m in bad.mismatches if m.axis == "run")
