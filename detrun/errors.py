"""The error types the CLI maps to exit codes (the policy itself is exitpolicy.py)."""

EXIT_OK = 0
EXIT_MISMATCH = 1
EXIT_INFRA = 2
EXIT_INTERNAL = 3
EXIT_INTERRUPTED = 130


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


AUTH_HINT = ("set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN (the cluster's token, "
             "see `ray get-auth-token` on the head) in this shell")
