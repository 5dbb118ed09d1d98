"""Wiring audit of backend sglang's rows: the wrappers SGLang ran are ones it planned for this batch, their
kernels fit them, and the path agrees with SGLang's rule for the forward mode, the flag and the mode.

No torch, no Ray. The rule is per release (spec/sglang_releases.py: every release 0.5.11 .. 0.5.23, read from the
released wheels; releases that share code share a Wiring). FB = python/sglang/srt/layers/attention/
flashinfer_backend.py; LINES[version][anchor] is the line at that release. A row's `wiring`
(kernels/backends/sglang.py) holds forward_mode, graph, use_ragged, extend_no_prefix and the wrapper labels
planned, ran and stale.
"""

from __future__ import annotations

from typing import List, Optional

from ..record.paths import PATH_DECODE, PATH_PAGED, PATH_RAGGED, PATH_RAGGED_PREFIX, family, path_of
from ..spec.sglang_releases import RELEASES, wiring_of
from .audit import audit_kernels

EXTEND, DECODE, DLLM_EXTEND = "EXTEND", "DECODE", "DLLM_EXTEND"
RULE_VERSIONS = RELEASES  # the releases whose code sglang_rule was read from


def sglang_rule(version: str, forward_mode: str, mode: str, use_paged: bool, deterministic: bool) -> Optional[bool]:
    """use_ragged as SGLang's code at `version` sets it for this forward mode (mode: eager, or cudagraph meaning
    SGLang's graph path for the mode; piecewise CUDA graph off); None where it does not apply (decode)."""
    if version not in RULE_VERSIONS:
        raise ValueError(f"no wiring rule read for SGLang {version} (read: {', '.join(RULE_VERSIONS)})")
    wiring = wiring_of(version)
    if forward_mode == DECODE:
        return None  # decode wrappers only, eager and graph (LINES: eager_decode_split, graph_decode_split)
    # eager, EXTEND and DLLM_EXTEND alike (LINES eager_rule): use_ragged = not enable_deterministic and not
    # <wiring.piecewise>() and not self.use_paged (self.use_paged read once in __init__, LINES use_paged)
    eager = not deterministic and not use_paged
    if mode == "eager":
        return eager
    if forward_mode == DLLM_EXTEND:
        return not use_paged  # LINES graph_dllm: use_ragged=not self.use_paged (capture and replay / out_graph)
    if forward_mode == EXTEND:
        # 0.5.15 and later: the full prefill graph, use_ragged=False (LINES graph_extend). Before: no plain-EXTEND
        # graph (capture raises "Invalid mode", LINES no_graph_mode): SGLang's runner prefills eager.
        return False if wiring.extend_graph else eager
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
