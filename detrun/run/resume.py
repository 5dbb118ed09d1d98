"""What `detrun submit --resume RUN` runs: the shards RUN lacks, found before Ray starts (no torch, no ray)."""

from __future__ import annotations

from typing import List, Tuple

from ..errors import DetrunError
from ..record.status import RunStatus
from ..spec.matrix import Shard, shard_keys, shards
from ..spec.model import JobSpec, spec_from_dict
from ..store.runs import RunStore


def missing_shards(store: RunStore, run_id: str) -> Tuple[JobSpec, List[Shard]]:
    """The shards of a run whose part file is missing, unreadable or short of rows."""
    manifest = store.manifest(run_id)
    spec = spec_from_dict(manifest["spec"], f"{run_id}/manifest.json")
    todo = []
    for shard in shards(spec, int(manifest["gpus"])):
        stored = store.shard_keys(run_id, shard.shard_id)
        if stored is None or not set(shard_keys(spec, shard)) <= stored:
            todo.append(shard)
    return spec, todo


def resume_plan(store: RunStore, run_id: str) -> Tuple[JobSpec, List[Shard]]:
    """missing_shards; a DetrunError when there is nothing to resume (a complete run). A run with every
    shard stored but not marked complete (its driver died after the last write) has nothing to run."""
    spec, todo = missing_shards(store, run_id)
    if not todo and store.manifest(run_id).get("status") == RunStatus.COMPLETE:
        raise DetrunError(f"--resume {run_id}: run {run_id} is complete, nothing to resume; compare it with: "
                          f"detrun compare {run_id} --runs-root {store.root}")
    return spec, todo
