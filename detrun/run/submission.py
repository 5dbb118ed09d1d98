"""detrun submit in the library: a SubmitRequest checked (all before Ray starts), then run here through
the runner, or planned and sent as a Ray Jobs API submission (an http:// address); and what a submitted
run left behind (status, driver logs).

Planning a Jobs API submission (plan_job) is pure: the request the job runs (address auto, the spec path
as the uploaded working_dir holds it, the run id fixed, --expect normalised), the argv that rebuilds it
(job_argv: `detrun submit ...`, parsed again by the job's own CLI) and the submission id. Ray is imported
only to submit, run or query; this module itself imports neither torch nor ray.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Iterator, List, Mapping, Optional, Tuple, Union, cast

from ..errors import DetrunError
from ..judge.requests import ClaimOptions
from ..record.status import RunStatus as Stored
from ..store.manifests import check_run_id, new_run_id
from ..store.requests import RunRequest
from ..store.runs import RunStore

if TYPE_CHECKING:
    from ..spec.model import JobSpec
    from ..spec.versions import VersionEnv
from .requests import SubmitRequest

log = logging.getLogger(__name__)

# progress(label) -> a context (open while the run runs) yielding on_progress(done, total).
Progress = Callable[[str], ContextManager[Callable[[int, int], None]]]


@contextlib.contextmanager
def no_progress(label: str) -> Iterator[Callable[[int, int], None]]:
    yield lambda done, total: None


@dataclass(frozen=True)
class JobPlan:
    """A Jobs API submission: the job's request and argv, where it goes, under which submission id."""

    address: str  # the Jobs API (http://head:8265)
    request: SubmitRequest  # what the job's driver runs (it joins the cluster with --address auto)
    submission_id: str
    working_dir: Optional[str]  # uploaded as the job's working_dir (None: the installed detrun)

    @property
    def run_id(self) -> str:
        return cast(str, self.request.resume or self.request.run_id)  # plan_job sets one

    @property
    def argv(self) -> List[str]:
        return job_argv(self.request)


@dataclass(frozen=True)
class Submitted:
    """A Jobs API submission made and recorded in the runs root."""

    plan: JobPlan


@dataclass(frozen=True)
class Ran:
    """A run (or resume) driven from here; the comparison that ends it is req.compare_request(run_id)."""

    run_id: str
    resumed: bool
    slots: int
    shards_run: int
    failures: List[str]
    seconds: float
    where: str  # where the run is stored
    devices: Tuple[str, ...] = ()  # what the tasks ran on (rows' gpu_name: cpu:<machine> or the GPU's name)


@dataclass(frozen=True)
class Versioned:
    """A job with versions: driven from here: one run per environment, in the job's order; the comparison that
    ends it is req.compare_request(*(each run's id))."""

    runs: Tuple[Ran, ...]
    setup_s: Mapping[str, float]  # environment name -> seconds until Ray had built it (all built at once)


def parse_gpus(value: str) -> Optional[int]:
    """--gpus: None for all, else a positive number."""
    if value == "all":
        return None
    if not value.isdigit() or int(value) < 1:
        raise DetrunError(f"--gpus must be 'all' or a positive number, not {value!r}")
    return int(value)


def _float_arg(value: float) -> str:
    """A float as an argument: short (900, not 900.0) where that reads back the same."""
    short = f"{value:g}"
    return short if float(short) == value else repr(value)


def claim_flags(claims: ClaimOptions) -> List[str]:
    """The options that rebuild claims."""
    out = ["--baseline"] * claims.baseline + ["--require-baseline"] * claims.require_baseline
    out += ["--strict"] * claims.strict + [a for item in claims.expect for a in ("--expect", item)]
    return out + (["--details", str(claims.details)] if claims.details != ClaimOptions().details else [])


def job_argv(req: SubmitRequest) -> List[str]:
    """The `detrun submit` arguments that rebuild req (the job's request: see plan_job)."""
    args = (["submit", "--resume", req.resume] if req.resume
            else ["submit", cast(str, req.spec_path), "--run-id", cast(str, req.run_id)])  # plan_job's request
    args += ["--address", cast(str, req.address), "--runs-root", req.runs_root, "--gpus", req.gpus]
    if req.accelerator_type:
        args += ["--accelerator-type", req.accelerator_type]
    if req.task_timeout:
        args += ["--task-timeout", _float_arg(req.task_timeout)]
    args += [a for item in req.overrides for a in ("--set", item)]
    args += claim_flags(req.claims) + (["--junit", req.junit] if req.junit else [])
    return args + ([] if req.jit_cache else ["--no-jit-cache"]) + (["--verbose"] if req.verbose else [])


