"""The detrun command line: parses, calls the library, prints, maps errors to exit codes 0/1/2."""

from __future__ import annotations

import functools
import sys
import time
from pathlib import Path
from typing import List, Optional

import typer
from typing_extensions import Annotated

from .errors import EXIT_INFRA, DetrunError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Determinism regression runner for LLM attention kernels, on Ray.")



def _errors(fn):
    """Map DetrunError to one line on stderr and exit 2; leave typer.Exit codes alone."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except DetrunError as exc:
            print(f"detrun: error: {exc}", file=sys.stderr)
            raise typer.Exit(EXIT_INFRA) from None
        except KeyboardInterrupt:
            print("detrun: interrupted; the run is marked incomplete", file=sys.stderr)
            raise typer.Exit(EXIT_INFRA) from None

    return wrapper


RunsRoot = Annotated[str, typer.Option("--runs-root", help="Where runs are stored (path or URI).")]
Baseline = Annotated[bool, typer.Option("--baseline", help="Compare against the golden baseline of the run's fingerprint.")]
Strict = Annotated[bool, typer.Option("--strict", help="Differences explained by plan or environment fail too.")]
Junit = Annotated[Optional[Path], typer.Option("--junit", help="Also write JUnit XML here (one testcase per comparison).")]

baseline_app = typer.Typer(no_args_is_help=True, help="Golden baselines, one per spec and environment fingerprint.")
app.add_typer(baseline_app, name="baseline")


def _console():
    from rich.console import Console

    return Console(highlight=False)


def _compare_and_print(store, runs: List[str], baseline: bool = False, strict: bool = False,
                       junit: Optional[Path] = None) -> int:
    from .baseline import comparison
    from .render import print_comparison

    cmp = comparison(store, runs, baseline, strict)
    print_comparison(cmp, _console())
    if junit is not None:
        from .junit import write_junit

        write_junit(cmp, str(junit), f"detrun {' '.join(runs)}")
        print(f"JUnit XML written to {junit}")
    return cmp.exit_code


@app.command()
@_errors
def submit(
    spec_path: Annotated[Path, typer.Argument(help="Job spec (YAML), e.g. jobs/paged.yaml")],
    gpus: Annotated[Optional[int], typer.Option(min=1, help="GPU slots (default: all; 1 declared on CPU)")] = None,
    address: Annotated[Optional[str], typer.Option(help="Ray cluster address (default: start a local Ray)")] = None,
    runs_root: RunsRoot = "runs",
    run_id: Annotated[Optional[str], typer.Option(help="Run id (default: <name>-<UTC time>-<hex>)")] = None,
    overrides: Annotated[Optional[List[str]], typer.Option(
        "--set", help="Override a spec field: KEY.PATH=VALUE (repeatable)")] = None,
    baseline: Baseline = False,
    strict: Strict = False,
    junit: Junit = None,
) -> None:
    """Expand a job spec into cells, run them as Ray tasks, store rows, compare."""
    from .spec import load_spec
    from .store import RunStore

    spec = load_spec(spec_path, overrides)
    store = RunStore(runs_root)
    from . import runner

    started = time.perf_counter()
    slots = runner.connect(address, gpus)
    from rich.progress import Progress

    with Progress(console=_console_err(), transient=True) as progress:
        task = progress.add_task(f"{spec.name} on {slots} GPU slot(s)", total=None)
        result = runner.submit(spec, store, slots, str(spec_path), run_id,
                               on_progress=lambda done, total: progress.update(task, completed=done, total=total))
    print(f"run {result.run_id}: {slots} GPU slot(s), {time.perf_counter() - started:.1f} s, "
          f"stored under {runs_root}/{result.run_id}")
    for failure in result.failures:
        print(f"task failed: {failure}", file=sys.stderr)
    raise typer.Exit(_compare_and_print(store, [result.run_id], baseline, strict, junit))


def _console_err():
    from rich.console import Console

    return Console(stderr=True)


@app.command()
@_errors
def compare(
    runs: Annotated[List[str], typer.Argument(help="Run ids under --runs-root (or run directories)")],
    runs_root: RunsRoot = "runs",
    baseline: Baseline = False,
    strict: Strict = False,
    junit: Junit = None,
) -> None:
    """Check bitwise equality across repeats, GPUs, modes, batches and runs. Exit 0/1/2."""
    from .store import run_dirs

    store, ids = run_dirs(runs_root, runs)
    raise typer.Exit(_compare_and_print(store, ids, baseline, strict, junit))


@app.command()
@_errors
def report(
    runs: Annotated[List[str], typer.Argument(help="Run ids under --runs-root (or run directories)")],
    output: Annotated[Path, typer.Option("-o", "--output", help="The HTML file to write")] = Path("report.html"),
    runs_root: RunsRoot = "runs",
    baseline: Baseline = False,
    strict: Strict = False,
) -> None:
    """Write one self-contained HTML report (verdict, heatmap, max-ULP plot, environment, mismatches)."""
    from .baseline import comparison
    from .report import write_report
    from .store import run_dirs

    store, ids = run_dirs(runs_root, runs)
    cmp = comparison(store, ids, baseline, strict)
    write_report(store, cmp, str(output), f"detrun report: {', '.join(ids)}")
    print(f"report written to {output} (verdict: {'FAIL' if cmp.failed else 'pass'}, exit code of compare: {cmp.exit_code})")


@app.command()
@_errors
def history(runs_root: RunsRoot = "runs") -> None:
    """List every run (date, spec, fingerprint, verdict, counts) and where each case first differed."""
    from .history import history as build
    from .render import print_history
    from .store import RunStore

    print_history(build(RunStore(runs_root)), _console())


@baseline_app.command("set")
@_errors
def baseline_set(
    run: Annotated[str, typer.Argument(help="The run to make golden for each fingerprint it recorded")],
    runs_root: RunsRoot = "runs",
    force: Annotated[bool, typer.Option(help="Even if the run is incomplete or fails on its own")] = False,
) -> None:
    """Make RUN the baseline of its spec for each environment fingerprint in its rows."""
    from .baseline import set_baseline
    from .store import RunStore

    for doc in set_baseline(RunStore(runs_root), run, force):
        print(f"baseline {doc['spec']}/{doc['fingerprint']} -> {doc['run_id']}")


@baseline_app.command("show")
@_errors
def baseline_show(runs_root: RunsRoot = "runs") -> None:
    """List the baselines: spec, fingerprint, run, when set, and the fingerprint's fields."""
    from .baseline import list_baselines
    from .store import RunStore

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
    from .store import RunStore

    store = RunStore(runs_root)
    for run_id in store.list_runs():
        m = store.manifest(run_id)
        print(f"{run_id}  {m.get('status')}  gpus={m.get('gpus')}  spec={m.get('spec_path')}")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
