"""Ray Jobs API: submit `detrun submit ...` to a cluster's dashboard (http://head:8265), read status and logs.

Token auth comes from the environment as Ray reads it (RAY_AUTH_MODE=token, RAY_AUTH_TOKEN); the token is
never copied into the job's runtime_env. Addresses that are not http(s) are Ray addresses for the driver.
"""

from __future__ import annotations

import contextlib
import shlex
from typing import Iterator, List, Optional

from ray.exceptions import AuthenticationError
from ray.job_submission import JobSubmissionClient

from ..errors import AUTH_HINT, DetrunError, first_line

# The detrun driver inside the job records these in the run's manifest.
SUBMISSION_ENV = "DETRUN_SUBMISSION_ID"
ADDRESS_ENV = "DETRUN_JOB_ADDRESS"
EXCLUDES = [".git", "**/__pycache__", "runs", "*.parquet"]


def is_jobs_address(address: Optional[str]) -> bool:
    return address is not None and address.startswith(("http://", "https://"))


@contextlib.contextmanager
def _errors(address: str) -> Iterator[None]:
    """Ray's auth and connection errors as one DetrunError line."""
    try:
        yield
    except AuthenticationError as exc:  # Ray's message: "... Missing ..." or "... Invalid authentication token"
        refused = "invalid" in str(getattr(exc, "message", "")).lower()
        what = "refused the token (invalid or incorrect)" if refused else "requires authentication"
        raise DetrunError(f"the Ray Jobs API at {address} {what}: {AUTH_HINT}") from None
    except (ConnectionError, RuntimeError, ValueError) as exc:
        first = first_line(exc, typed=False)
        if "auth" in first.lower() or "401" in first:
            raise DetrunError(f"the Ray Jobs API at {address} refused the token: {AUTH_HINT}") from None
        raise DetrunError(f"Ray Jobs API at {address}: {first}") from None


def _client(address: str) -> JobSubmissionClient:
    with _errors(address):
        return JobSubmissionClient(address)


def submit_job(address: str, args: List[str], submission_id: str, working_dir: Optional[str]) -> str:
    """Submit `python -m detrun.cli ARGS` as a job; upload working_dir, or rely on the installed package."""
    runtime_env: dict = {"env_vars": {SUBMISSION_ENV: submission_id, ADDRESS_ENV: address}}
    if working_dir:
        runtime_env.update(working_dir=working_dir, excludes=EXCLUDES)
    entrypoint = shlex.join(["python", "-m", "detrun.cli", *args])
    client = _client(address)
    with _errors(address):
        return client.submit_job(entrypoint=entrypoint, submission_id=submission_id, runtime_env=runtime_env,
                                 metadata={"tool": "detrun"})


def job_status(address: str, submission_id: str) -> str:
    client = _client(address)
    with _errors(address):
        info = client.get_job_info(submission_id)
    status = getattr(info.status, "value", info.status)
    return f"{status}: {info.message}" if info.message else str(status)


def job_logs(address: str, submission_id: str) -> str:
    client = _client(address)
    with _errors(address):
        return client.get_job_logs(submission_id)
