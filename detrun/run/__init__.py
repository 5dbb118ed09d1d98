"""The Ray driver and the task: runner.py (driver), worker.py (the shard task), isolation.py and
inline.py, what a resume runs (resume.py), Ray's own output on the driver (raylog.py), the Jobs API
(jobs.py), cluster YAML checks (cluster.py), the FlashInfer JIT cache (jitcache.py), peak resources
(resources.py), shrink.py (re-runs a difference smaller) and the faults tests inject into a task
(faults.py); what submit and shrink are asked (requests.py) and submit itself: checks, a run from here,
or a Jobs API submission planned and sent, and a submitted run's status and logs (submission.py).

May import every other part except present and the CLI."""
