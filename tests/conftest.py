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
    from detrun.store.runs import RunStore

    return RunStore(str(tmp_path / "runs"))


@pytest.fixture(scope="session")
def s3():
    """A local S3 server (tests/s3server.py) with fake credentials in the environment, for the session."""
    from tests.s3server import FAKE_ENV, UNSET_ENV, LocalS3

    with pytest.MonkeyPatch.context() as env:
        for name in UNSET_ENV:
            env.delenv(name, raising=False)
        for name, value in FAKE_ENV.items():
            env.setenv(name, value)
        server = LocalS3()
        yield server
        server.stop()


@pytest.fixture
def s3_root(s3):
    """An s3:// runs root in a new bucket of the local S3."""
    return s3.uri(s3.bucket())


@pytest.fixture(params=["local", "s3"])
def any_root(request, tmp_path):
    """A runs root on the local disk, then one on the local S3: the same test against each."""
    return str(tmp_path / "runs") if request.param == "local" else request.getfixturevalue("s3_root")
