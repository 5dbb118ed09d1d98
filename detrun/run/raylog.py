"""Ray's own output on the driver: off the terminal unless asked for (`-v`), and then on stderr, so that
stdout holds detrun's output alone. It comes from three places:

- Ray's Python loggers ("ray.*"): the token-authentication notice at every local ray.init, "Unhandled
  error" of a cancelled task's result, ... With ray.init(configure_logging=False) they have no handler of
  their own, so Python's last-resort handler prints warnings and errors to stderr.
- The raylet's error messages (a worker that died: "... the OOM killer ...", "There are 1 retries
  remaining"), which Ray's listener thread on the driver prints to stdout, whatever log_to_driver says,
  through ray._private.worker.print_to_stdstream (looked up at each call, so replacing it routes them).
- The tasks' own stdout and stderr, which Ray forwards with log_to_driver=True (through the same function).
"""

from __future__ import annotations

import logging
from typing import Callable, Optional

from ..logs import StderrHandler

_original: Optional[Callable] = None


def ray_output(verbose: bool) -> bool:
    """Set where Ray's output goes (before ray.init, or again after it); returns ray.init's log_to_driver."""
    logger = logging.getLogger("ray")
    if verbose:
        logger.setLevel(logging.INFO)
        if not any(getattr(h, "detrun", False) for h in logger.handlers):
            handler = StderrHandler()
            handler.detrun = True  # type: ignore[attr-defined]
            logger.addHandler(handler)
    else:
        logger.setLevel(logging.CRITICAL)
    _route_printed(verbose)
    return verbose


def _route_printed(verbose: bool) -> None:
    """The raylet's messages and the tasks' output: on stderr when verbose, else dropped."""
    global _original
    import ray._private.worker as ray_worker

    if _original is None:
        _original = ray_worker.print_to_stdstream
    original = _original

    def to_stderr(data: dict, ignore_prefix: bool) -> None:
        original({**data, "is_err": True}, ignore_prefix)

    def dropped(data: dict, ignore_prefix: bool) -> None:
        return None

    ray_worker.print_to_stdstream = to_stderr if verbose else dropped
