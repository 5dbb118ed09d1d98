"""Where results live, split by what each part of the runs root owns: file access, whole-or-nothing writes
and storage errors (files.py); run ids, manifests, timings and Jobs API records (manifests.py); the rows
files (rows.py); tensor blobs by digest (blobs.py). RunStore (runs.py) is the runs under one root, RunSet
(runset.py) runs from several places; both implement the reader the judge takes (RunReader, runs.py). Also the
driver's heartbeat (heartbeat.py) and what list, history, status, logs and timings are asked (requests.py).
What a row and a manifest hold is the record's (detrun.record); status.py only re-exports
detrun.record.status.

May import: the base modules and detrun.record. No torch, no ray."""
