"""A run without Ray: every shard of a spec in this process, its env flags set as a task's runtime_env
sets them (detrun shrink --inline; the tests)."""

from __future__ import annotations

import contextlib
import os
from typing import Iterator, List, Mapping

from ..errors import DetrunError
from ..record.status import RunStatus
from ..spec.matrix import shards
from ..spec.model import JobSpec
from ..store.runs import RunStore
from .isolation import deferred_cell


@contextlib.contextmanager
def task_env(env: Mapping[str, object]) -> Iterator[None]:
    """os.environ with env set (a validated spec's values are strings), as a Ray task's runtime_env has it;
    restored afterwards."""
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update({name: str(value) for name, value in env.items()})
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def run_inline(store: RunStore, spec: JobSpec, run_id: str, gpus: int = 1) -> List[str]:
    """Store a complete run of spec on `gpus` slots; returns the cells that would need isolated workers
    (known bugs, lost contexts: only Ray runs them), which are left without rows."""
    from .worker import run_shard  # torch

    data = spec.model_dump(mode="json")
    store.create_run(run_id, data, gpus)
    left = []
    for shard in shards(spec, gpus):
        with task_env(spec.env):
            out = run_shard(data, shard, run_id)
        if out.get("environment_error"):  # another SGLang than the job names: no rows of it
            store.finish_run(run_id, RunStatus.INCOMPLETE, failures=[out["environment_error"]])
            raise DetrunError(out["environment_error"])
        left += [f"{deferred_cell(d).label}: {d['reason']}" for d in out["deferred"]]
        store.write_blobs(out["blobs"])
        store.write_rows(run_id, shard.shard_id, out["rows"])
    store.finish_run(run_id, RunStatus.COMPLETE)
    return left
