"""The detrun command line: parses, calls the library, prints, maps errors to exit codes 0/1/2."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import List, Optional, Sequence

import typer
from typing_extensions import Annotated

from . import exitpolicy
from .errors import EXIT_MISMATCH, DetrunError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Determinism regression runner for LLM attention kernels, on Ray.")



def _errors(fn):
    """The exit-code policy of each command (exitpolicy.command); output paths are checked first."""
    return exitpolicy.command(fn, outputs={"junit": "--junit", "output": "-o/--output"})


RunsRoot = Annotated[str, typer.Option("--runs-root", help="Where runs are stored (path or URI).")]
Baseline = Annotated[bool, typer.Option("--baseline", help="Compare against the golden baseline of the run's fingerprint.")]
Strict = Annotated[bool, typer.Option("--strict", help="Every axis claimed bitwise: explained differences fail too.")]
Expect = Annotated[Optional[List[str]], typer.Option(
    "--expect", metavar="AXIS=LEVEL", help="Claim per axis (repeat, gpu, mode, batch, phase, run): bitwise, "
                                          "explained or ignore; over the spec's `expect` (repeatable)")]
RequireBaseline = Annotated[bool, typer.Option(
    "--require-baseline", help="With --baseline: no baseline of this exact fingerprint fails (exit 1)")]
Details = Annotated[int, typer.Option("--details", min=0, help="Examples shown per (axis, cause)")]
Junit = Annotated[Optional[Path], typer.Option("--junit", help="Also write JUnit XML here (one testcase per comparison).")]

baseline_app = typer.Typer(no_args_is_help=True, help="Golden baselines, one per spec and environment fingerprint.")
app.add_typer(baseline_app, name="baseline")
RunArg = Annotated[str, typer.Argument(help="Run id under --runs-root")]
JobAddress = Annotated[Optional[str], typer.Option(help="Jobs API address (default: the recorded one)")]


def _console():
    from rich.console import Console

    return Console(highlight=False)


def _compare_and_print(store, runs: List[str], checks, junit: Optional[Path] = None) -> int:
    from .judge.baseline import comparison
    from .present.render import print_comparison

    cmp = comparison(store, runs, checks)
    exitpolicy.set_verdict(cmp.exit_code)
    if junit is not None:  # written before printing: a closed stdout must not lose it
        from .present.junit import write_junit

        write_junit(cmp, str(junit), f"detrun {' '.join(runs)}")
    print_comparison(cmp, _console(), checks.details)
    if junit is not None:
        print(f"JUnit XML written to {junit}")
    return cmp.exit_code


def _checks(baseline: bool, require_baseline: bool, strict: bool, expect: Optional[List[str]], details: int):
    from .judge.claims import Checks, parse_expect

    return Checks(baseline, require_baseline, strict, parse_expect(expect or []), details)


def _check_flags(checks) -> List[str]:
    """The options that rebuild `checks` (for the job a Jobs API submission runs)."""
    out = ["--baseline"] * checks.baseline + ["--require-baseline"] * checks.require_baseline
    out += ["--strict"] * checks.strict + [a for k, v in checks.expect.items() for a in ("--expect", f"{k}={v}")]
    return out + (["--details", str(checks.details)] if checks.details != type(checks)().details else [])


def _parse_gpus(value: str) -> Optional[int]:
    if value == "all":
        return None
    if not value.isdigit() or int(value) < 1:
        raise DetrunError(f"--gpus must be 'all' or a positive number, not {value!r}")
    return int(value)


def _job_args(spec_path: Optional[Path], resume: Optional[str], run_id: str, runs_root: str,
              gpus: str, accelerator_type: Optional[str], task_timeout: Optional[float],
              passthrough: Sequence[str] = ()) -> List[str]:
    """The `detrun submit` arguments the job runs on the cluster (its driver joins with --address auto)."""
    args = ["submit", "--resume", resume] if resume else ["submit", str(spec_path), "--run-id", run_id]
    args += ["--address", "auto", "--runs-root", runs_root, "--gpus", gpus]
    if accelerator_type:
        args += ["--accelerator-type", accelerator_type]
    if task_timeout:
        args += ["--task-timeout", f"{task_timeout:g}"]
    return args + list(passthrough)


def _submit_job(address: str, args: List[str], run_id: str, runs_root: str, working_dir: Optional[Path],
                resume: bool) -> None:
    from .run import jobs
    from .store.runs import RunStore

    if "://" not in runs_root and not Path(runs_root).is_absolute():
        raise DetrunError("with an http:// address the job writes the runs: pass --runs-root as a path or URI "
                          "both the cluster and this machine see (e.g. /shared/runs or s3://bucket/runs)")
    store = RunStore(runs_root)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    submission_id = f"detrun-{run_id}" + (f"-resume-{stamp}" if resume else "")
    jobs.submit_job(address, args, submission_id, str(working_dir) if working_dir else None)
    store.record_submission(run_id, address, submission_id)
    print(f"submitted job {submission_id} for run {run_id} to {address}")
    print(f"follow it with: detrun status {run_id} --runs-root {runs_root}; "
          f"detrun logs {run_id} --runs-root {runs_root}")


@app.command()
@_errors
def submit(
    spec_path: Annotated[Optional[Path], typer.Argument(help="Job spec (YAML), e.g. jobs/paged.yaml")] = None,
    gpus: Annotated[str, typer.Option(help="GPUs: all alive ones, or N (a local Ray declares N)")] = "all",
    address: Annotated[Optional[str], typer.Option(
        help="http://head:8265: submit as a Ray job; ray://..., host:port or auto: drive that cluster from here; "
             "default: start a local Ray")] = None,
    accelerator_type: Annotated[Optional[str], typer.Option(
        help="Only GPUs of this Ray accelerator type, e.g. H100 (PCIe and SXM alike: rows keep the full name)")] = None,
    task_timeout: Annotated[Optional[float], typer.Option(min=1, help="Cancel a shard task after S seconds")] = None,
    resume: Annotated[Optional[str], typer.Option(metavar="RUN", help="Run only what RUN is missing")] = None,
    working_dir: Annotated[Optional[Path], typer.Option(
        help="With an http:// address: upload this directory as the job's working_dir "
             "(default: use the detrun installed on the cluster)")] = None,
    runs_root: RunsRoot = "runs",
    run_id: Annotated[Optional[str], typer.Option(help="Run id (default: <name>-<UTC time>-<hex>)")] = None,
    overrides: Annotated[Optional[List[str]], typer.Option(
        "--set", help="Override a spec field: KEY.PATH=VALUE (repeatable)")] = None,
    baseline: Baseline = False,
    require_baseline: RequireBaseline = False,
    strict: Strict = False,
    expect: Expect = None,
    details: Details = 3,
    junit: Junit = None,
    jit_cache: Annotated[bool, typer.Option(
        "--jit-cache/--no-jit-cache", help="FlashInfer tasks load the modules compiled before from "
                                            "<runs root>/jit-cache and store the ones they compile")] = True,
) -> None:
    """Expand a job spec into cells, run them as Ray tasks, store rows, compare (or resume a run)."""
    from .run.jobs import is_jobs_address
    from .spec.matrix import check_size
    from .spec.model import load_spec
    from .store.runs import RunStore, check_run_id, new_run_id

    if (spec_path is None) == (resume is None):
        raise DetrunError("pass a job spec, or --resume RUN (not both)")
    for value, option in ((run_id, "--run-id"), (resume, "--resume")):
        if value is not None:
            check_run_id(value, option)
    slots = _parse_gpus(gpus)
    spec = load_spec(spec_path, overrides) if spec_path else None
    if spec and slots:  # with --gpus all, runner.submit checks once Ray says how many
        check_size(spec, slots, str(spec_path))
    RunStore(runs_root).check_writable("--runs-root")  # all before Ray starts
    run_id = resume or run_id or new_run_id(spec.name)
    checks = _checks(baseline, require_baseline, strict, expect, details)
    if is_jobs_address(address):
        if spec_path and working_dir and spec_path.resolve().is_relative_to(working_dir.resolve()):
            spec_path = spec_path.resolve().relative_to(working_dir.resolve())  # as the job sees it
        passthrough = [a for item in overrides or [] for a in ("--set", item)]
        passthrough += _check_flags(checks) + (["--junit", str(junit)] if junit else [])
        passthrough += [] if jit_cache else ["--no-jit-cache"]
        args = _job_args(spec_path, resume, run_id, runs_root, gpus, accelerator_type, task_timeout, passthrough)
        return _submit_job(address, args, run_id, runs_root, working_dir, bool(resume))
    store = RunStore(runs_root)
    _run_here(store, spec, str(spec_path or ""), run_id, resume, address, slots, accelerator_type, task_timeout,
              checks, junit, jit_cache)


def _run_here(store, spec, spec_path: str, run_id: str, resume: Optional[str], address: Optional[str],
              gpus: Optional[int], accelerator_type: Optional[str], task_timeout: Optional[float],
              checks, junit: Optional[Path], jit_cache: bool = True) -> None:
    import os

    from .run import runner
    from .run.jitcache import cache_root
    from .run.jobs import ADDRESS_ENV, SUBMISSION_ENV
    from rich.progress import Progress

    started = time.perf_counter()
    extra = {k: os.environ[v] for k, v in (("submission_id", SUBMISSION_ENV), ("job_address", ADDRESS_ENV))
             if v in os.environ}
    if resume:
        accelerator_type = accelerator_type or store.manifest(resume).get("accelerator_type")
    slots = runner.connect(address, gpus, accelerator_type)
    with Progress(console=_console_err(), transient=True) as progress:
        task = progress.add_task(f"{run_id} on {slots} GPU(s)", total=None)
        options = runner.RunOptions(accelerator_type, task_timeout,
                                    lambda done, total: progress.update(task, completed=done, total=total),
                                    cache_root(store) if jit_cache else None)
        if resume:
            result = runner.resume(store, resume, slots, options, extra)
        else:
            result = runner.submit(spec, store, slots, spec_path, run_id, options=options, manifest_extra=extra)
    verb = f"resumed: {result.shards_run} shard(s) run" if resume else f"{slots} GPU(s)"
    print(f"run {result.run_id}: {verb}, {time.perf_counter() - started:.1f} s, "
          f"stored under {store.where(result.run_id)}")
    for failure in result.failures:
        print(f"task failed: {failure}", file=sys.stderr)
    raise typer.Exit(_compare_and_print(store, [result.run_id], checks, junit))


def _console_err():
    from rich.console import Console

    return Console(stderr=True)


@app.command()
@_errors
def compare(
    runs: Annotated[List[str], typer.Argument(help="Run ids under --runs-root (or run directories)")],
    runs_root: RunsRoot = "runs",
    baseline: Baseline = False,
    require_baseline: RequireBaseline = False,
    strict: Strict = False,
    expect: Expect = None,
    details: Details = 3,
    junit: Junit = None,
) -> None:
    """Check the claims: bitwise equality across repeats, GPUs, modes, batches, phases and runs. Exit 0/1/2."""
    from .store.runs import run_dirs

    checks = _checks(baseline, require_baseline, strict, expect, details)
    store, ids = run_dirs(runs_root, runs)
    raise typer.Exit(_compare_and_print(store, ids, checks, junit))


@app.command()
@_errors
def report(
    runs: Annotated[List[str], typer.Argument(help="Run ids under --runs-root (or run directories)")],
    output: Annotated[Path, typer.Option("-o", "--output", help="The HTML file to write")] = Path("report.html"),
    runs_root: RunsRoot = "runs",
    baseline: Baseline = False,
    require_baseline: RequireBaseline = False,
    strict: Strict = False,
    expect: Expect = None,
) -> None:
    """Write one self-contained HTML report (verdict, claims, findings, heatmap, max-ULP plot, environment)."""
    from .judge.baseline import comparison
    from .present.report import write_report
    from .store.runs import run_dirs

    checks = _checks(baseline, require_baseline, strict, expect, 3)
    store, ids = run_dirs(runs_root, runs)
    cmp = comparison(store, ids, checks)
    write_report(store, cmp, str(output), f"detrun report: {', '.join(ids)}")
    print(f"report written to {output} (verdict: {cmp.verdict.headline})")


@app.command()
@_errors
def shrink(
    run: RunArg,
    output: Annotated[Path, typer.Option("-o", "--output", help="The job spec to write (the minimal pair)")] = Path(
        "found.yaml"),
    budget_cells: Annotated[int, typer.Option("--budget-cells", min=2, help="Cells the trials may run")] = 200,
    runs_root: RunsRoot = "runs",
    inline: Annotated[bool, typer.Option("--inline", help="Run the trials in this process, without Ray")] = False,
    address: Annotated[Optional[str], typer.Option(
        help="Ray to run the trials on: ray://..., host:port or auto (default: start a local Ray)")] = None,
) -> None:
    """Shrink RUN's first batch difference to the smallest batch that still differs; write it as a job.

    Exit 1: the difference was reproduced and shrunk (the written job fails the same way); 2: nothing to
    shrink, or the pair did not differ when run again.
    """
    from .run import shrink as shrinking
    from .paths import write_output
    from .store.runs import RunStore

    store = RunStore(runs_root)
    store.manifest(run)  # a missing run is exit 2 before Ray starts
    trial = shrinking.inline_trial
    if not inline:
        from .run import runner

        runner.connect(address, 1)
        trial = shrinking.ray_trial

    def show(step) -> None:
        print(f"[{step.cells}/{budget_cells} cells] step {step.number}: {step.tried}: {step.outcome}"
              + (f"; now {step.size}" if step.outcome == "differs" else ""), flush=True)

    found = shrinking.shrink(store, run, trial, budget_cells, show)
    write_output(output, shrinking.job_text(found), "-o/--output")
    p, spec = found.pair, found.spec
    _names = ", ".join
    state = "budget spent: smaller, not shown minimal" if found.exhausted else "minimal: no smaller batch differs"
    print(f"{state} ({len(found.steps)} trials, {found.cells} cells): {p.request} differs between "
          f"{p.small} ({_names(spec.cases[p.small])}) and {p.large} ({_names(spec.cases[p.large])}) ({p.where})")
    for row in found.rows:
        print(f"  plan in {row['case']}: {shrinking.plan_line(row)}")
    print(f"  differs in: {'; '.join(found.explain())}")
    print(f"wrote {output}: `detrun submit {output}` reproduces it (exit 1)")
    exitpolicy.set_verdict(EXIT_MISMATCH)
    raise typer.Exit(EXIT_MISMATCH)


@app.command()
@_errors
def history(runs_root: RunsRoot = "runs") -> None:
    """List every run (date, spec, fingerprint, verdict, counts) and where each case first differed."""
    from .judge.history import history as build
    from .present.render import print_history
    from .store.runs import RunStore

    print_history(build(RunStore(runs_root)), _console())


@baseline_app.command("set")
@_errors
def baseline_set(
    run: Annotated[str, typer.Argument(help="The run to make golden for each fingerprint it recorded")],
    runs_root: RunsRoot = "runs",
    force: Annotated[bool, typer.Option(help="Even if the run is incomplete or fails on its own")] = False,
) -> None:
    """Make RUN the baseline of its spec for each environment fingerprint in its rows."""
    from .judge.baseline import set_baseline
    from .store.runs import RunStore

    for doc in set_baseline(RunStore(runs_root), run, force):
        print(f"baseline {doc['spec']}/{doc['fingerprint']} -> {doc['run_id']}")


@baseline_app.command("show")
@_errors
def baseline_show(runs_root: RunsRoot = "runs") -> None:
    """List the baselines: spec, fingerprint, run, when set, and the fingerprint's fields."""
    from .judge.baseline import list_baselines
    from .store.runs import RunStore

    docs = list_baselines(RunStore(runs_root))
    if not docs:
        print(f"no baselines under {runs_root} (set one with: detrun baseline set RUN)")
    for doc in docs:
        fields = " ".join(f"{k}={v}" for k, v in sorted(doc["fields"].items()))
        print(f"{doc['spec']}  {doc['fingerprint']}  {doc['run_id']}  set {doc['set'][:19]}  {fields}")


