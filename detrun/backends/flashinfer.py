"""FlashInfer prefill with SGLang's wrapper selection (imported only inside a GPU task).

Mirrors FlashInferAttnBackend: one float workspace per backend, `use_paged` read in __init__ before
it is allocated; eager wrappers built once and re-planned per batch; CUDA-graph wrappers with fixed
int32 index buffers, plan() outside capture, warm-up on a side stream, capture of run(), replay.
The ragged path over a batch with a cached prefix is ragged (new tokens, causal) + paged (prefix,
non-causal) + merge_state, as SGLang's forward_extend does.
"""

from __future__ import annotations

import json
import math
from typing import Callable, Dict, List, Set, Tuple

import torch
from packaging.version import Version

from ..inputs import DTYPES, Batch, PageTable
from .base import (
    PATH_PAGED,
    PATH_RAGGED_PREFIX,
    AttentionBackend,
    KnownBug,
    Output,
    Unsupported,
    capture_and_replay,
    timed,
)
from .plan_layouts import FA2_PLAN_FIELDS, FA2_PLAN_KEEP, prefill_kind, read_plan  # noqa: F401 (re-exported)

# PR #5176 (block_valid_mask for padded CUDA-graph launches) is not in 0.6.7.post3.
PADDED_CTA_FIX = Version("0.7.2")
# FA2 + CUDA graph + fixed_split_size: the warm-up run never finished on the H200 (docs/gpu-results.md).
FIXED_SPLIT_GRAPH_HANG_SEEN = Version("0.6.7.post3")


