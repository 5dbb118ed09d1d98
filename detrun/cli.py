"""The detrun command line. The rule: each command parses its options (Typer), builds one request object
(re-exported by detrun.api), calls one function of detrun/api.py (the library's face) with it, and prints
what comes back (or returns its code, or an Outcome: the code and what to print); exitpolicy maps the code and
every error to the exit (0/1/2/3/130). compare, list, status and history print text or, with --format json,
one JSON document (present/jsondoc.py). Checks beyond parsing,
files other than stdout/stderr, Ray and the Jobs API belong to the library (behind detrun/api.py).
No torch or ray at import time: each command imports what it calls."""

from __future__ import annotations

import contextlib
import sys
from enum import Enum
from pathlib import Path
from typing import List, Optional

import typer
from typing_extensions import Annotated

from . import api, exitpolicy
from .api import (
    BaselineRequest,
    BisectRequest,
    ClaimOptions,
    CompareRequest,
    ReportRequest,
    RunRequest,
    RunsRequest,
    ShrinkRequest,
    SubmitRequest,
    TimingsRequest,
)
from .errors import ExitCode

# rich_markup_mode=None: click's plain help, one line per option at 80 columns (tests/test_help.py)
app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, rich_markup_mode=None,
                  help="Determinism regression runner for LLM attention kernels, on Ray.")


def _errors(fn):
    """The exit-code policy of each command (exitpolicy.command); output paths are checked first."""
    return exitpolicy.command(fn, outputs={"junit": "--junit", "output": "-o/--output"})


RunsRoot = Annotated[str, typer.Option("--runs-root", metavar="DIR|URI", help="Where runs are stored")]
Baseline = Annotated[bool, typer.Option("--baseline", help="Also compare with the fingerprint's baseline")]
Strict = Annotated[bool, typer.Option("--strict", help="Every axis bitwise: explained differences fail")]
Expect = Annotated[Optional[List[str]], typer.Option(
    "--expect", metavar="AXIS=LEVEL",
    help="Claim per axis: bitwise, explained, ignore, or a bound ulp:N, abs:X, rel:X (repeatable)")]
RequireBaseline = Annotated[bool, typer.Option(
    "--require-baseline", help="With --baseline: no baseline fails (exit 1)")]
Details = Annotated[int, typer.Option("--details", min=0, metavar="N", help="Examples per (axis, cause)")]
Junit = Annotated[Optional[Path], typer.Option("--junit", metavar="FILE", help="Also write JUnit XML")]
Verbose = Annotated[bool, typer.Option("-v", "--verbose", help="Ray's notices and task output, on stderr")]


class Format(str, Enum):
    text = "text"
    json = "json"


FormatOpt = Annotated[Format, typer.Option("--format", help="text, or one JSON document on stdout")]

@app.callback()
def _settings() -> None:
    # The driver's DETRUN_* settings, read and checked before any command runs: a bad value exits 2 naming it.
    api.check_settings()


baseline_app = typer.Typer(no_args_is_help=True, help="Golden baselines, one per spec and environment fingerprint.")
app.add_typer(baseline_app, name="baseline")
RunArg = Annotated[str, typer.Argument(metavar="RUN", help="Run id under --runs-root", show_default=False)]
JobAddress = Annotated[Optional[str], typer.Option(metavar="URL", help="Jobs API (default: the recorded one)")]


def _console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=True) if stderr else Console(highlight=False)


def _str(path: Optional[Path]) -> Optional[str]:
    return None if path is None else str(path)


def _claims(baseline: bool, require_baseline: bool, strict: bool, expect: Optional[List[str]],
            details: int = 3) -> ClaimOptions:
    return ClaimOptions(baseline, require_baseline, strict, tuple(expect or ()), details)


def _json(doc) -> None:
    from .present.jsondoc import dumps

    print(dumps(doc))


def _compare_and_print(req: CompareRequest, fmt: Format = Format.text) -> exitpolicy.Outcome:
    """The verdict's code, and its printing (the policy prints: the code stands if stdout is closed)."""
    verdict = api.compare(req)

    def show() -> None:
        if fmt is Format.json:
            from .present.jsondoc import verdict_doc

            _json(verdict_doc(verdict))
        else:
            from .present.render import print_comparison

            print_comparison(verdict, _console(), req.claims.details)
        if req.junit is not None:
            print(f"JUnit XML written to {req.junit}", file=sys.stderr if fmt is Format.json else sys.stdout)

    return exitpolicy.Outcome(verdict.exit_code, show)