@app.command("list")
@_errors
def list_runs(runs_root: RunsRoot = "runs") -> None:
    """List the runs under the runs root."""
    from .store.runs import RunStore

    store = RunStore(runs_root)
    for run_id in store.list_runs():
        try:
            m = store.manifest(run_id)
        except DetrunError as exc:
            print(f"{run_id}  damaged: {exc}")
            continue
        print(f"{run_id}  {m.get('status')}  gpus={m.get('gpus')}  spec={m.get('spec_path')}")


def _submission(store, run: str, address: Optional[str]):
    """(address, latest submission id) of a run submitted through the Jobs API, else None."""
    record = store.submission(run) or {}
    manifest = store.manifest(run) if store.has_run(run) else {}
    sid = (record.get("submission_ids") or [manifest.get("submission_id")])[-1]
    address = address or record.get("address") or manifest.get("job_address")
    return (address, sid) if sid and address else None


@app.command()
@_errors
def timings(run: RunArg, runs_root: RunsRoot = "runs") -> None:
    """Where a run's seconds went: worker start, imports, plan, capture, kernels, digests, writes; peak memory."""
    from .present.render import print_timings
    from .run.resources import run_lines
    from .stages import run_breakdown
    from .store.runs import RunStore

    store, console = RunStore(runs_root), _console()
    print_timings(*run_breakdown(store, run), console)
    for line in run_lines(store, run):
        print(line)


