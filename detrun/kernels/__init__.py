"""What runs on the GPU: the attention backends (backends/), the inputs a cell draws (inputs.py), the
digest of its outputs (digest.py, digest_triton.py, their constants in splitmix.py) and the environment a
task records (envinfo.py).

May import: the base modules and detrun.spec. Never detrun.run, never ray. This file and paths.py and
backends/plan_layouts.py import no torch: the judge imports those two."""
