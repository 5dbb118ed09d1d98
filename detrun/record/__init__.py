"""The record: what a run writes and every other part reads. A row's columns (rows.py: Row, SCHEMA, the
migration of rows stored before a column was added), its statuses and a run's (status.py), its key and the
`name#i` copies in it (keys.py), the wrapper paths (paths.py) and the plan's unknown marker (plans.py), the
environment fingerprint (fingerprint.py).

May import: nothing of detrun outside record/. No torch, no ray."""
