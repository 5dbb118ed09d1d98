"""A shard's write is whole or absent, on a local root and on S3; Ctrl-C and SIGTERM wait for an upload."""

import os
import signal

import pyarrow.fs as pafs
import pytest

from detrun.errors import DetrunError, Terminated
from detrun.signals import held
from detrun.store.runs import RunStore
from tests.helpers import run_inline, small


def _files(store: RunStore, rel: str):
    found = store.fs.get_file_info(pafs.FileSelector(f"{store.base}/{rel}", recursive=True, allow_not_found=True))
    return sorted(i.path.rsplit("/", 1)[1] for i in found if i.type == pafs.FileType.File)


def test_a_writer_dying_midway_leaves_no_part(any_root, monkeypatch):
    store = RunStore(any_root)
    run_inline(store, small(repeats=1, modes=["eager"]), "r1")
    before, rows = store.row_files("r1"), store.read_rows(["r1"]).to_pylist()
    assert _files(store, "r1/rows") == ["part-g0-r0-0.parquet"]

    def dies_after_one_chunk(table, where, **kwargs):
        where.write(b"PAR1" + b"\0" * 4096)  # a first chunk of Parquet, then the writer dies
        raise RuntimeError("killed midway")

    monkeypatch.setattr("detrun.store.rows.pq.write_table", dies_after_one_chunk)
    for shard in ("g0-r0-0", "g1-r0-0"):  # replacing a part, and a new one
        with pytest.raises(RuntimeError, match="killed midway"):
            store.write_rows("r1", shard, rows)
    assert store.row_files("r1") == before and _files(store, "r1/rows") == ["part-g0-r0-0.parquet"]
    assert store.read_rows(["r1"]).to_pylist() == rows  # the old part is intact
    monkeypatch.undo()
    store.write_rows("r1", "g1-r0-0", rows)  # the same write, the writer alive
    assert _files(store, "r1/rows") == ["part-g0-r0-0.parquet", "part-g1-r0-0.parquet"]


def test_signals_wait_for_the_held_block():
    """Python's own SIGINT handler, installed for the test: a pytest started in the background of a
    non-interactive shell inherits SIGINT ignored, and held() rightly leaves an ignored signal ignored."""
    got = []
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    previous = signal.signal(signal.SIGTERM, lambda s, f: got.append(s))
    try:
        with pytest.raises(KeyboardInterrupt):
            with held():
                signal.raise_signal(signal.SIGINT)
                signal.raise_signal(signal.SIGTERM)
                got.append("block finished")
        assert got == ["block finished", signal.SIGTERM]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)  # outside the block: at once
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)


def test_sigterm_under_the_cli_still_ends_the_run_after_an_upload(monkeypatch):
    from detrun import exitpolicy

    monkeypatch.setattr(Terminated, "received", False)
    previous = signal.signal(signal.SIGTERM, exitpolicy._on_sigterm)
    try:
        with pytest.raises(Terminated):
            with held():
                os.kill(os.getpid(), signal.SIGTERM)
                assert not Terminated.received  # held: the CLI's handler has not run yet
        assert Terminated.received
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_failed_local_rename_leaves_no_tmp_file(store):
    run_inline(store, small(repeats=1, modes=["eager"]), "r1")
    with pytest.raises(DetrunError, match=r"^runs root .*runs: "):  # a folder is in the way of the rename
        store.write_json("r1/rows", {"x": 1})
    left = os.listdir(os.path.join(store.base, "r1"))
    assert "rows" in left and not [name for name in left if ".tmp-" in name]
