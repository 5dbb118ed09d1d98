"""Where results live: the runs root and its files (runs.py), the driver's heartbeat (heartbeat.py); what
list, history, status, logs and timings are asked (requests.py). What a row and a manifest hold is the
record's (detrun.record); status.py only re-exports detrun.record.status.

May import: the base modules and detrun.record. No torch, no ray."""
