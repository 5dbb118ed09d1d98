"""Where results live: the runs root and its files (runs.py), the statuses rows and runs are stored with
(status.py), the driver's heartbeat (heartbeat.py).

May import: the base modules only. No torch, no ray."""
