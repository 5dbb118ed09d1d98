"""A job's versions: environments built by Ray before any of its runs: one small task per environment, in that
environment's runtime_env, all at once (Ray installs each, and caches it for the runs' tasks on that node). A
version that cannot be installed is one error naming it (exit 2) before a run is created; so is one whose
install imports another version."""

from __future__ import annotations

import time
from typing import Dict, Sequence

import ray

from ..errors import DetrunError
from ..spec.versions import VersionEnv


@ray.remote(num_cpus=0, max_retries=0)
def installed(dist: str) -> str:
    """The version of dist a task in this runtime_env imports ("" when none)."""
    from ..spec.versions import installed_version

    return installed_version(dist)


def prepare(envs: Sequence[VersionEnv]) -> Dict[str, float]:
    """Build every environment (concurrently) and check what each installs; the seconds until each was ready."""
    from .runner import install_failure

    start = time.perf_counter()
    refs = {installed.options(runtime_env=env.runtime_env()).remote(env.distribution): env for env in envs}
    ready: Dict[str, float] = {}
    for ref in _as_ready(list(refs)):
        env = refs[ref]
        try:
            have = ray.get(ref)
        except ray.exceptions.RuntimeEnvSetupError as exc:
            raise DetrunError(f"versions: {env.name} cannot be installed: {install_failure(exc)}") from None
        if have != env.version:
            raise DetrunError(f"versions: {env.name} installed, but its environment imports {env.found(have)}")
        ready[env.name] = round(time.perf_counter() - start, 2)
    return {env.name: ready[env.name] for env in envs}


def _as_ready(refs: list):
    """The refs, each as soon as its task ends."""
    while refs:
        done, refs = ray.wait(refs, num_returns=1)
        yield done[0]