@contextlib.contextmanager
def _progress(label: str):
    from rich.progress import Progress

    with Progress(console=_console(stderr=True), transient=True) as progress:
        task = progress.add_task(label, total=None)
        yield lambda done, total: progress.update(task, completed=done, total=total)


@app.command()
@_errors
def submit(
    spec_path: Annotated[Optional[Path], typer.Argument(
        metavar="SPEC", help="Job spec (YAML), e.g. jobs/paged.yaml", show_default=False)] = None,
    gpus: Annotated[str, typer.Option(metavar="N|all", help="GPU slots: N, or every alive GPU")] = "all",
    address: Annotated[Optional[str], typer.Option(
        metavar="URL", help="http://head:8265: send as a Ray job; ray://..., host:port, auto: drive that Ray "
                            "from here (default: a local Ray)")] = None,
    accelerator_type: Annotated[Optional[str], typer.Option(
        metavar="TYPE", help="Only GPUs of this Ray type, e.g. H100")] = None,
    task_timeout: Annotated[Optional[float], typer.Option(
        min=1, metavar="S", help="Cancel a shard task after S seconds")] = None,
    resume: Annotated[Optional[str], typer.Option(metavar="RUN", help="Run only the shards RUN lacks")] = None,
    working_dir: Annotated[Optional[Path], typer.Option(
        metavar="DIR", help="Upload DIR as the Ray job's working_dir")] = None,
    runs_root: RunsRoot = "runs",
    run_id: Annotated[Optional[str], typer.Option(metavar="ID", help="Default: <name>-<UTC time>-<hex>")] = None,
    overrides: Annotated[Optional[List[str]], typer.Option(
        "--set", metavar="KEY=VALUE", help="Set a spec field, e.g. flashinfer.backend=fa3 (repeatable)")] = None,
    baseline: Baseline = False, require_baseline: RequireBaseline = False, strict: Strict = False,
    expect: Expect = None, details: Details = 3, junit: Junit = None,
    jit_cache: Annotated[bool, typer.Option(
        "--jit-cache/--no-jit-cache", help="Reuse FlashInfer modules from <runs root>/jit-cache")] = True,
    verbose: Verbose = False,
) -> Optional[exitpolicy.Outcome]:
    """Run a job spec's cells as Ray tasks, store the rows and compare them (or --resume a run)."""
    from .present import lines

    req = SubmitRequest(_str(spec_path), gpus, address, accelerator_type, task_timeout, resume, _str(working_dir),
                        runs_root, run_id, tuple(overrides or ()),
                        _claims(baseline, require_baseline, strict, expect, details), _str(junit), jit_cache,
                        verbose)
    done = api.submit(req, _progress)
    if isinstance(done, api.Submitted):
        print(*lines.submitted(done.plan, runs_root), sep="\n")
        return None
    runs = done.runs if isinstance(done, api.Versioned) else (done,)  # versions: a run per environment
    for one in runs:
        print(lines.ran(one))
        for failure in one.failures:
            print(f"task failed: {failure}", file=sys.stderr)
    return _compare_and_print(req.compare_request(*(one.run_id for one in runs)))


@app.command()
@_errors
def compare(
    runs: Annotated[List[str], typer.Argument(metavar="RUN", help="Run ids under --runs-root, or run folders")],
    runs_root: RunsRoot = "runs",
    baseline: Baseline = False, require_baseline: RequireBaseline = False, strict: Strict = False,
    expect: Expect = None, details: Details = 3, junit: Junit = None, fmt: FormatOpt = Format.text,
) -> exitpolicy.Outcome:
    """Check the claims: bitwise equality across repeats, GPUs, modes, batches, phases and runs.

    Exit 0: every claim held; 1: a determinism failure; 2: bad input."""
    req = CompareRequest(tuple(runs), runs_root, _claims(baseline, require_baseline, strict, expect, details),
                         _str(junit))
    return _compare_and_print(req, fmt)


