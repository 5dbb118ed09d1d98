"""Multi-node runs on one ray.cluster_utils.Cluster: GPU discovery, worker crash, Ctrl-C, node loss, resume.

One cluster for the module (a head with one fake A100, two worker nodes with one fake H100 each);
the node-removal test is last because it takes a node away. Slow tier.
"""

from __future__ import annotations

import time
from collections import Counter

import pytest

from detrun.errors import DetrunError
from detrun.judge.compare import compare_runs
from detrun.judge.findings import judge
from detrun.run import runner
from detrun.spec.matrix import expected_keys
from detrun.spec.model import spec_from_dict
from detrun.store.runs import RunStore
from tests.helpers import small

pytestmark = pytest.mark.slow  # a 3-node Ray cluster for the module: ~2 min, the node-loss test most of it
FAST_HEALTH_CHECK = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 500,
                     "health_check_failure_threshold": 2}


@pytest.fixture(scope="module")
def cluster():
    """Metrics collection off: once a node dies, the head's dashboard agent otherwise spins at a full core
    (Ray 2.60, measured) for the rest of the module, on a machine of two."""
    import ray
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    with pytest.MonkeyPatch.context() as env:  # read by the nodes' processes as they start
        env.setenv("RAY_enable_metrics_collection", "0")
        c = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 1, "num_gpus": 1, "resources": {"accelerator_type:A100": 1}, "include_dashboard": False,
            "_system_config": FAST_HEALTH_CHECK})
        h100 = [c.add_node(num_cpus=1, num_gpus=1, resources={"accelerator_type:H100": 1}) for _ in range(2)]
        c.wait_for_nodes()
    ray.init(address=c.address, log_to_driver=False)
    yield c, h100
    ray.shutdown()
    c.shutdown()


def _spec(per_task=1, **env):
    """2 repeats: 2 shards per GPU (per_task=1) or 1 (per_task=2)."""
    env = {"SGLANG_FLASHINFER_USE_PAGED": "1", **env}
    return spec_from_dict(small(repeats=2, repeats_per_task=per_task, env=env))


def _rows(store: RunStore, run_id: str):
    return store.read_rows([run_id]).to_pylist()


def _assert_complete_and_unique(store: RunStore, run_id: str, spec, gpus: int):
    rows = _rows(store, run_id)
    counts = Counter(r["key"] for r in rows)
    assert max(counts.values()) == 1, "a row was written twice"
    assert sorted(counts) == sorted(expected_keys(spec, gpus))
    cmp = compare_runs(store, [run_id])
    assert not cmp.missing and not cmp.duplicates and judge(cmp).exit_code == 0


def test_discovery_counts_alive_gpus_by_accelerator_type(cluster):
    assert runner.connect() == 3
    assert runner.connect(accelerator_type="H100") == 2
    assert runner.connect(gpus=1, accelerator_type="A100") == 1
    with pytest.raises(DetrunError, match="no alive GPU of accelerator type B200"):
        runner.connect(accelerator_type="B200")
    with pytest.raises(DetrunError, match="--gpus 2 asked, but the Ray cluster has 1 alive GPU"):
        runner.connect(gpus=2, accelerator_type="A100")


def test_accelerator_type_runs_one_shard_per_h100_and_records_nodes(cluster, store):
    _, h100 = cluster
    spec = _spec(per_task=2)
    options = runner.RunOptions(accelerator_type="H100")
    result = runner.submit(spec, store, 2, run_id="h100", options=options)
    assert result.failures == [] and store.manifest("h100")["status"] == "complete"
    assert store.manifest("h100")["accelerator_type"] == "H100"
    rows = _rows(store, "h100")
    nodes_by_slot = {slot: {r["node_id"] for r in rows if r["slot"] == slot} for slot in (0, 1)}
    assert all(len(nodes) == 1 for nodes in nodes_by_slot.values())  # a slot is one GPU
    assert set().union(*nodes_by_slot.values()) == {n.node_id for n in h100}  # one bundle per H100
    assert all(r["gpu_name"] for r in rows)
    _assert_complete_and_unique(store, "h100", spec, 2)


def test_worker_crash_is_retried_without_duplicates(cluster, store, tmp_path):
    marker = tmp_path / "crashed"
    spec = _spec(2, DETRUN_TEST_CRASH_ONCE=str(marker))
    result = runner.submit(spec, store, 3, run_id="crash")
    assert marker.exists(), "the crash hook did not fire"
    assert result.failures == [] and result.shards_run == 3
    assert store.manifest("crash")["status"] == "complete"
    _assert_complete_and_unique(store, "crash", spec, 3)


