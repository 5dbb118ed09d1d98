"""A pytest plugin (conftest.py loads it): once pytest has reported and knows its exit status, a test process
that imported SGLang ends with that status without the interpreter's teardown.

SGLang's import chain loads native modules (apache-tvm-ffi, sentencepiece's SWIG wrapper, pyzmq) beside
torch, Ray and pyarrow; their teardown at interpreter exit crashed once in CI (SIGSEGV, exit 139) after all 39
slow tests had passed and pytest had printed its summary. What the tests test is over by then, so the
process leaves with pytest's status (`os._exit`). A crash while a test runs still ends the process as before.
"""

from __future__ import annotations

import os
import sys

import pytest

_SESSION: list = []


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    _SESSION.append(session)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    if "sglang" not in sys.modules or not _SESSION:
        return
    status = int(_SESSION[-1].exitstatus)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
