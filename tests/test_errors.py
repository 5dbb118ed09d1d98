"""One line of an exception (errors.first_line, failure_line): what every error row and message quotes."""

import pytest

from detrun.errors import failure_line, first_line


class _Message(Exception):
    message = "the short message\nmore"


@pytest.mark.parametrize("exc, options, line", [
    (RuntimeError("  boom in plan\nsecond line"), {}, "RuntimeError: boom in plan"),
    (RuntimeError(""), {}, "RuntimeError: "),
    (RuntimeError("\n \n"), {}, "RuntimeError: "),
    (RuntimeError("x" * 600), {"limit": 500}, "RuntimeError: " + "x" * 486),
    (RuntimeError("short"), {"limit": 300}, "RuntimeError: short"),
    (ValueError(" bad value \nwhy"), {"typed": False}, "bad value "),
    (ValueError(""), {"typed": False}, "ValueError"),
    (_Message("long\nform"), {"typed": False, "text": _Message.message}, "the short message"),
])
def test_first_line(exc, options, line):
    assert first_line(exc, **options) == line


def test_failure_line_is_the_last_line_named_the_cause():
    assert failure_line(RuntimeError("ray::task()\n  File x\n  ValueError: bad plan  \n\n")) == "ValueError: bad plan"
    assert failure_line(RuntimeError("")) == "RuntimeError"
    assert failure_line(RuntimeError("y" * 400)) == "y" * 300
