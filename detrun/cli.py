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


def _console():
    from rich.console import Console

    return Console(highlight=False)


def _compare_and_print(store, runs: List[str]) -> int:
    from .compare import compare_runs
    from .render import print_comparison

    cmp = compare_runs(store, runs)
    print_comparison(cmp, _console())
    return cmp.exit_code


@app.command()
@_errors
def submit(
    spec_path: Annotated[Path, typer.Argument(help="Job spec (YAML), e.g. jobs/paged.yaml")],
    gpus: Annotated[Optional[int], typer.Option(min=1, help="GPU slots (default: all; 1 declared on CPU)")] = None,
    address: Annotated[Optional[str], typer.Option(help="Ray cluster address (default: start a local Ray)")] = None,
    runs_root: RunsRoot = "runs",
    run_id: Annotated[Optional[str], typer.Option(help="Run id (default: <name>-<UTC time>-<hex>)")] = None,
) -> None:
    """Expand a job spec into cells, run them as Ray tasks, store rows, compare."""
    from .spec import load_spec
    from .store import RunStore

    spec = load_spec(spec_path)
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
    raise typer.Exit(_compare_and_print(store, [result.run_id]))


def _console_err():
    from rich.console import Console

    return Console(stderr=True)


@app.command()
@_errors
def compare(
    runs: Annotated[List[str], typer.Argument(help="Run ids under --runs-root (or run directories)")],
    runs_root: RunsRoot = "runs",
) -> None:
    """Check bitwise equality across repeats, GPUs, modes, batches and runs. Exit 0/1/2."""
    from .store import run_dirs

    store, ids = run_dirs(runs_root, runs)
    raise typer.Exit(_compare_and_print(store, ids))


@app.command("list")
@_errors
def list_runs(runs_root: RunsRoot = "runs") -> None:
    """List the runs under the runs root."""
    from .store import RunStore

    store = RunStore(runs_root)
    for run_id in store.list_runs():
        m = store.manifest(run_id)
        print(f"{run_id}  {m.get('status')}  gpus={m.get('gpus')}  spec={m.get('spec_path')}")


@app.command("validate-cluster")
@_errors
def validate_cluster(
    path: Annotated[Path, typer.Argument(help="Cluster-launcher YAML, e.g. ray_cluster.yaml")],
) -> None:
    """Check a `ray up` cluster YAML offline with Ray's own schema and rules."""
    from .cluster import validate_cluster_yaml

    config = validate_cluster_yaml(path)
    print(f"{path}: valid ({config['provider']['type']} provider, node types: "
          f"{', '.join(config['available_node_types'])})")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
