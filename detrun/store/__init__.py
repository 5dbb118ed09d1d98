"""Where results live: the runs root and its files (runs.py), the statuses rows and runs are stored with
(status.py), the driver's heartbeat (heartbeat.py); what list, history, status, logs and timings are asked
(requests.py).

May import: the base modules only. No torch, no ray."""
