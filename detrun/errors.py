"""detrun's exit codes (ExitCode), the error types the CLI maps to them (the policy itself is exitpolicy.py),
and an exception's one-line summary (first_line; failure_line for a Ray error).
"""

from __future__ import annotations

from enum import IntEnum
from typing import Optional


class ExitCode(IntEnum):
    """What a detrun command exits with."""

    OK = 0  # every claim held (or a command that judges nothing succeeded)
    MISMATCH = 1  # a determinism failure: a broken claim, an unexplained difference, a missing cell
    USAGE = 2  # usage, input or environment error (DetrunError)
    INTERNAL = 3  # a crash: never 1
    INTERRUPTED = 130  # Ctrl-C or SIGTERM


class DetrunError(Exception):
    """A usage or infrastructure error: one line for the user, exit code 2."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so that a run in progress is marked incomplete (exit 130).

    Ray's waits turn it into a plain KeyboardInterrupt, so the handler also sets `received`.
    """

    received = False


def interruption(exc: BaseException) -> str:
    """How the command was interrupted, for the manifest's failures and the line on stderr."""
    sigterm = isinstance(exc, Terminated) or Terminated.received
    return "interrupted (SIGTERM)" if sigterm else "interrupted (Ctrl-C)"


def mark_incomplete(exc: BaseException, run_id: str, runs_root: str) -> None:
    """Note on an interruption that it left run_id marked incomplete (exitpolicy says so; an interruption
    without the note created or changed no run)."""
    exc.detrun_incomplete = (f"run {run_id} is marked incomplete; finish it with: "  # type: ignore[attr-defined]
                             f"detrun submit --resume {run_id} --runs-root {runs_root}")


def incomplete_note(exc: BaseException) -> str:
    """What mark_incomplete noted on exc ('' when nothing)."""
    return getattr(exc, "detrun_incomplete", "")


AUTH_HINT = ("set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN (the cluster's token, "
             "see `ray get-auth-token` on the head) in this shell")


def first_line(exc: BaseException, *, typed: bool = True, limit: Optional[int] = None,
               text: Optional[str] = None) -> str:
    """The first line of an exception's message (text: that message instead of str(exc)), for one-line reports.

    typed: "Type: line" ("Type: " when the message is empty); else the line alone, or the type's name when the
    message is empty. limit: the result cut to that many characters.
    """
    lines = (str(exc) if text is None else text).strip().splitlines()
    if typed:
        line = f"{type(exc).__name__}: {lines[0] if lines else ''}"
    else:
        line = lines[0] if lines else type(exc).__name__
    return line if limit is None else line[:limit]


def failure_line(exc: BaseException, limit: int = 300) -> str:
    """The line of a Ray error that names the cause: the last non-blank line of its message (its traceback's
    last), stripped, or the type's name when there is none; cut to `limit` characters."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return lines[-1][:limit] if lines else type(exc).__name__
