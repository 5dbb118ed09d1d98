"""The attention backends: the interface (base.py), a torch reference (reference.py) and FlashInfer
(flashinfer.py, imported only inside a task). plan_layouts.py reads FlashInfer's plan per version (no
torch); the plan's unknown marker it writes is the record's (detrun.record.plans)."""