@app.command()
@_errors
def report(
    runs: Annotated[List[str], typer.Argument(metavar="RUN", help="Run ids under --runs-root, or run folders")],
    output: Annotated[Path, typer.Option("-o", "--output", metavar="FILE", help="The HTML file to write")] = Path(
        "report.html"),
    runs_root: RunsRoot = "runs",
    baseline: Baseline = False, require_baseline: RequireBaseline = False, strict: Strict = False,
    expect: Expect = None,
) -> None:
    """Write one self-contained HTML report: verdict, claims, findings, heatmap, max-ULP plot, environment."""
    ids, verdict = api.report(ReportRequest(tuple(runs), str(output), runs_root,
                                       _claims(baseline, require_baseline, strict, expect)))
    print(f"report written to {output} (verdict: {verdict.headline})")


@app.command()
@_errors
def shrink(
    run: RunArg,
    output: Annotated[Path, typer.Option(
        "-o", "--output", metavar="FILE", help="The job spec to write (the minimal pair)")] = Path("found.yaml"),
    request: Annotated[Optional[str], typer.Option(
        metavar="NAME", help="The request to follow (default: the first)")] = None,
    budget_cells: Annotated[int, typer.Option(
        "--budget-cells", min=2, metavar="N", help="Cells the trials may run")] = 200,
    runs_root: RunsRoot = "runs",
    address: Annotated[Optional[str], typer.Option(
        metavar="URL", help="Trials on Ray: ray://..., host:port, auto, local (default: in this process)")] = None,
    inline: Annotated[bool, typer.Option("--inline", help="Trials in this process (the default)")] = False,
    verbose: Verbose = False,
) -> exitpolicy.Outcome:
    """Shrink RUN's batch difference to the smallest batch that still differs; write it as a job.

    Exit 1: shrunk (the job written fails the same way); 2: nothing to shrink, or it did not differ again.
    """
    from .present import lines

    found = api.shrink(ShrinkRequest(run, str(output), budget_cells, runs_root, inline, address, request, verbose),
                       lambda step: print(lines.shrink_step(step, budget_cells), flush=True))
    return exitpolicy.Outcome(ExitCode.MISMATCH, lambda: print(*lines.shrunk(found, output), sep="\n"))


@app.command()
@_errors
def bisect(
    spec_path: Annotated[Path, typer.Argument(
        metavar="SPEC", help="Job spec with versions: (YAML)", show_default=False)],
    versions: Annotated[Optional[List[str]], typer.Option(
        "--versions", metavar="V,V,...", help="The range, oldest first (default: versions:)")] = None,
    output: Annotated[Path, typer.Option(
        "-o", "--output", metavar="FILE", help="The job pinned to the two versions")] = Path("bisected.yaml"),
    gpus: Annotated[str, typer.Option(metavar="N|all", help="GPU slots per run")] = "all",
    address: Annotated[Optional[str], typer.Option(
        metavar="ADDR", help="ray://..., host:port, auto (default: local)")] = None,
    runs_root: RunsRoot = "runs",
    overrides: Annotated[Optional[List[str]], typer.Option(
        "--set", metavar="KEY=VALUE", help="Set a spec field (repeatable)")] = None,
    strict: Strict = False, expect: Expect = None,
    expect_break: Annotated[bool, typer.Option(
        "--expect-break/--no-expect-break", help="No break found: exit 2 (or 0)")] = True,
    fmt: FormatOpt = Format.text, verbose: Verbose = False,
) -> exitpolicy.Outcome:
    """Find the first of the job's versions: that breaks a claim; what changed.

    Exit 1: a break located; 2: none bracketed, a version not installable."""
    from .present import lines

    names = tuple(v.strip() for item in versions or () for v in item.split(",") if v.strip())
    req = BisectRequest(str(spec_path), names, str(output), gpus, address, runs_root, tuple(overrides or ()),
                        _claims(False, False, strict, expect), expect_break, verbose=verbose)
    text = fmt is Format.text
    found = api.bisect(req, (lambda probe: print(lines.bisect_probe(probe), flush=True)) if text else None)
    if not text:
        from .present.jsondoc import bisect_doc

        return exitpolicy.Outcome(found.code, lambda: _json(bisect_doc(found)))
    return exitpolicy.Outcome(found.code, lambda: print(*lines.bisected(found), sep="\n"))


