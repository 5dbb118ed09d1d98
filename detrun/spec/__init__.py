"""The job spec and its matrix: the pydantic model (model.py), the cells and shards it expands to
(matrix.py), generated cases (sweep.py) and SGLang's profiles (sglang.py).

May import: the base modules (detrun.errors, envflags, ...) and detrun.record (keys). No torch, no ray, no
other part."""
