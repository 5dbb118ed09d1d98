"""The verdict: rows read as columns (columnar.py), compared (compare.py, diffstats.py, audit.py: a Comparison)
and judged once against the claims (claims.py, findings.judge) into the frozen Verdict every presenter reads
(verdict.py); baselines (baseline.py) and history (history.py); what compare, report and baseline are asked
(requests.py).

May import: the base modules, detrun.record, detrun.spec and detrun.store. No torch, no ray."""
