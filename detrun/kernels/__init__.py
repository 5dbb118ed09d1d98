"""What runs on the GPU: the attention backends (backends/), the inputs a cell draws (inputs.py), the
digest of its outputs (digest.py, digest_triton.py, their constants in splitmix.py) and the environment a
task records (envinfo.py).

May import: the base modules, detrun.record and detrun.spec. Never detrun.run, never ray. paths.py only
re-exports detrun.record.paths."""