@app.command()
@_errors
def history(runs_root: RunsRoot = "runs", fmt: FormatOpt = Format.text) -> None:
    """Every run (date, spec, fingerprint, verdict, counts) and where each case first differed."""
    hist = api.history(RunsRequest(runs_root))
    if fmt is Format.json:
        from .present.jsondoc import history_doc

        return _json(history_doc(hist))
    from .present.render import print_history

    print_history(hist, _console())


@baseline_app.command("set")
@_errors
def baseline_set(
    run: Annotated[str, typer.Argument(metavar="RUN", help="The run to make golden", show_default=False)],
    runs_root: RunsRoot = "runs",
    force: Annotated[bool, typer.Option(help="Even if the run is incomplete or fails on its own")] = False,
) -> None:
    """Make RUN the baseline of its spec for each environment fingerprint in its rows."""
    for doc in api.baseline_set(BaselineRequest(runs_root, run, force)):
        print(f"baseline {doc['spec']}/{doc['fingerprint']} -> {doc['run_id']}")


@baseline_app.command("show")
@_errors
def baseline_show(runs_root: RunsRoot = "runs") -> None:
    """List the baselines: spec, fingerprint, run, when set, and the fingerprint's fields."""
    from .present import lines

    print(*lines.baselines(api.baseline_show(BaselineRequest(runs_root)), runs_root), sep="\n")


@app.command("list")
@_errors
def list_runs(runs_root: RunsRoot = "runs", fmt: FormatOpt = Format.text) -> None:
    """List the runs under the runs root."""
    runs = api.list_runs(RunsRequest(runs_root))
    if fmt is Format.json:
        from .present.jsondoc import list_doc

        return _json(list_doc(runs))
    from .present.lines import listed

    for run_id, manifest in runs:
        print(listed(run_id, manifest))


@app.command()
@_errors
def timings(run: RunArg, runs_root: RunsRoot = "runs", all_stages: Annotated[bool, typer.Option(
        "--all", help="Every stage, also those that took no time")] = False) -> None:
    """Where a run's seconds went (worker start, imports, plan, kernels, digests, writes); peak memory."""
    from .present.render import print_timings

    breakdown, extra = api.timings(TimingsRequest(run, runs_root, all_stages))
    print_timings(*breakdown, _console())
    for line in extra:
        print(line)


@app.command()
@_errors
def status(run: RunArg, runs_root: RunsRoot = "runs", address: JobAddress = None,
           fmt: FormatOpt = Format.text) -> None:
    """A run's status (shards stored, failures), and its Ray job's if it was submitted as one."""
    from .present import lines

    st = api.status(RunRequest(run, runs_root, address))
    if fmt is Format.json:
        from .present.jsondoc import status_doc

        return _json(status_doc(st, st.job_state() if st.job else None))
    print(*lines.status(st), sep="\n")
    if st.job:
        print(f"job {st.job[1]} at {st.job[0]}: {st.job_state()}")


@app.command()
@_errors
def logs(run: RunArg, runs_root: RunsRoot = "runs", address: JobAddress = None) -> None:
    """Print the driver logs of the Ray job that ran RUN."""
    print(api.logs(RunRequest(run, runs_root, address)), end="")


@app.command("validate-cluster")
@_errors
def validate_cluster(
        path: Annotated[Path, typer.Argument(
            metavar="YAML", help="Cluster-launcher YAML, e.g. ray_cluster.yaml", show_default=False)]) -> None:
    """Check a `ray up` cluster YAML offline with Ray's own schema and rules."""
    config = api.validate_cluster(path)
    print(f"{path}: valid ({config['provider']['type']} provider, node types: "
          f"{', '.join(config['available_node_types'])})")


def main(argv: Optional[List[str]] = None) -> None:
    """The `detrun` command: exit codes as exitpolicy says (0/1/2/3/130)."""
    sys.exit(exitpolicy.run(app, argv))


if __name__ == "__main__":
    main()