@app.command()
@_errors
def status(
    run: RunArg,
    runs_root: RunsRoot = "runs",
    address: JobAddress = None,
) -> None:
    """A run's status from its manifest (shards stored, failures), and its Ray job's status if submitted."""
    from .store.runs import RunStore

    store = RunStore(runs_root)
    job = _submission(store, run, address)
    if store.has_run(run):
        from .store.heartbeat import run_state
        from .run.runner import missing_shards

        m = store.manifest(run)
        _, missing = missing_shards(store, run)
        state = run_state(m)
        stale = state != m.get("status")  # running, but its driver stopped beating
        print(f"run {run}: {state}, gpus={m.get('gpus')}, shards missing: {len(missing)}"
              + (f" ({', '.join(s.shard_id for s in missing)})" if missing else ""))
        for failure in m.get("failures") or []:
            print(f"  failed: {failure}")
        if stale or (missing and state != "running"):
            print(f"  finish it with: detrun submit --resume {run} --runs-root {runs_root}")
    elif not job:
        raise DetrunError(f"no run {run!r} under {runs_root}")
    else:
        print(f"run {run}: no manifest yet under {runs_root}")
    if job:
        from .run.jobs import job_status

        print(f"job {job[1]} at {job[0]}: {job_status(*job)}")


@app.command()
@_errors
def logs(
    run: RunArg,
    runs_root: RunsRoot = "runs",
    address: JobAddress = None,
) -> None:
    """Print the driver logs of the Ray job that ran RUN."""
    from .store.runs import RunStore

    job = _submission(RunStore(runs_root), run, address)
    if not job:
        raise DetrunError(f"run {run!r} was not submitted through the Ray Jobs API; its task logs are in the "
                          "Ray session logs of each node (/tmp/ray/session_latest/logs)")
    from .run.jobs import job_logs

    print(job_logs(*job), end="")


@app.command("validate-cluster")
@_errors
def validate_cluster(
    path: Annotated[Path, typer.Argument(help="Cluster-launcher YAML, e.g. ray_cluster.yaml")],
) -> None:
    """Check a `ray up` cluster YAML offline with Ray's own schema and rules."""
    from .run.cluster import validate_cluster_yaml

    config = validate_cluster_yaml(path)
    print(f"{path}: valid ({config['provider']['type']} provider, node types: "
          f"{', '.join(config['available_node_types'])})")


def main(argv: Optional[List[str]] = None) -> None:
    """The `detrun` command: exit codes as exitpolicy says (0/1/2/3/130)."""
    sys.exit(exitpolicy.run(app, argv))


if __name__ == "__main__":
    main()
