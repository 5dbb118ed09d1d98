"""A row's plan column: a JSON object of the plan fields that decide the arithmetic (which fields, per
FlashInfer version, is the kernels' knowledge: kernels/backends/plan_layouts.py). A plan that could not be
read holds PLAN_UNKNOWN (under a prefix for a wrapper's part, `prefix.plan_unknown`) with why, never a
partial plan: compare then says it cannot explain a difference."""

PLAN_UNKNOWN = "plan_unknown"  # the plan key that carries why a plan could not be read
