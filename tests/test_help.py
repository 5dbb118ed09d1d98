"""Every command's --help reads at 80 columns: no line wider, and short enough to take in at once.

The line budget: the head (usage line, a description of at most four lines, blank lines and section
titles) takes at most 10 lines; then each entry (argument, option, subcommand, --help) gets one line,
and one entry in three may wrap onto a second. An option whose help needs more belongs in README.md.
Whatever the formula allows, a command's help stays within one 80x40 terminal page.
"""

from __future__ import annotations

from typing import Iterator, List, Tuple

import pytest
import typer.main
from typer.testing import CliRunner

from detrun.cli import app

WIDTH, PAGE, HEAD = 80, 40, 10


def _commands() -> Iterator[Tuple[List[str], object]]:
    def walk(cmd, path):
        yield path, cmd
        for name, sub in sorted(getattr(cmd, "commands", {}).items()):
            yield from walk(sub, path + [name])

    yield from walk(typer.main.get_command(app), [])


COMMANDS = list(_commands())


def _help(path: List[str]) -> List[str]:
    out = CliRunner().invoke(app, [*path, "--help"], terminal_width=WIDTH, env={"COLUMNS": str(WIDTH)},
                             prog_name="detrun")
    assert out.exit_code == 0, out.output
    return out.output.splitlines()


def test_every_command_is_checked():
    names = {" ".join(path) for path, _ in COMMANDS}
    assert {"", "submit", "compare", "shrink", "timings", "baseline", "baseline set"} <= names and len(names) >= 14


@pytest.mark.parametrize("path, cmd", COMMANDS, ids=[" ".join(["detrun", *path]) for path, _ in COMMANDS])
def test_help_fits_80_columns_and_its_line_budget(path, cmd):
    lines = _help(path)
    wide = [line for line in lines if len(line) > WIDTH]
    assert not wide, f"wider than {WIDTH} columns: {wide}"
    entries = len(cmd.params) + len(getattr(cmd, "commands", {})) + 1  # + --help
    budget = min(PAGE, HEAD + entries + entries // 3)
    assert len(lines) <= budget, f"{len(lines)} lines, budget {budget}:\n" + "\n".join(lines)
    assert lines[0].startswith(f"Usage: detrun {' '.join(path)}".rstrip())  # the command's name, not python -m


def test_detrun_alone_prints_its_help(capsys):
    from tests.helpers import cli_main

    code, out, _ = cli_main(capsys)
    assert code == 2 and out.startswith("Usage: detrun [OPTIONS] COMMAND") and "submit" in out
