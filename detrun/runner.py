"""Ray: connect or start, one placement-group bundle per GPU, one task per shard, collect and store rows."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Callable, List, Optional

import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from .errors import DetrunError
from .matrix import Shard, shards
from .spec import JobSpec
from .store import RunStore, new_run_id

PG_TIMEOUT_S = float(os.environ.get("DETRUN_PG_TIMEOUT_S", "60"))


@ray.remote(num_gpus=1, max_retries=1, retry_exceptions=False)
def shard_task(spec_data: dict, shard: Shard, run_id: str) -> dict:
    """One shard on one GPU (num_gpus in the decorator: a fresh worker process per task)."""
    from .worker import run_shard

    return run_shard(spec_data, shard, run_id, {"node_id": ray.get_runtime_context().get_node_id()})


def local_gpu_count() -> int:
    if not shutil.which("nvidia-smi"):
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


def connect(address: Optional[str] = None, gpus: Optional[int] = None) -> int:
    """Use a running Ray (tests, jobs) or start a local one; return the GPU slots to use."""
    if not ray.is_initialized():
        kwargs = dict(include_dashboard=False, log_to_driver=False, configure_logging=False)
        if address:
            ray.init(address=address, **kwargs)
        else:
            declared = gpus if gpus is not None else max(1, local_gpu_count())
            ray.init("local", num_gpus=declared, **kwargs)
    available = int(ray.cluster_resources().get("GPU", 0))
    if available < 1:
        raise DetrunError("the Ray cluster has no GPU slots (start it with --num-gpus, or pass --gpus N)")
    if gpus is not None and gpus > available:
        raise DetrunError(f"--gpus {gpus} asked, but the Ray cluster has {available} GPU slot(s)")
    return gpus or available


def failure_line(exc: BaseException) -> str:
    """The line of a Ray error that names the cause (the last one of its traceback)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return lines[-1][:300] if lines else type(exc).__name__


@dataclass
class SubmitResult:
    run_id: str
    gpus: int
    notes: List[str] = field(default_factory=list)
    failures: List[str] = field(default_factory=list)


def submit(
    spec: JobSpec,
    store: RunStore,
    gpus: int,
    spec_path: str = "",
    run_id: Optional[str] = None,
    on_progress: Optional[Callable[[int, int], None]] = None,
) -> SubmitResult:
    """Run every shard of spec on `gpus` slots of the connected Ray; rows land in the store."""
    run_id = run_id or new_run_id(spec.name)
    spec_data = spec.model_dump(mode="json")
    store.create_run(run_id, spec_data, gpus, spec_path)
    result = SubmitResult(run_id, gpus)
    cpus = min(1.0, float(ray.cluster_resources().get("CPU", 1)) / gpus)
    pg = placement_group([{"GPU": 1, "CPU": cpus}] * gpus, strategy="PACK")
    status = "incomplete"
    try:
        ready, _ = ray.wait([pg.ready()], timeout=PG_TIMEOUT_S)
        if not ready:
            raise DetrunError(f"could not reserve {gpus} GPU slot(s) within {PG_TIMEOUT_S:.0f} s")
        env = {"env_vars": dict(spec.env)}
        pending = {}
        for shard in shards(spec, gpus):
            strategy = PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=shard.slot)
            ref = shard_task.options(scheduling_strategy=strategy, runtime_env=env, num_cpus=cpus)
            pending[ref.remote(spec_data, shard, run_id)] = shard
        total = len(pending)
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
            for ref in done:
                shard = pending.pop(ref)
                try:
                    out = ray.get(ref)
                except ray.exceptions.RayError as exc:
                    result.failures.append(f"shard {shard.shard_id}: {failure_line(exc)}")
                    continue
                store.write_blobs(run_id, out["blobs"])
                store.write_rows(run_id, shard.shard_id, out["rows"])
                if out["note"] and out["note"] not in result.notes:
                    result.notes.append(out["note"])
                    print(out["note"], file=sys.stderr)
            if on_progress:
                on_progress(total - len(pending), total)
        status = "complete" if not result.failures else "incomplete"
    finally:
        remove_placement_group(pg)
        store.finish_run(run_id, status, failures=result.failures)
    return result
