"""Run ids: plain ones pass; unsafe ones (paths, dots, blanks) and the root's own folders are refused by the
store and by the CLI (exit 2, one line); creating a run is atomic (one of many concurrent creators wins)."""

from __future__ import annotations

import threading

import pytest

from detrun.errors import DetrunError
from detrun.store.manifests import check_run_id
from detrun.store.runs import RunStore
from tests.helpers import cli_error, job_file


@pytest.mark.parametrize("good", ["nightly-2026-01-02", "a.b_c", "_x", "R1"])
def test_plain_run_ids_pass(good):
    assert check_run_id(good) == good


@pytest.mark.parametrize("bad", [".", "..", ".hidden", "-x", "a/b", "../../x", "/abs/x", "a\\b", "", "x\n", "a b"])
def test_unsafe_run_ids_are_refused(bad, tmp_path):
    with pytest.raises(DetrunError, match="--run-id .*must match"):
        check_run_id(bad, "--run-id")
    with pytest.raises(DetrunError, match="run id"):
        RunStore(str(tmp_path / "runs")).create_run(bad, {}, 1)
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("option, value", [("--run-id", "../../x"), ("--run-id", "ABS"), ("--resume", "../x")])
def test_cli_refuses_unsafe_run_ids(capsys, tmp_path, no_ray, option, value):
    value = str(tmp_path / "abs" / "x") if value == "ABS" else value
    root = tmp_path / "a" / "b" / "runs"
    args = ["--resume", value] if option == "--resume" else [job_file(tmp_path), "--run-id", value]
    code, line = cli_error(capsys, "submit", *args, "--runs-root", str(root))
    assert code == 2 and line.startswith(f"detrun: error: {option} {value!r}: ")
    assert sorted(p.name for p in tmp_path.iterdir()) == (["job.yaml"] if option == "--run-id" else [])


def test_creating_a_run_is_atomic(store):
    threads_n = 8
    for attempt in range(30):
        barrier, won, lost = threading.Barrier(threads_n), [], []

        def create(barrier=barrier, attempt=attempt, won=won, lost=lost):
            barrier.wait()
            try:
                store.create_run(f"r{attempt}", {}, 1)
                won.append(1)
            except DetrunError as exc:
                assert "already exists" in str(exc)
                lost.append(1)

        threads = [threading.Thread(target=create) for _ in range(threads_n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert (len(won), len(lost)) == (1, threads_n - 1), f"attempt {attempt}"


def test_the_root_folders_are_no_run_ids():
    for name in ("blobs", "baselines"):
        with pytest.raises(DetrunError, match=f"keeps its own {name}/ folder"):
            check_run_id(name, "--run-id")
    assert check_run_id("blobs-2") == "blobs-2"
