"""FlashInfer plan-info layouts per kind and version: which plan fields a row records, and "plan unknown".

A wrapper's `_plan_info` is the C++ `*PlanInfo::ToVector()` of its planner: a flat int64 vector whose
order is only defined by the flashinfer version that made it. A layout here was read from that version's
include/flashinfer/attention/scheduler.cuh (docs/flashinfer-versions.md); a vector of another length, a
kind or a version outside the versions read gives {"plan_unknown": why}, never a partial or empty plan,
so compare can say that it cannot explain a difference instead of treating the rows' plans as equal.
No torch here: the int workspace is read through a callable the backend passes.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Sequence, Tuple, Union

from packaging.version import Version

from ...record.plans import PLAN_UNKNOWN

FA2_PREFILL, FA3_PREFILL, DECODE = "fa2_prefill", "fa3_prefill", "decode"

# PrefillPlanInfo::ToVector() (FA2 prefill; also the tensor-core decode path's plan).
FA2_PLAN_FIELDS = (
    "padded_batch_size", "total_num_rows", "total_num_rows_offset", "cta_tile_q",
    "request_indices_offset", "qo_tile_indices_offset", "kv_tile_indices_offset",
    "merge_indptr_offset", "o_indptr_offset", "kv_chunk_size_ptr_offset", "v_offset", "s_offset",
    "block_valid_mask_offset", "enable_cuda_graph", "split_kv",
)
# PrefillPlanSM90Info::ToVector() (FA3 prefill).
FA3_PLAN_FIELDS = (
    "qo_tile_indices_offset", "qo_indptr_offset", "kv_indptr_offset", "qo_len_offset", "kv_len_offset",
    "head_indices_offset", "work_indptr_offset", "batch_indices_offset", "same_schedule_for_all_heads",
)
# DecodePlanInfo::ToVector() (the CUDA-core batch decode kernel).
DECODE_PLAN_FIELDS = (
    "padded_batch_size", "v_offset", "s_offset", "request_indices_offset", "kv_tile_indices_offset",
    "o_indptr_offset", "block_valid_mask_offset", "kv_chunk_size_ptr_offset", "enable_cuda_graph", "split_kv",
)
# Fields that decide the arithmetic; byte offsets into the workspace are left out.
FA2_PLAN_KEEP = ("padded_batch_size", "total_num_rows", "cta_tile_q", "enable_cuda_graph", "split_kv")
DECODE_PLAN_KEEP = ("padded_batch_size", "enable_cuda_graph", "split_kv")
CHUNK_OFFSET = "kv_chunk_size_ptr_offset"  # where the planner wrote kv_chunk_size in the int workspace


@dataclass(frozen=True)
class Layout:
    kind: str
    first: Version  # first and last version whose scheduler.cuh was read (inclusive)
    last: Version
    fields: Tuple[str, ...]  # ToVector() order
    keep: Tuple[str, ...]  # recorded in the row's plan
    chunk: bool  # kv_chunk_size is read from the pinned int workspace at CHUNK_OFFSET

    def covers(self, kind: str, version: Version) -> bool:
        return kind == self.kind and self.first <= version <= self.last


_READ = (Version("0.6.7.post3"), Version("0.7.2.post1"))  # identical layouts in both (docs/flashinfer-versions.md)
# FA3's vector holds workspace offsets and same_schedule_for_all_heads (work placement over CTAs,
# not the arithmetic of a tile): nothing kept, but its length is still checked.
LAYOUTS = (
    Layout(FA2_PREFILL, *_READ, FA2_PLAN_FIELDS, FA2_PLAN_KEEP, chunk=True),
    Layout(FA3_PREFILL, *_READ, FA3_PLAN_FIELDS, (), chunk=False),
    Layout(DECODE, *_READ, DECODE_PLAN_FIELDS, DECODE_PLAN_KEEP, chunk=True),
)


def prefill_kind(backend: str) -> str:
    """The layout kind of a prefill wrapper's plan, from its resolved `_backend` (fa2, fa3, ...)."""
    return f"{backend}_prefill"


def layout_for(kind: str, version: Union[str, Version]) -> Optional[Layout]:
    return _layout_for(kind, str(version))


@functools.lru_cache(maxsize=64)
def _layout_for(kind: str, version: str) -> Optional[Layout]:  # read for every cell's plan: parsed once
    v = Version(version)
    return next((layout for layout in LAYOUTS if layout.covers(kind, v)), None)


def read_plan(kind: str, version: Union[str, Version], vector: Optional[Sequence[int]],
              read_int32: Optional[Callable[[int], int]] = None) -> Dict[str, object]:
    """The kept fields of one plan vector (and kv_chunk_size, where read_int32 reads the pinned int
    workspace), or {"plan_unknown": "<kind, vector length, version>"} for a layout detrun does not know."""
    values = [int(x) for x in (vector if vector is not None else [])]
    layout = layout_for(kind, version)
    if layout is None:
        known = sorted({f"{lay.kind} {lay.first}..{lay.last}" for lay in LAYOUTS})
        return {PLAN_UNKNOWN: f"{kind} plan of {len(values)} values from flashinfer {version}: "
                              f"no layout known for this kind and version (known: {', '.join(known)})"}
    if len(values) != len(layout.fields):
        return {PLAN_UNKNOWN: f"{kind} plan of {len(values)} values from flashinfer {version}: "
                              f"its layout has {len(layout.fields)}"}
    named = dict(zip(layout.fields, values))
    plan: Dict[str, object] = {k: named[k] for k in layout.keep}
    if layout.chunk and read_int32 is not None:
        plan["kv_chunk_size"] = int(read_int32(named[CHUNK_OFFSET]))
    return plan
