"""Every fixture more than one test file uses, defined once: a local Ray with 2 declared GPUs (one for the
session, shared by the tests that ask for it), an empty runs root (`store`), a local S3 and runs roots on it,
and `no_ray` (a command must stop before connecting to Ray). Plain helpers (specs, inline runs, row
rewrites) are in helpers.py."""

import os

import pytest

pytest_plugins = ["tests.quick_exit"]  # no interpreter teardown once pytest is done (quick_exit.py)

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "1")
# A runtime_env Ray cannot build fails at the first attempt (Ray's default tries 3 times, ~15 s each on 2 cores;
# the local Ray's agent reads it when the tests start it: test_versions_ray.py)
os.environ.setdefault("RUNTIME_ENV_RETRY_TIMES", "1")


@pytest.fixture(scope="session")
def _shared_ray_session():
    """Shuts down the shared local Ray (helpers.local_ray) at the end of the session."""
    yield
    from tests.helpers import end_local_ray

    end_local_ray()


@pytest.fixture
def ray_2gpu(_shared_ray_session):
    """The shared local Ray with 2 CPUs and 2 declared GPUs (helpers.local_ray): started once for the
    session, again only after a test shut it down or joined another Ray (test_cluster_faults)."""
    from tests.helpers import local_ray

    return local_ray()


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