def test_ctrl_c_leaves_an_incomplete_run_that_resume_completes(cluster, store):
    import ray
    from ray.util import placement_group_table

    spec = _spec(2, DETRUN_TEST_SLEEP_S="1")  # 3 shards, one per GPU: the first to finish interrupts the run

    def interrupt(done, total):
        if done:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        runner.submit(spec, store, 3, run_id="intr", on_progress=interrupt)
    manifest = store.manifest("intr")
    assert manifest["status"] == "incomplete" and manifest["failures"][-1].startswith("interrupted (Ctrl-C) with")
    assert all(pg["state"] == "REMOVED" for pg in placement_group_table().values())
    _, missing = runner.missing_shards(store, "intr")
    assert 0 < len(missing) < 3
    stored = {r["shard"] for r in _rows(store, "intr")}
    assert stored.isdisjoint({s.shard_id for s in missing})

    result = runner.resume(store, "intr", int(ray.cluster_resources()["GPU"]))
    assert result.shards_run == len(missing) and result.failures == []
    assert store.manifest("intr")["status"] == "complete" and len(store.manifest("intr")["resumed"]) == 1
    _assert_complete_and_unique(store, "intr", spec, 3)


def test_task_timeout_cancels_and_records_the_shard(cluster, store):
    spec = _spec(2, DETRUN_TEST_SLEEP_S="300")
    started = time.monotonic()
    result = runner.submit(spec, store, 1, run_id="slow", options=runner.RunOptions(task_timeout=2))
    assert time.monotonic() - started < 300  # the task was cancelled: it would have slept 300 s
    assert result.failures == ["shard g0-r0-1: timed out after 2 s (cancelled)"]
    assert store.manifest("slow")["status"] == "incomplete" and store.row_files("slow") == []


def _alive(pid: int) -> bool:
    """Whether the process runs (a zombie, dead and not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_node_removed_mid_run_gives_up_its_shards_and_resume_finishes(cluster, store, monkeypatch, tmp_path):
    """An H100 node dies while its bundle's first shard runs (every bundle's first task has started and
    waits until the node is gone, so nothing has finished): Ray cannot re-place the bundle (every GPU is in
    the placement group), so after the grace the runner fails that shard and the one queued behind it; the
    other 4 shards are stored once; resume finishes. (Until the run ends, Ray's GCS spins on the bundle it
    cannot place: the survivors' first tasks have their imports behind them by then.)"""
    c, h100 = cluster
    release = tmp_path / "release"
    spec = _spec(DETRUN_TEST_WAIT_FOR=str(release))
    removed_at = []

    def remove_a_busy_node(done, total):
        if not removed_at:  # the first turn of the wait loop: every bundle's first shard is pending
            deadline = time.monotonic() + 300
            while len(list(tmp_path.glob("release.waiting-*"))) < 3:  # each one started, waiting
                assert time.monotonic() < deadline, "the first 3 tasks did not start within 300 s"
                time.sleep(0.2)
            pids = [int(f.name.rpartition("-")[2]) for f in tmp_path.glob("release.waiting-*")]
            c.remove_node(h100[0], allow_graceful=False)
            removed_at.append(done)
            # the dead node's worker must be gone before the release: alive for a moment, it would finish its
            # shard and hand the result straight to the driver (no raylet needed), which then lost nothing
            while all(_alive(pid) for pid in pids):
                assert time.monotonic() < deadline, "no waiting task's process died with its node"
                time.sleep(0.1)
            release.touch()  # the tasks left may finish now

    monkeypatch.setenv("DETRUN_NODE_LOSS_GRACE_S", "3")
    result = runner.submit(spec, store, 3, run_id="lost", options=runner.RunOptions(on_progress=remove_a_busy_node))
    assert removed_at == [0], "a shard finished before the node was removed"
    _, missing = runner.missing_shards(store, "lost")
    assert len(missing) == 2 and missing[0].slot == missing[1].slot
    running, queued = sorted(s.shard_id for s in missing)  # g<slot>-r0-0 ran, g<slot>-r1-1 waited behind it
    assert sorted(result.failures) == [f"shard {running}: its node died and no GPU was left to retry on",
                                       f"shard {queued}: not run: its node died on {running}"]
    manifest = store.manifest("lost")
    assert manifest["status"] == "incomplete" and sorted(manifest["failures"]) == sorted(result.failures)
    stored = _rows(store, "lost")
    assert len({r["shard"] for r in stored}) == 4 and max(Counter(r["key"] for r in stored).values()) == 1
    assert h100[0].node_id not in {r["node_id"] for r in stored}

    deadline = time.monotonic() + 30
    while runner.alive_gpus() != 2 and time.monotonic() < deadline:
        time.sleep(0.5)  # the GCS marks the node dead after its health checks fail
    assert runner.alive_gpus() == 2
    assert runner.resume(store, "lost", runner.connect()).shards_run == 2
    assert store.manifest("lost")["status"] == "complete"
    _assert_complete_and_unique(store, "lost", spec, 3)