class FlashInferBackend(AttentionBackend):
    name = "flashinfer"

    def __init__(self, spec, device, stages=None):
        super().__init__(spec, device, stages)  # reads SGLANG_FLASHINFER_USE_PAGED first, as SGLang does
        import flashinfer  # the task's resolve_backend imported it first (timed there)

        self.fi = flashinfer
        self.version = Version(flashinfer.__version__)
        self.opts = spec.flashinfer
        self.dtype = DTYPES[spec.dtype]
        self.scale = 1.0 / math.sqrt(spec.head_dim)
        self.workspace = torch.empty(self.opts.workspace_mb << 20, dtype=torch.uint8, device=device)
        self.paged_backend = self.opts.backend
        self.ragged_backend = self.opts.ragged_backend or self.opts.backend
        layout = self.opts.kv_layout
        self.eager_paged = flashinfer.BatchPrefillWithPagedKVCacheWrapper(
            self.workspace, layout, backend=self.paged_backend)
        self.eager_ragged = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(
            self.workspace, layout, backend=self.ragged_backend)
        self._caches: Dict[int, Tuple[torch.Tensor, torch.Tensor]] = {}
        self._graph_builds: Dict[Tuple[str, str], tuple] = {}
        self._profiled_plans: Set[Tuple[str, str]] = set()  # (path, plan JSON) whose kernels this task recorded

    # -- planning
    def _split_args(self) -> dict:
        return dict(fixed_split_size=self.opts.fixed_split_size, disable_split_kv=self.opts.disable_split_kv)

    def _plan_paged(self, w, batch: Batch, table: PageTable, causal: bool) -> None:
        s = self.spec
        # Indices on the device, as SGLang passes them: plan() copies host indices synchronously.
        w.plan(batch.qo_indptr, table.indptr, table.indices_on(self.device), table.last_page_len,
               s.heads.qo, s.heads.kv, s.head_dim, s.page_size, causal=causal, sm_scale=self.scale,
               q_data_type=self.dtype, kv_data_type=self.dtype, **self._split_args())

    def _plan_ragged(self, w, batch: Batch) -> None:
        s = self.spec
        w.plan(batch.qo_indptr, batch.qo_indptr, s.heads.qo, s.heads.kv, s.head_dim,
               causal=s.causal, sm_scale=self.scale, q_data_type=self.dtype, kv_data_type=self.dtype,
               **self._split_args())

    def _cache(self, batch: Batch) -> Tuple[torch.Tensor, torch.Tensor]:
        if self.opts.kv_layout == "NHD":
            return batch.k_cache, batch.v_cache
        key = id(batch)
        if key not in self._caches:
            self._caches[key] = (batch.k_cache.transpose(1, 2).contiguous(),
                                 batch.v_cache.transpose(1, 2).contiguous())
        return self._caches[key]

    @staticmethod
    def plan_of(w, version) -> Dict[str, object]:
        """The wrapper's backend and its plan fields as this flashinfer version lays them out
        (plan_layouts.read_plan: a layout detrun cannot read is recorded as plan_unknown)."""
        backend = getattr(w, "_backend", "?")
        pinned = getattr(w, "_pin_memory_int_workspace_buffer", None)
        read = None if pinned is None else (lambda off: int(pinned[off : off + 4].view(torch.int32)[0]))
        return {"backend": backend, **read_plan(prefill_kind(backend), version, w._plan_info, read)}

    # -- wrappers for one batch and path; returns (planned wrappers, run closure)
    def _graph_paged(self, batch: Batch, table: PageTable):
        dev = self.device
        return self.fi.BatchPrefillWithPagedKVCacheWrapper(
            self.workspace, self.opts.kv_layout, use_cuda_graph=True,
            qo_indptr_buf=batch.qo_indptr.to(dev), paged_kv_indptr_buf=table.indptr.to(dev),
            paged_kv_indices_buf=torch.zeros(max(1, table.indices.numel()), dtype=torch.int32, device=dev),
            paged_kv_last_page_len_buf=table.last_page_len.to(dev), backend=self.paged_backend)

    def _graph_ragged(self, batch: Batch):
        dev = self.device
        return self.fi.BatchPrefillWithRaggedKVCacheWrapper(
            self.workspace, self.opts.kv_layout, use_cuda_graph=True,
            qo_indptr_buf=batch.qo_indptr.to(dev), kv_indptr_buf=batch.qo_indptr.to(dev),
            backend=self.ragged_backend)

    def _build(self, batch: Batch, path: str, graph: bool):
        """(wrappers, plan them all, run closure) for one batch and path.

        CUDA-graph wrappers own fixed buffers that a captured graph reads, so they are built once per
        (case, path) and re-planned before each replay, as SGLang keeps its capture-time wrappers.
        """
        key = (batch.case, path)
        if graph and key in self._graph_builds:
            return self._graph_builds[key]
        if path == PATH_PAGED:
            paged = self._graph_paged(batch, batch.full) if graph else self.eager_paged
            built = ([paged], lambda: self._plan_paged(paged, batch, batch.full, self.spec.causal),
                     self._paged_run(paged, batch))
        else:
            ragged = self._graph_ragged(batch) if graph else self.eager_ragged
            ragged_run = self._ragged_run(ragged, batch)
            plan_ragged = lambda: self._plan_ragged(ragged, batch)  # noqa: E731
            built = [ragged], plan_ragged, ragged_run
        if path == PATH_RAGGED_PREFIX:
            # The paged wrapper serves the prefix here (SGLang's prefill_wrapper_paged), re-planned per batch.
            prefix = self._graph_paged(batch, batch.prefix) if graph else self.eager_paged
            prefix_run = self._paged_run(prefix, batch)

            def plan_both():
                plan_ragged()
                self._plan_paged(prefix, batch, batch.prefix, causal=False)

            def run():
                o1, s1 = ragged_run()
                o2, s2 = prefix_run()
                return self.fi.merge_state(o1, s1, o2, s2)

            built = [ragged, prefix], plan_both, run
        if graph:
            self._graph_builds[key] = built
        return built

    def _prepare(self, batch: Batch, path: str, graph: bool):
        wrappers, plan, run = self._build(batch, path, graph)
        plan()
        return wrappers, run

    def _outputs(self, batch: Batch):
        tokens = batch.q.shape[0]
        out = torch.full((tokens, self.spec.heads.qo, self.spec.head_dim), float("nan"),
                         dtype=self.dtype, device=self.device)
        lse = torch.full((tokens, self.spec.heads.qo), float("nan"), dtype=torch.float32, device=self.device)
        return out, lse

    def _paged_run(self, w, batch: Batch) -> Callable[[], Tuple[torch.Tensor, torch.Tensor]]:
        out, lse = self._outputs(batch)
        cache = self._cache(batch)
        return lambda: w.run(batch.q, cache, out=out, lse=lse, return_lse=True)

    def _ragged_run(self, w, batch: Batch) -> Callable[[], Tuple[torch.Tensor, torch.Tensor]]:
        out, lse = self._outputs(batch)
        return lambda: w.run(batch.q, batch.k, batch.v, out=out, lse=lse, return_lse=True)

    # -- the protocol
    def _check_known_bugs(self, mode: str) -> None:
        """Cells that crash or hang the GPU on this flashinfer: KnownBug (run only in an isolated worker)."""
        if self.force_known_bugs or mode != "cudagraph" or "fa2" not in (self.paged_backend, self.ragged_backend):
            return
        if self.opts.disable_split_kv and self.version < PADDED_CTA_FIX:
            raise KnownBug(
                f"flashinfer {self.version}: FA2 + CUDA graph + disable_split_kv launches padded CTAs "
                "without block_valid_mask (flashinfer #4002, fixed by PR #5176): illegal memory access")
        if self.opts.fixed_split_size and self.version <= FIXED_SPLIT_GRAPH_HANG_SEEN:
            raise KnownBug(
                f"flashinfer {self.version}: FA2 + CUDA graph + fixed_split_size={self.opts.fixed_split_size}: "
                "the warm-up run hung (never completed) on an H200")

    def forward(self, batch: Batch, mode: str, repeat: int = 0) -> Output:
        self._check_known_bugs(mode)
        path = self.path_for(mode, batch)
        graph = mode == "cudagraph"
        try:
            # Host time of plan(): its copies queue behind the previous cell's digests, not waited for.
            (wrappers, run), plan_ms = timed(lambda: self._prepare(batch, path, graph), self.device, sync=False)
            self.stages.add("plan", plan_ms / 1e3)
        except (RuntimeError, ValueError) as exc:
            msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            if "Buffer overflow" in msg:
                raise RuntimeError(f"{msg} (raise flashinfer.workspace_mb, now {self.opts.workspace_mb})") from exc
            if graph:
                raise Unsupported(f"plan() refused under CUDA graph: {msg}") from exc
            raise
        plans = [self.plan_of(w, self.version) for w in wrappers]
        plan = dict(plans[0])  # the main wrapper's fields, then the prefix wrapper's as prefix.*
        if len(plans) > 1:
            plan.update({f"prefix.{k}": v for k, v in plans[1].items()})
        (out, lse), timer = self._execute(run, mode, key=(batch.case, path), plan=plan)
        profiled = self._profiled(repeat, path, plan)
        if profiled and not graph:  # the profiled run below writes the same buffers again
            out, lse = out.clone(), lse.clone()
        attn = "+".join(sorted({str(p["backend"]) for p in plans}))
        kernels = self._kernels(run, graph) if profiled else []
        return Output(out=out, lse=lse, path=path, attn=attn, plan=plan, kernels=kernels,
                      plan_ms=plan_ms, timer=timer)

    def _profiled(self, repeat: int, path: str, plan: Dict[str, object]) -> bool:
        """Profile this cell? Only the first cell of each distinct (path, plan) in the task, within the first
        profile_repeats repeats: the kernels are a function of the path and plan (compare audits per plan)."""
        limit = self.opts.profile_repeats
        if not self.opts.profile_kernels or (limit is not None and repeat >= limit):
            return False
        key = (path, json.dumps(plan, sort_keys=True))  # the plan as the row records it
        if key in self._profiled_plans:
            return False
        self._profiled_plans.add(key)
        return True

    def _kernels(self, run, graph: bool) -> List[str]:
        """CUDA kernel names of one more run (eager) or capture+replay (graph) of a cell _profiled picked."""
        from torch.profiler import ProfilerActivity, profile

        with self.stages("profile"):  # the profiler's start, one more run, trace parsing
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                if graph:
                    capture_and_replay(run, self.device)
                else:
                    run()
                torch.cuda.synchronize(self.device)
            names = {e.name for e in prof.events() if str(e.device_type).endswith("CUDA")}
        return sorted(n[:300] for n in names)
