"""Shared fixtures: one local Ray per test module, with 2 declared GPUs (budget ~5 s a start)."""

import os

import pytest

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "1")

JOBS = os.path.join(os.path.dirname(__file__), "..", "jobs")


@pytest.fixture(scope="module")
def ray_2gpu():
    import ray

    if ray.is_initialized():
        ray.shutdown()
    ray.init("local", num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture
def store(tmp_path):
    """An empty runs root under the test's tmp_path."""
    from detrun.store import RunStore

    return RunStore(str(tmp_path / "runs"))
