"""How a verdict is shown: the terminal (render.py), JUnit XML (junit.py), the HTML report (report.py).

May import: the base modules, detrun.judge, detrun.spec and detrun.store (to read). No torch, no ray."""