def plan_job(req: SubmitRequest, run_id: str, now: Optional[float] = None) -> JobPlan:
    """The Jobs API submission of req (its run id already chosen): the runs root must be one the cluster
    and this machine both see, the spec path is rewritten as the uploaded working_dir holds it."""
    if "://" not in req.runs_root and not Path(req.runs_root).is_absolute():
        raise DetrunError("with an http:// address the job writes the runs: pass --runs-root as a path or URI "
                          "both the cluster and this machine see (e.g. /shared/runs or s3://bucket/runs)")
    spec_path = req.spec_path
    if spec_path and req.working_dir and Path(spec_path).resolve().is_relative_to(Path(req.working_dir).resolve()):
        spec_path = str(Path(spec_path).resolve().relative_to(Path(req.working_dir).resolve()))  # as the job sees it
    expect = tuple(f"{k}={v}" for k, v in req.claims.checks().expect.items())
    job = replace(req, spec_path=spec_path, address="auto", working_dir=None,
                  run_id=None if req.resume else run_id, claims=replace(req.claims, expect=expect))
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    submission_id = f"detrun-{run_id}" + (f"-resume-{stamp}" if req.resume else "")
    return JobPlan(cast(str, req.address), job, submission_id, req.working_dir)  # an http:// address


def submit(req: SubmitRequest, progress: Progress = no_progress) -> Union[Submitted, Ran, Versioned]:
    """Check req, then submit it as a Ray job (http:// address) or run it here; see the module docstring."""
    from ..envflags import driver_settings
    from ..spec.matrix import check_size, workers_note
    from ..spec.model import load_spec
    from ..spec.versions import check_wheelhouse, environments
    from .jobs import is_jobs_address
    from .resume import resume_plan

    if req.spec_path is None and req.resume is None:
        raise DetrunError("no job spec given: pass one (e.g. detrun submit jobs/paged.yaml) or --resume RUN")
    if req.spec_path is not None and req.resume is not None:
        raise DetrunError(f"a job spec ({req.spec_path}) and --resume {req.resume} given: pass one of them")
    if req.working_dir is not None and not is_jobs_address(req.address):
        raise DetrunError("--working-dir is uploaded to a Ray job: it needs an http:// --address")
    for value, option in ((req.run_id, "--run-id"), (req.resume, "--resume")):
        if value is not None:
            check_run_id(value, option)
    slots = parse_gpus(req.gpus)
    spec = load_spec(req.spec_path, list(req.overrides)) if req.spec_path else None
    if spec and slots:  # with --gpus all, runner.submit checks once Ray says how many
        check_size(spec, slots, str(req.spec_path))
    note = workers_note(spec, driver_settings().workers_per_gpu) if spec else ""
    if note:  # not an error: the run is the same, only fewer tasks share a GPU than asked
        log.warning("detrun: %s", note)
    store = RunStore(req.runs_root)
    store.check_writable("--runs-root")  # all before Ray starts
    run_id = req.resume or req.run_id or new_run_id(cast("JobSpec", spec).name)  # no --resume: a spec
    todo = resume_plan(store, req.resume) if req.resume else None  # a run with nothing missing: exit 2
    envs = environments(spec) if spec else []
    for one in [f"{run_id}-{e.tag}" for e in envs] or [run_id] * (req.run_id is not None):
        store.check_new_run(check_run_id(one, "--run-id"), "--run-id")
    req.claims.checks()  # a bad --expect fails here too, before Ray starts
    if is_jobs_address(req.address):
        return send(plan_job(req, run_id), store)  # the job's driver splits the environments (and checks them)
    check_wheelhouse(envs)
    if envs:
        return _run_versions(req, store, cast("JobSpec", spec), envs, run_id, slots, progress)
    return _run_here(req, store, spec, run_id, slots, progress, todo)


def send(plan: JobPlan, store: RunStore) -> Submitted:
    """Submit the planned job and record its submission id in the runs root."""
    from . import jobs

    jobs.submit_job(plan.address, plan.argv, plan.submission_id, plan.working_dir)
    store.record_submission(plan.run_id, plan.address, plan.submission_id)
    return Submitted(plan)


def _run_versions(req: SubmitRequest, store: RunStore, spec: "JobSpec", envs: List["VersionEnv"], run_id: str,
                  gpus: Optional[int], progress: Progress) -> Versioned:
    """One run per versions: environment (run id <run_id>-<environment tag>), every environment built by Ray
    first (a version that cannot be installed: exit 2 before any run); the runs one after another, each on
    every GPU slot (a run's placement group holds them all)."""
    from ..spec.model import spec_from_dict
    from ..spec.versions import pin
    from . import runner
    from .environments import prepare

    runner.connect(req.address, gpus, req.accelerator_type, req.verbose)
    setup_s = prepare(envs)
    data = spec.model_dump(mode="json")
    runs = tuple(_run_here(req, store, spec_from_dict(pin(data, [e.name]), f"versions {e.name}"), f"{run_id}-{e.tag}",
                           gpus, progress, environment=dict(e.manifest(), setup_s=setup_s[e.name])) for e in envs)
    return Versioned(runs, setup_s)


