"""Wiring audit of backend sglang's rows: the wrappers SGLang ran are ones it planned for this batch, their
kernels fit them, and the path agrees with SGLang's rule for the forward mode, the flag and the mode.

No torch, no Ray. FB = python/sglang/srt/layers/attention/flashinfer_backend.py at SGLang 0.5.23 (read
from the released wheel). A row's `wiring` (kernels/backends/sglang.py) holds forward_mode, graph,
use_ragged, extend_no_prefix and the wrapper labels planned, ran and stale.
"""

from __future__ import annotations

from typing import List, Optional

from ..record.paths import PATH_DECODE, PATH_PAGED, PATH_RAGGED, PATH_RAGGED_PREFIX, family, path_of
from .audit import audit_kernels

EXTEND, DECODE, DLLM_EXTEND = "EXTEND", "DECODE", "DLLM_EXTEND"
RULE_VERSIONS = ("0.5.23",)  # the versions whose code sglang_rule was read from


def sglang_rule(version: str, forward_mode: str, mode: str, use_paged: bool, deterministic: bool) -> Optional[bool]:
    """use_ragged as SGLang's code sets it for this forward mode (mode: eager, or cudagraph meaning SGLang's
    graph path for the mode; piecewise CUDA graph off); None where it does not apply (decode)."""
    if version not in RULE_VERSIONS:
        raise ValueError(f"no wiring rule read for SGLang {version} (read: {', '.join(RULE_VERSIONS)})")
    if forward_mode == DECODE:
        return None  # decode wrappers only: FB:768-783 (graph), FB:1009-1023 (eager)
    if mode == "eager":
        # EXTEND and DLLM_EXTEND alike: FB:1058-1062, use_ragged = not enable_deterministic and not
        # is_in_tc_piecewise_cuda_graph() and not self.use_paged (self.use_paged read at FB:453)
        return not deterministic and not use_paged
    if forward_mode == DLLM_EXTEND:
        return not use_paged  # FB:794-802 (replay and capture planning: use_ragged=not self.use_paged)
    if forward_mode == EXTEND:
        return False  # the full prefill graph: FB:820-834 (use_ragged=False), FB:1342-1348 (capture)
    raise ValueError(f"forward mode {forward_mode!r}: no rule (EXTEND, DECODE, DLLM_EXTEND)")


_EXPECTED = {PATH_PAGED: {"paged"}, PATH_RAGGED: {"ragged"}, PATH_RAGGED_PREFIX: {"ragged", "paged"},
             PATH_DECODE: {"decode"}}


def wiring_problems(wiring: dict, use_paged: bool, deterministic: bool, mode: str, path: str,
                    kernels: List[str], version: str = "0.5.23") -> List[str]:
    """What is wrong with one row's wiring (empty: nothing)."""
    problems: List[str] = []
    fm = str(wiring.get("forward_mode"))
    ran = list(wiring.get("ran") or [])
    graph = wiring.get("graph")
    where = f"{fm} {'graph ' + str(graph) if graph else 'eager'}"
    for label in wiring.get("stale") or []:
        problems.append(f"{where}: wrapper {label} ran without a plan for this batch (planned: "
                        f"{', '.join(wiring.get('planned') or []) or 'none'})")
    if not ran:
        problems.append(f"{where}: no wrapper ran")
    # A graph cell SGLang's runner ran eager (graph None) follows the eager rule.
    rule = sglang_rule(version, fm, "cudagraph" if graph else "eager", use_paged, deterministic)
    if rule is not None and (path != PATH_PAGED) != rule:
        problems.append(f"{where}: path {path}, but SGLang {version}'s rule says use_ragged={rule} (flag "
                        f"{'on' if use_paged else 'off'}, deterministic {'on' if deterministic else 'off'})")
    use_ragged = wiring.get("use_ragged")
    if use_ragged is not None and rule is not None and bool(use_ragged) != rule:
        problems.append(f"{where}: forward_metadata.use_ragged={use_ragged}, but the rule says {rule}")
    ran_kinds = {family(label) for label in ran}
    if ran and path in _EXPECTED and ran_kinds != _EXPECTED[path]:
        problems.append(f"{where}: the row says path {path} but the wrappers that ran are {', '.join(ran)}")
    if ran:
        kernel_problem = audit_kernels(path_of(ran), kernels)
        if kernel_problem:
            problems.append(f"{where}: kernels do not fit the wrappers that ran ({', '.join(ran)}): {kernel_problem}")
    return problems
