"""Blobs by content: one file per digest under the root for every run, each run's rows naming the digests
it uses, legacy per-run blobs still read, runs from two roots each read where they are, and concurrent
writers of one digest."""

import os
import shutil
import sys
import threading

import pyarrow.fs as pafs
import pytest

from detrun.judge.compare import compare_runs
from detrun.store.runs import RunStore
from detrun.store.runset import run_dirs
from tests.helpers import TINY, flip_one_ulp, is_alone_target, run_inline, small


def _stored(store: RunStore, rel: str = "blobs") -> dict:
    """name -> size of every file under rel (recursive)."""
    selector = pafs.FileSelector(f"{store.base}/{rel}", recursive=True, allow_not_found=True)
    return {i.path[len(store.base) + 1:]: i.size for i in store.fs.get_file_info(selector)
            if i.type == pafs.FileType.File}


def _paths(digests):
    return {f"blobs/{d[:2]}/{d}.bin" for d in digests}


def _ulp_across_runs(cmp):
    return [m.out.max_ulp if m.out else None for m in cmp.mismatches if m.axis == "run"]


def test_identical_tensors_are_stored_once(any_root):
    store = RunStore(any_root)
    run_inline(store, small(**TINY), "r1")
    first = _stored(store)
    assert set(first) == _paths(store.blob_refs("r1"))  # every digest the run names, once
    run_inline(store, small(**TINY), "r2")
    assert store.blob_refs("r2") == store.blob_refs("r1") and _stored(store) == first  # nothing added
    assert not _stored(store, "r1/blobs") and not _stored(store, "r2/blobs")  # no per-run copies
    run_inline(store, small(repeats=1, modes=["eager"], seed=8), "other")  # other inputs, other tensors
    added = set(_stored(store)) - set(first)
    assert added and added == _paths(store.blob_refs("other") - store.blob_refs("r1"))


def test_each_run_names_its_digests_and_compare_reads_blobs_of_both(store):
    run_inline(store, small(**TINY), "r1")
    run_inline(store, small(**TINY), "r2")
    flipped = flip_one_ulp(store, "r2", is_alone_target)["out_digest"]
    assert flipped in store.blob_refs("r2") and flipped not in store.blob_refs("r1")
    assert f"blobs/{flipped[:2]}/{flipped}.bin" in _stored(store)
    assert _ulp_across_runs(compare_runs(store, ["r1", "r2"])) == [1]  # both tensors read back


def test_a_legacy_run_with_its_own_blobs_still_diffs(store, tmp_path):
    run_inline(store, small(**TINY), "old")
    flip_one_ulp(store, "old", is_alone_target)
    legacy = tmp_path / "runs" / "old" / "blobs"  # the layout before blobs were shared
    legacy.mkdir()
    for rel in _stored(store):
        shutil.move(os.path.join(store.base, rel), legacy / os.path.basename(rel))
    shutil.rmtree(os.path.join(store.base, "blobs"))
    batch = [m for m in compare_runs(store, ["old"]).mismatches if m.axis == "batch"]
    assert batch and all(m.out and m.out.max_ulp == 1 for m in batch)
    run_inline(store, small(**TINY), "new")  # a new run beside it: stored shared, compared with it
    assert _ulp_across_runs(compare_runs(store, ["old", "new"])) == [1]


def test_runs_from_two_roots_read_blobs_from_their_own_root(tmp_path):
    one, two = RunStore(str(tmp_path / "one")), RunStore(str(tmp_path / "two"))
    run_inline(one, small(**TINY), "a")
    run_inline(two, small(**TINY), "b")
    original = next(r for r in one.read_rows(["a"]).to_pylist() if is_alone_target(r))["out_digest"]
    flipped = flip_one_ulp(one, "a", is_alone_target)["out_digest"]
    os.remove(os.path.join(one.base, "blobs", original[:2], f"{original}.bin"))  # only b's root has it now
    cmp = compare_runs(*run_dirs("runs", [str(tmp_path / "one" / "a"), str(tmp_path / "two" / "b")]))
    assert _ulp_across_runs(cmp) == [1]
    assert two.read_blob(["b"], flipped) is None and one.read_blob(["a"], original) is None


@pytest.fixture
def busy_switching():
    """Threads switch every 10 us: a write that can be seen half done would be."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(before)


def test_concurrent_writers_of_one_digest_leave_one_whole_file(any_root, busy_switching):
    store = RunStore(any_root)
    digest, data = "ab" * 16, os.urandom(1 << (22 if store.object_store else 25))
    start, stop, torn = threading.Barrier(7), threading.Event(), []

    def write():
        start.wait()
        store.write_blobs({digest: data})

    def read():  # whatever a reader sees meanwhile is nothing or the whole blob
        start.wait()
        while not stop.is_set():
            got = store.read_blob([], digest)
            if got is not None and got != data:
                torn.append(len(got))

    writers = [threading.Thread(target=write) for _ in range(6)]
    reader = threading.Thread(target=read)
    for t in writers + [reader]:
        t.start()
    for t in writers:
        t.join(timeout=60)
    stop.set()
    reader.join(timeout=60)
    assert not torn
    assert _stored(store) == {f"blobs/ab/{digest}.bin": len(data)} and store.read_blob([], digest) == data
    assert store.write_blobs({digest: data}) == 0  # there already: not written again