def _run_here(req: SubmitRequest, store: RunStore, spec, run_id: str, gpus: Optional[int],
              progress: Progress, todo: Optional[Tuple["JobSpec", list]] = None,
              environment: Optional[dict] = None) -> Ran:
    from . import runner
    from .jitcache import cache_root
    from .jobs import ADDRESS_ENV, SUBMISSION_ENV

    started = time.perf_counter()
    extra: dict = {k: os.environ[v] for k, v in (("submission_id", SUBMISSION_ENV), ("job_address", ADDRESS_ENV))
                   if v in os.environ}
    if environment:
        extra["environment"] = environment  # the versions: environment its tasks ran in
    accelerator_type = req.accelerator_type
    if req.resume:
        accelerator_type = accelerator_type or store.manifest(req.resume).get("accelerator_type")
    if todo is not None and not todo[1]:  # every shard stored, the manifest never finished: no task to run
        store.reopen_run(run_id, **extra)
        store.finish_run(run_id, Stored.COMPLETE, failures=[])
        return Ran(run_id, True, 0, 0, [], time.perf_counter() - started, store.where(run_id))
    slots = runner.connect(req.address, gpus, accelerator_type, req.verbose)
    with progress(f"{run_id} on {slots} slot{'s' * (slots > 1)}") as on_progress:
        options = runner.RunOptions(accelerator_type, req.task_timeout, on_progress,
                                    cache_root(store) if req.jit_cache else None)
        if req.resume:
            result = runner.resume(store, req.resume, slots, options, extra, todo)
        else:
            result = runner.submit(spec, store, slots, req.spec_path or "", run_id, options=options,
                                   manifest_extra=extra)
    return Ran(result.run_id, bool(req.resume), slots, result.shards_run, list(result.failures),
               time.perf_counter() - started, store.where(result.run_id), tuple(sorted(result.devices)))


def recorded_job(store: RunStore, run: str, address: Optional[str] = None) -> Optional[Tuple[str, str]]:
    """(address, latest submission id) of a run submitted through the Jobs API, else None."""
    record: Mapping[str, Any] = store.submission(run) or {}
    manifest: Mapping[str, Any] = store.manifest(run) if store.has_run(run) else {}
    sid = (record.get("submission_ids") or [manifest.get("submission_id")])[-1]
    address = address or record.get("address") or manifest.get("job_address")
    return (address, sid) if sid and address else None


@dataclass(frozen=True)
class RunStatus:
    """detrun status: the run's manifest (None: none yet) and its Ray job, if submitted."""

    run: str
    runs_root: str
    state: Optional[str] = None  # the manifest's status, or stale (...)
    gpus: object = None
    missing: Tuple[str, ...] = ()  # shards without complete rows
    failures: Tuple[str, ...] = ()
    resumable: bool = False  # stale, or shards missing and not running
    job: Optional[Tuple[str, str]] = None  # (address, submission id)

    def job_state(self) -> str:
        """The Ray job's status line, asked now (the run's lines are printed first)."""
        from .jobs import job_status

        if self.job is None:
            raise DetrunError(f"run {self.run!r} was not submitted to a Ray job")
        return job_status(*self.job)


def run_status(req: RunRequest) -> RunStatus:
    store = RunStore(req.runs_root)
    job = recorded_job(store, req.run, req.address)
    if not store.has_run(req.run):
        if not job:
            raise DetrunError(f"no run {req.run!r} under {req.runs_root}")
        return RunStatus(req.run, req.runs_root, job=job)
    from ..store.heartbeat import run_state
    from .resume import missing_shards

    m = store.manifest(req.run)
    _, missing = missing_shards(store, req.run)
    state = run_state(m)
    stale = state != m.get("status")  # running, but its driver stopped beating
    return RunStatus(req.run, req.runs_root, state, m.get("gpus"), tuple(s.shard_id for s in missing),
                     tuple(m.get("failures") or []), stale or bool(missing and state != Stored.RUNNING), job)


def job_logs_of(req: RunRequest) -> str:
    """The driver logs of the Ray job that ran req.run."""
    job = recorded_job(RunStore(req.runs_root), req.run, req.address)
    if not job:
        raise DetrunError(f"run {req.run!r} was not submitted through the Ray Jobs API; its task logs are in the "
                          "Ray session logs of each node (/tmp/ray/session_latest/logs)")
    from .jobs import job_logs

    return job_logs(*job)
