"""detrun: a determinism regression runner for LLM attention kernels, on Ray.

The parts, each a subpackage (its __init__ says what it may import; tests/test_layout.py checks it):
record (what a run writes: rows, statuses, keys, fingerprints; every part reads it, it imports none),
spec (the job spec and its matrix), kernels (what runs on the GPU), run (the Ray driver and the task),
store (where results live), judge (the verdict), present (terminal, JUnit, HTML), api.py (the library's face:
one function per command) and cli.py (the command line over api.py and the presenters).
The base modules beside cli.py (errors, exitpolicy, stages, signals, envflags, paths) are shared by all
parts but record and import no part. Messages: the "detrun" logger, one stderr handler (logs.py)."""

from .logs import to_stderr

to_stderr()
