"""docs/environment.md lists every DETRUN_* variable that detrun, the device scripts and the benches name."""

import re
from pathlib import Path

from tests.helpers import ROOT

NAME = re.compile(r"\bDETRUN_[A-Z0-9_]*[A-Z0-9]\b")


def test_every_detrun_variable_is_in_docs_environment():
    sources = [p for folder in ("detrun", "scripts", "bench", "tests") for p in (ROOT / folder).rglob("*")
               if p.suffix in (".py", ".sh") and p.name != Path(__file__).name]
    named = {m for p in sources for m in NAME.findall(p.read_text())}
    documented = set(NAME.findall((ROOT / "docs" / "environment.md").read_text()))
    assert "DETRUN_PG_TIMEOUT_S" in named and "DETRUN_TEST_SLEEP_S" in named
    assert named <= documented, f"not in docs/environment.md: {sorted(named - documented)}"


def test_the_files_docs_environment_names_exist():
    """The "read by" column names the modules that read each variable: a moved module must be followed."""
    named = set(re.findall(r"`((?:detrun|scripts|bench|tests)/[\w/.-]+\.(?:py|sh))`",
                           (ROOT / "docs" / "environment.md").read_text()))
    assert "detrun/run/runner.py" in named
    assert not [f for f in named if not (ROOT / f).exists()]
