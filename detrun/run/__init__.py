"""The Ray driver and the task: runner.py (driver), worker.py (the shard task), isolation.py and
inline.py, what a resume runs (resume.py), Ray's own output on the driver (raylog.py), the Jobs API
(jobs.py), cluster YAML checks (cluster.py), the FlashInfer JIT cache (jitcache.py), peak resources
(resources.py), shrink.py (re-runs a difference smaller) and the faults tests inject into a task
(faults.py); what submit and shrink are asked (requests.py) and submit itself: checks, a run from here,
or a Jobs API submission planned and sent, and a submitted run's status and logs (submission.py).

Driver and task. In a Ray task run worker.py (ShardRunner, run_shard: the shard and its cells), collector.py
and jitcache.py; isolation.py (which cells run alone, and the books the driver keeps of them), resources.py
(peaks) and faults.py serve both sides. These never import the driver's modules (runner, submission, jobs,
shrink, inline, resume, raylog, cluster) nor ray: runner.shard_task and cell_task, the ray.remote functions,
are the one seam, calling worker.run_shard (tests/test_layout.py checks the direction). The command entry
points are gathered in detrun/api.py.

May import every other part except present and the CLI."""
