"""Every fixture more than one test file uses, defined once: a local Ray with 2 declared GPUs (one per test
module; ~5 s a start), an empty runs root (`store`), a local S3 and runs roots on it, and `no_ray` (a command
must stop before connecting to Ray). Plain helpers (specs, inline runs, row rewrites) are in helpers.py."""

import os

import pytest

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "1")


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


@pytest.fixture
def no_ray(monkeypatch):
    """Fails the test (an AssertionError: exit 3, not 2) if a command gets as far as connecting to Ray."""

    def must_not_run(*args, **kwargs):
        raise AssertionError("reached Ray: the checks should have stopped the command before")

    monkeypatch.setattr("detrun.run.runner.connect", must_not_run)


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
