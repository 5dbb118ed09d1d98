"""scripts/gpu_parity.sh's plan: every run line loads as a job (its --set's), and every run its pairs and
compare lines name is one of the plan's runs (a typo there is a pair silently skipped on the device)."""

from __future__ import annotations

import re
from pathlib import Path

from detrun.spec.model import load_spec

SCRIPT = (Path(__file__).resolve().parents[1] / "scripts" / "gpu_parity.sh").read_text()


def _plan() -> dict:
    names = dict(re.findall(r"^([A-Z]+)=\"?([^\"\n#]*?)\"?\s*(?:#.*)?$", SCRIPT, re.M))
    runs = {}
    for block in re.findall(r"<<PLAN\n(.*?)\nPLAN", SCRIPT, re.S):
        for line in block.splitlines():
            line = re.sub(r"\$([A-Z]+)", lambda m: names[m.group(1)], line)
            run_id, job, *sets = line.split()
            runs[run_id] = (job, sets)
    return runs


def test_every_plan_line_loads_and_sglang_own_runs_on_the_parity_cells():
    specs = {run_id: load_spec(job, sets) for run_id, (job, sets) in _plan().items()}
    own = {r: s for r, s in specs.items() if s.backend == "sglang"}
    assert {(s.dtype, s.env.get("SGLANG_FLASHINFER_USE_PAGED"), s.sglang.deterministic_inference)
            for s in own.values()} == {("bf16", "1", False), ("bf16", "0", False), ("fp16", "1", False),
                                       ("bf16", None, True)}
    assert {s.sglang.version for s in own.values()} == {"0.5.23"}
    assert specs["model-paged-bf16"].backend == "flashinfer" and specs["model-paged-bf16"].sglang.version == "0.5.23"


def test_pairs_and_compare_name_only_planned_runs():
    runs = set(_plan())
    named = set()
    for line in re.findall(r"^pairs (\S+ [^\\\n]*(?:\\\n[^\\\n]*)*)", SCRIPT, re.M):
        named |= set(line.replace("\\\n", " ").split()[1:])
    for a, b in re.findall(r"\b([a-z][\w-]*-(?:bf16|fp16)):([a-z][\w-]*-(?:bf16|fp16))\b", SCRIPT):  # OWN:MODEL
        named |= {a, b}
    for d in ("bf16", "fp16"):
        named |= {f"fa2-paged-{d}", f"fa3-paged-{d}"} | {f"{t}-{d}" for t in ("sdpa-flash", "sdpa-cudnn", "flex")}
    assert "sglang-own-paged-bf16" in named and "model-paged-bf16" in named
    assert named <= runs, named - runs
