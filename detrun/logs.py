"""detrun's messages (a note, a skipped cache entry, a missed heartbeat): the library logs them through
logging.getLogger(__name__) and never prints; one handler on the "detrun" logger writes each message's text
alone to stderr, as the CLI has always shown them. detrun/__init__.py installs it, so that the command line,
a Ray task (whose stderr Ray forwards with -v) and a caller of the library all see the same lines; an
application with its own logging can remove it (quiet()) and let the records propagate."""

from __future__ import annotations

import logging
import sys

ROOT = "detrun"


class StderrHandler(logging.StreamHandler):
    """Writes to sys.stderr as it is at each message (a test's or CliRunner's capture, a redirected stderr)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


def to_stderr() -> None:
    """Install the one stderr handler on detrun's logger (once): "%(message)s", INFO and up, not propagated."""
    logger = logging.getLogger(ROOT)
    if not any(isinstance(h, StderrHandler) for h in logger.handlers):
        handler = StderrHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


def quiet() -> None:
    """Remove that handler: detrun's records then propagate to the application's own logging."""
    logger = logging.getLogger(ROOT)
    for handler in [h for h in logger.handlers if isinstance(h, StderrHandler)]:
        logger.removeHandler(handler)
    logger.propagate = True
