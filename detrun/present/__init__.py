"""How a Verdict is shown: the terminal (render.py), JUnit XML (junit.py), the HTML report (report.py), each
from the Verdict alone (compare's and report's files are written by detrun/api.py); the plain lines of the
other commands (lines.py); --format json of compare, list, status and history (jsondoc.py).

May import: the base modules, detrun.judge, detrun.spec and detrun.store (to read). No torch, no ray."""
