"""The exit-code policy (errors.ExitCode): 0 every claim held, 1 a determinism failure, 2 usage/input/environment
error, 3 internal error, 130 interrupted (Ctrl-C or SIGTERM). A crash is never 1, a closed stdout never
changes the verdict's code.

command() wraps each CLI command (CliRunner calls those directly): a command returns its code, or an Outcome
(its code and what it prints, printed here so that the code stands if stdout is closed meanwhile), and the
wrapper maps that and every error to the exit. run() is what main() runs.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import select
import signal
import sys
import traceback
from dataclasses import dataclass
from typing import Callable, Mapping, Optional, Sequence, Union

import typer

from .errors import DetrunError, ExitCode, Terminated, first_line, incomplete_note, interruption
from .paths import check_output_path

try:  # typer >= 0.17 vendors click
    from typer._click.exceptions import ClickException
except ImportError:  # pragma: no cover
    from click.exceptions import ClickException  # type: ignore[assignment]

DEBUG_ENV = "DETRUN_DEBUG"


@dataclass(frozen=True)
class Outcome:
    """What a command decided (its exit code) and how to show it: the policy calls show(), and the code
    stands if stdout is closed while it prints."""

    code: ExitCode
    show: Callable[[], None]


class _Crash(Exception):
    """An exception click would misreport (it exits 1 on any BrokenPipeError); main reports its cause."""


def _stdout_closed() -> bool:
    """Whether stdout is a pipe whose reader has gone (a BrokenPipeError elsewhere is a crash)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return False
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & select.POLLERR for _, events in poller.poll(0))


def _closed_stdout(code: int) -> int:
    """The rest of the output goes to /dev/null (Python's recipe); the code decided before printing."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return code


def _error(exc: DetrunError) -> ExitCode:
    print(f"detrun: error: {exc}", file=sys.stderr)
    return ExitCode.USAGE


def _interrupted(exc: BaseException) -> ExitCode:
    note = incomplete_note(exc)
    print(f"detrun: {interruption(exc)}" + (f"; {note}" if note else ""), file=sys.stderr)
    return ExitCode.INTERRUPTED


def _internal(exc: BaseException) -> ExitCode:
    debug = os.environ.get(DEBUG_ENV, "") not in ("", "0")
    if debug:
        traceback.print_exception(type(exc), exc, exc.__traceback__)
    hint = "" if debug else f" (set {DEBUG_ENV}=1 for the traceback)"
    print(f"detrun: internal error: {first_line(exc)}{hint}", file=sys.stderr)
    return ExitCode.INTERNAL


Returned = Union[None, ExitCode, Outcome]  # what a command returns (None: OK)


def command(fn: Callable[..., Returned], outputs: Optional[Mapping[str, str]] = None) -> Callable[..., None]:
    """Map a command's code (or Outcome) to its exit, a DetrunError to 2, an interruption to 130, a closed stdout
    to the code decided before printing.

    outputs: parameter name -> option; those paths are checked (check_output_path) before fn runs.
    """

    @functools.wraps(fn)
    def wrapper(*args, **kwargs) -> None:
        code = ExitCode.OK
        try:
            for name, option in (outputs or {}).items():
                check_output_path(kwargs.get(name), option)
            done = fn(*args, **kwargs)
            code = done.code if isinstance(done, Outcome) else ExitCode(done or ExitCode.OK)
            if isinstance(done, Outcome):
                done.show()
                sys.stdout.flush()
        except DetrunError as exc:
            raise typer.Exit(_error(exc)) from None
        except KeyboardInterrupt as exc:
            raise typer.Exit(_interrupted(exc)) from None
        except BrokenPipeError as exc:
            if _stdout_closed():
                raise typer.Exit(_closed_stdout(code)) from None
            raise _Crash() from exc
        if code != ExitCode.OK:
            raise typer.Exit(int(code))

    return wrapper


def _on_sigterm(signum, frame) -> None:
    signal.signal(signal.SIGTERM, lambda *_: None)  # a second SIGTERM does not break the cleanup
    Terminated.received = True
    raise Terminated()


def _console_broken_pipe(console) -> None:
    """Instead of rich's Console.on_broken_pipe (exit 1, whatever the verdict): raise, for the policy."""
    console.quiet = True
    raise BrokenPipeError(errno.EPIPE, "stdout was closed")


@contextlib.contextmanager
def _rich_raises_broken_pipe():
    from rich.console import Console

    saved = Console.on_broken_pipe
    Console.on_broken_pipe = _console_broken_pipe
    try:
        yield
    finally:
        Console.on_broken_pipe = saved


def _show_usage_error(exc: ClickException) -> None:
    """Typer's own rendering of a usage error (a rich panel, or click's plain text without rich); a command
    group given no command prints its help (click's NoArgsIsHelpError, whose message is the help)."""
    if type(exc).__name__ == "NoArgsIsHelpError":
        try:
            print(exc.format_message(), flush=True)
        except BrokenPipeError:  # `detrun | head -1`
            _closed_stdout(ExitCode.OK)
        return
    try:
        from typer.rich_utils import rich_format_error
    except ImportError:  # pragma: no cover
        exc.show()
    else:
        rich_format_error(exc)


def _flushed(code: int) -> int:
    """code once stdout is flushed: a reader gone by then does not change it."""
    try:
        sys.stdout.flush()
    except BrokenPipeError as exc:
        return _closed_stdout(code) if _stdout_closed() else _internal(exc)
    return code


def _run(app: Callable, args: Optional[Sequence[str]]) -> int:
    try:
        code = app(args=args, standalone_mode=False, prog_name="detrun")
    except BrokenPipeError as exc:  # outside a command (click's own output)
        return _closed_stdout(ExitCode.OK) if _stdout_closed() else _internal(exc)
    except ClickException as exc:
        _show_usage_error(exc)
        return ExitCode.USAGE
    except typer.Abort:
        print("detrun: aborted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    except DetrunError as exc:
        return _error(exc)
    except KeyboardInterrupt as exc:
        return _interrupted(exc)
    except _Crash as exc:
        return _internal(exc.__cause__ or exc)
    except Exception as exc:
        return _internal(exc)
    return _flushed(code if isinstance(code, int) else ExitCode.OK)


def run(app: Callable, args: Optional[Sequence[str]] = None) -> int:
    """Run the Typer app under this policy (SIGTERM raises Terminated meanwhile); return the exit code."""
    Terminated.received = False
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        with _rich_raises_broken_pipe():
            return _run(app, args)
    finally:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
