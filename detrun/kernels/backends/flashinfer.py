"""FlashInfer prefill with SGLang's wrapper selection (imported only inside a GPU task).

Mirrors FlashInferAttnBackend: one float workspace per backend, `use_paged` read in __init__ before
it is allocated; eager wrappers built once and re-planned per batch; CUDA-graph wrappers with fixed
int32 index buffers, plan() outside capture, warm-up on a side stream, capture of run(), replay.
The ragged path over a batch with a cached prefix is ragged (new tokens, causal) + paged (prefix,
non-causal) + merge_state, as SGLang's forward_extend does. Decode (forward_decode) is SGLang 0.5.10's:
one eager BatchDecodeWithPagedKVCacheWrapper re-planned per batch, and CUDA graphs captured once per
capture batch size and replayed, re-planned, for every batch padded to that size. Under an SGLang 0.5.23
profile a CUDA-graph prefill is SGLang's full prefill graph: paged, no split arguments, planned over the graph's
request slots with total_num_rows fixed by its first capture, on a workspace of its own. (FB:, CG: cite SGLang
0.5.10's flashinfer_backend.py and cuda_graph_runner.py by line unless 0.5.23 is named; spec/sglang.py names them.)
"""

from __future__ import annotations

import math
from functools import partial
from typing import Callable, Dict, Optional, Set, Tuple

import torch
from packaging.version import Version

from ...errors import first_line
from ...spec.sglang import decode_tensor_cores
from ..inputs import DTYPES, Batch, PageTable
from . import base as _base
from .base import (
    PATH_DECODE,
    PATH_PAGED,
    PATH_RAGGED_PREFIX,
    AttentionBackend,
    KnownBug,
    Output,
    Unsupported,
    timed,
)
from .plan_layouts import DECODE, FA2_PLAN_FIELDS, FA2_PLAN_KEEP, prefill_kind, read_plan  # noqa: F401 (re-exported)
from .profiling import KernelProfiling
from .staging import PlanStaging

# PR #5176 (block_valid_mask for padded CUDA-graph launches) is not in 0.6.7.post3.
PADDED_CTA_FIX = Version("0.7.2")
# FA2 + CUDA graph + fixed_split_size: the warm-up run never finished on the H200 (docs/gpu-results.md).
FIXED_SPLIT_GRAPH_HANG_SEEN = Version("0.6.7.post3")


DECODE_BACKEND = "fa2"  # SGLang's decode_backend (flashinfer_backend.py:130 at 0.5.10)
# flashinfer 0.6.7.post3 flashinfer/decode.py, the calls below are made against:
#   BatchDecodeWithPagedKVCacheWrapper(float_workspace_buffer, kv_layout="NHD", use_cuda_graph=False,
#       use_tensor_cores=False, paged_kv_indptr_buffer=None, paged_kv_indices_buffer=None,
#       paged_kv_last_page_len_buffer=None, backend="auto", jit_args=None)                          (:661)
#   .plan(indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim, page_size,
#       pos_encoding_mode="NONE", window_left=-1, logits_soft_cap=None, q_data_type="float16",
#       kv_data_type=None, o_data_type=None, data_type=None, sm_scale=None, rope_scale=None,
#       rope_theta=None, non_blocking=True, block_tables=None, seq_lens=None, fixed_split_size=None,
#       disable_split_kv=False)                                                                       (:825)
#       (fixed_split_size with use_tensor_cores=False raises ValueError; CUDA-core decode ignores
#       disable_split_kv; under CUDA graph len(last_page_len) must be the buffers' batch size)
#   .run(q, paged_kv_cache, *args, q_scale=None, k_scale=None, v_scale=None, out=None, lse=None,
#       return_lse=False, enable_pdl=None, window_left=None, sinks=None, q_len_per_req=1, ...)      (:1214)
#   fast_decode_plan(self, indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim, page_size,
#       pos_encoding_mode="NONE", window_left=-1, logits_soft_cap=None, q_data_type=None, kv_data_type=None,
#       data_type=None, sm_scale=None, rope_scale=None, rope_theta=None, non_blocking=True,
#       fixed_split_size=None, disable_split_kv=False, global_override_indptr_cpu=None)           (:2765)
#       (under CUDA graph it copies nothing into the wrapper's buffers: the caller has written them)


class FlashInferBackend(KernelProfiling, AttentionBackend):
    name = "flashinfer"
    one_session = True  # a profiled cell's own run is recorded (kernel_session.py), not one more run

    def __init__(self, spec, device, stages=None, flags=None):
        super().__init__(spec, device, stages, flags)  # use_paged first, as SGLang reads it first
        import flashinfer  # the task's resolve_backend imported it first (timed there)

        self.fi = flashinfer
        self.version = Version(flashinfer.__version__)
        self.opts = spec.flashinfer
        self.dtype = DTYPES[spec.dtype]
        # Under an SGLang profile every paged plan takes page size 1 over token slots, as SGLang's do whatever its
        # page_size (0.5.23 FB:2395-2403 prefill, FB:1840-1866 decode; 0.5.10 FB:1501, FB:1152, FB:1171): the
        # planner's kv lengths, min chunk (128 / page_size) and kv_chunk_size are then SGLang's.
        self.plan_page = 1 if spec.sglang is not None else spec.page_size
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
        # plan()'s pinned buffers, some per wrapper
        self.staging = PlanStaging(self.stages, device.type == "cuda", device=device if device.type == "cuda" else None)
        # Decode: chosen once here, as SGLang's should_use_tensor_core runs in FlashInferAttnBackend.__init__.
        self.decode_tensor_cores = decode_tensor_cores(
            self.opts.decode.tensor_cores, self.flags.tensor_core, spec.heads.qo, spec.heads.kv, spec.dtype)
        self._eager_decode = None  # built on first use (SGLang's self.decode_wrappers[0])
        self._decode_graphs: Dict[int, "_DecodeGraph"] = {}  # capture batch size -> its wrapper and buffers
        self._decode_kv: Optional["_StaticKV"] = None  # the KV pool every decode graph reads
        self._full_workspace: Optional[torch.Tensor] = None  # a full prefill graph's own (0.5.23 FB:1280-1282)

    # -- planning
    def _split_args(self, graph: bool = False) -> dict:
        """A prefill plan's split arguments: the knobs, except in SGLang 0.5.23's full prefill graph, whose plan
        gets none (0.5.23 FB:827-838, FB:2395-2414): FlashInfer splits the KV as it chooses."""
        if graph and self.prefill_graph is not None:
            return dict(fixed_split_size=None, disable_split_kv=False)
        return dict(fixed_split_size=self.opts.fixed_split_size, disable_split_kv=self.opts.disable_split_kv)

    def _slots(self, graph: bool) -> int:
        """Staging buffers of a wrapper: an eager one is re-planned every cell (one per cell in flight, and the
        one planned now); a prefill graph's only once per repeat of its case."""
        return 1 if graph else self.in_flight + 1

    def _plan_paged(self, w, batch: Batch, table: PageTable, causal: bool, graph: bool) -> None:
        qo, kv, last = batch.qo_indptr, table.indptr, table.last_page_len
        if graph and self.prefill_graph is not None:
            qo, kv, last = _slot_padded(qo, kv, last, self.prefill_graph.slots)
        # Indices on the device, as SGLang passes them: plan() copies host indices synchronously.
        self._paged_plan(w, qo, kv, table.indices_on(self.device), last, causal, graph)

    def _paged_plan(self, w, qo_indptr, kv_indptr, indices, last_page_len, causal: bool, graph: bool) -> None:
        s = self.spec
        with self.staging.plan(w, self._slots(graph)):
            w.plan(qo_indptr, kv_indptr, indices, last_page_len, s.heads.qo, s.heads.kv, s.head_dim, self.plan_page,
                   causal=causal, sm_scale=self.scale, q_data_type=self.dtype, kv_data_type=self.dtype,
                   **self._split_args(graph))

    def _plan_ragged(self, w, batch: Batch, graph: bool) -> None:
        s = self.spec
        with self.staging.plan(w, self._slots(graph)):
            w.plan(batch.qo_indptr, batch.qo_indptr, s.heads.qo, s.heads.kv, s.head_dim,
                   causal=s.causal, sm_scale=self.scale, q_data_type=self.dtype, kv_data_type=self.dtype,
                   **self._split_args(graph))

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
        return {"backend": backend, **read_plan(prefill_kind(backend), version, w._plan_info, _pinned_reader(w))}

    # -- wrappers for one batch and path; returns (planned wrappers, run closure)
    def _graph_paged(self, batch: Batch, table: PageTable):
        if self.prefill_graph is not None:
            return self._full_graph_paged(table)
        dev = self.device
        return self.fi.BatchPrefillWithPagedKVCacheWrapper(
            self.workspace, self.opts.kv_layout, use_cuda_graph=True,
            qo_indptr_buf=batch.qo_indptr.to(dev), paged_kv_indptr_buf=table.indptr.to(dev),
            paged_kv_indices_buf=torch.zeros(max(1, table.indices.numel()), dtype=torch.int32, device=dev),
            paged_kv_last_page_len_buf=table.last_page_len.to(dev), backend=self.paged_backend)

    def _full_graph_paged(self, table: PageTable):
        """SGLang 0.5.23's full-prefill-graph wrapper (FB:1249-1313): on the graph's own workspace, sized as SGLang
        sizes it (FB:1205-1247), with buffers for its request slots, planned first for SGLang's first capture (its
        largest bucket, captured first: prefill_cuda_graph_runner.py:1715), which fixes every later plan's
        total_num_rows (flashinfer's _max_total_num_rows); each batch is then planned padded to the slots."""
        g, s, dev = self.prefill_graph, self.spec, self.device
        assert g is not None
        if self._full_workspace is None:
            num_sm = torch.cuda.get_device_properties(dev).multi_processor_count if dev.type == "cuda" else 1
            self._full_workspace = torch.empty(g.workspace_bytes(s.heads.qo, s.heads.kv, s.head_dim, num_sm),
                                               dtype=torch.uint8, device=dev)

        def i32(n: int, fill: int = 0) -> torch.Tensor:
            return torch.full((n,), fill, dtype=torch.int32, device=dev)

        lens = torch.tensor(g.capture_lens(), dtype=torch.int32)
        zero = torch.zeros(1, dtype=torch.int32)
        qo_indptr = torch.cat([zero, lens.cumsum(0, dtype=torch.int32)])
        kv_indptr = torch.cat([zero, (-(-lens // self.plan_page)).cumsum(0, dtype=torch.int32)])
        last = torch.where(lens > 0, (lens - 1) % self.plan_page + 1, 1).to(torch.int32)
        pages = int(kv_indptr[-1])
        w = self.fi.BatchPrefillWithPagedKVCacheWrapper(
            self._full_workspace, self.opts.kv_layout, use_cuda_graph=True, qo_indptr_buf=i32(g.slots + 1),
            paged_kv_indptr_buf=i32(g.slots + 1), paged_kv_indices_buf=i32(max(pages, table.indices.numel(), 1)),
            paged_kv_last_page_len_buf=i32(g.slots, 1), backend=self.paged_backend)
        self._paged_plan(w, qo_indptr, kv_indptr, i32(pages), last, s.causal, True)
        return w

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
            built = ([paged], lambda: self._plan_paged(paged, batch, batch.full, self.spec.causal, graph),
                     self._paged_run(paged, batch))
        else:
            ragged = self._graph_ragged(batch) if graph else self.eager_ragged
            ragged_run = self._ragged_run(ragged, batch)
            plan_ragged = lambda: self._plan_ragged(ragged, batch, graph)  # noqa: E731
            built = [ragged], plan_ragged, ragged_run
        if path == PATH_RAGGED_PREFIX:
            # The paged wrapper serves the prefix here (SGLang's prefill_wrapper_paged), re-planned per batch.
            prefix = self._graph_paged(batch, batch.prefix) if graph else self.eager_paged
            prefix_run = self._paged_run(prefix, batch)

            def plan_both():
                plan_ragged()
                self._plan_paged(prefix, batch, batch.prefix, False, graph)

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
        return self._nan_outputs(batch.q.shape[0])

    def _nan_outputs(self, rows: int):
        out = torch.full((rows, self.spec.heads.qo, self.spec.head_dim), float("nan"),
                         dtype=self.dtype, device=self.device)
        lse = torch.full((rows, self.spec.heads.qo), float("nan"), dtype=torch.float32, device=self.device)
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
        self._split_known_bugs("FA2", self._split_args(True), "the warm-up run hung (never completed) on an H200", "")

    def _split_known_bugs(self, what: str, split: dict, hang: str, padded_note: str) -> None:
        """FA2 under CUDA graph with these split arguments on this flashinfer: the known bugs, as KnownBug."""
        if split["disable_split_kv"] and self.version < PADDED_CTA_FIX:
            raise KnownBug(
                f"flashinfer {self.version}: {what} + CUDA graph + disable_split_kv launches padded CTAs "
                f"without block_valid_mask (flashinfer #4002, fixed by PR #5176{padded_note}): illegal memory access")
        if split["fixed_split_size"] and self.version <= FIXED_SPLIT_GRAPH_HANG_SEEN:
            raise KnownBug(f"flashinfer {self.version}: {what} + CUDA graph + fixed_split_size="
                           f"{split['fixed_split_size']}: {hang}")

    def _planned(self, batch: Batch) -> Batch:
        """The batch as this backend's plans see it: over pages of one token under an SGLang profile."""
        return batch.token_pages() if self.plan_page == 1 else batch

    def forward(self, batch: Batch, mode: str, repeat: int = 0) -> Output:
        batch = self._planned(batch)
        asked, mode = mode, self.prefill_mode(mode, batch)
        self._check_known_bugs(mode)
        path = self.path_for(mode, batch)
        graph = mode == "cudagraph"
        (wrappers, run), plan_ms = self._timed_plan(lambda: self._prepare(batch, path, graph), graph)
        plans = [self.plan_of(w, self.version) for w in wrappers]
        plan = dict(plans[0])  # the main wrapper's fields, then the prefix wrapper's as prefix.*
        if len(plans) > 1:
            plan.update({f"prefix.{k}": v for k, v in plans[1].items()})
        if asked == "cudagraph" and self.prefill_graph is not None:  # None: SGLang's full graph runs it eager
            plan["graph_slots"] = self.prefill_graph.slots if graph else None
        attn = "+".join(sorted({str(p["backend"]) for p in plans}))
        return self._finish(run, mode, (batch.case, path), plan, path, plan, attn, repeat, plan_ms)

    def _timed_plan(self, prepare: Callable[[], object], graph: bool):
        """(prepare(), its host milliseconds, added to the "plan" stage); plan() errors said plainly.

        plan() writes a pinned host buffer and queues its copy to the device while earlier cells' kernels
        still run; staging.py gives each plan a buffer whose last copy has run (the wait for it is PLAN_WAIT,
        not plan time).
        """
        waited = self.staging.waited
        try:
            # Host time of plan(): its copies queue behind the earlier cells' work, not waited for.
            result, plan_ms = timed(prepare, self.device, sync=False)
        except (RuntimeError, ValueError) as exc:
            msg = first_line(exc, typed=False)
            if "Buffer overflow" in msg:
                raise RuntimeError(f"{msg} (raise flashinfer.workspace_mb, now {self.opts.workspace_mb})") from exc
            if graph:
                raise Unsupported(f"plan() refused under CUDA graph: {msg}") from exc
            raise
        plan_ms -= (self.staging.waited - waited) * 1e3
        self.stages.add("plan", plan_ms / 1e3)
        return result, plan_ms

    def _finish(self, run, mode: str, key, graph_plan, path: str, plan: Dict[str, object], attn: str,
                repeat: int, plan_ms: float) -> Output:
        """Run or replay (a graph keyed by key, recaptured when graph_plan changes), profile the first cell of
        each (path, plan), and return the Output."""
        graph = mode == "cudagraph"
        profiled = self._profiled(repeat, path, plan)
        again = profiled and self._session is None  # profiled by one more run (no session: profiling.py)
        # A replay's outputs are the graph's own buffers, unless the profiled run below rewrites them or the
        # worker copies them to the host after a later replay.
        keep = again or self.spec.store_tensors or self.keep_outputs
        with self._recording(profiled) as kernels:  # in the session: this run's own kernels, named at its close
            (out, lse), timer = self._execute(run, mode, key=key, plan=graph_plan, keep=keep)
        if again and not graph:  # the profiled run below writes the same buffers again
            out, lse = out.clone(), lse.clone()
        if again:
            kernels = self._kernels(run, graph)
        return Output(out=out, lse=lse, path=path, attn=attn, plan=plan, kernels=kernels,
                      plan_ms=plan_ms, timer=timer)

    # -- decode (SGLang 0.5.10's FlashInferAttnBackend.forward_decode and its CUDA graph runner)
    def forward_decode(self, batch: Batch, mode: str, repeat: int = 0) -> Output:
        """One new token per request: q is its last prefill row, over its whole cache (batch.full). Eager: one
        wrapper re-planned per batch. cudagraph: the batch padded to the smallest capture size >= bs, that
        size's graph (captured once) replayed after a re-plan; a larger batch runs eager, as SGLang's does."""
        batch = self._planned(batch)
        bs = len(batch.requests)
        sizes = self.opts.decode.capture_batch_sizes
        graph_bs = next((n for n in sizes if n >= bs), None) if mode == "cudagraph" else None
        graph = graph_bs is not None
        split = self._decode_split(graph)
        if graph:
            self._check_decode_known_bugs(split)
        q = batch.q.index_select(0, batch.last_rows.to(batch.q.device))
        if graph_bs is not None:
            plan, run, key, plan_ms = self._graph_decode(batch, q, graph_bs, split)
        else:
            (w, run), plan_ms = self._timed_plan(lambda: self._eager_decode_run(batch, q, split), False)
            plan, key = decode_plan_of(w, self.version), None
            if mode == "cudagraph":
                plan["graph_bs"] = None  # bs above every capture size: SGLang runs it eager (CG:683-687)
        attn = DECODE_BACKEND if self.decode_tensor_cores else "cuda-core"
        # graph_plan None: a decode graph is never recaptured, whatever the later plans (SGLang's are not)
        output = self._finish(run, "cudagraph" if graph else "eager", key, None, PATH_DECODE, plan, attn, repeat,
                              plan_ms)
        output.out, output.lse = output.out[:bs], output.lse[:bs]
        return output

    def _decode_split(self, graph: bool) -> dict:
        """The split arguments of this decode's plan (SGLang: eager fixed_split_size=decode_split_tile_size,
        graph fixed_split_size=None and disable_split_kv=disable_cuda_graph_kv_split)."""
        d = self.opts.decode
        fixed, off = (d.graph_fixed_split_size, d.graph_disable_split_kv) if graph else (d.fixed_split_size,
                                                                                           d.disable_split_kv)
        if not self.decode_tensor_cores and (fixed or off):
            knob = ("graph_" if graph else "") + ("fixed_split_size" if fixed else "disable_split_kv")
            raise Unsupported(f"flashinfer.decode.{knob} needs tensor-core decode: flashinfer {self.version}'s "
                              "CUDA-core decode plan takes no split arguments")
        return dict(fixed_split_size=fixed, disable_split_kv=off)

    def _check_decode_known_bugs(self, split: dict) -> None:
        """Tensor-core decode runs the FA2 prefill kernel, so CUDA-graph decode meets prefill's known bugs."""
        if self.force_known_bugs or not self.decode_tensor_cores:
            return
        self._split_known_bugs(
            "tensor-core decode (FA2)", split, "FA2 prefill's warm-up run with it hung (never completed) on an H200",
            "; SGLang PRs #31349/#31387: the grid is padded to the SM count with only bs scheduler entries "
            "initialised, stale workspace can leave stale request/tile indices")

    def _plan_decode(self, wrapper, planner, indptr, indices, last_page_len, split: dict, **extra) -> None:
        s = self.spec
        # SGLang passes page size 1 (plan_page under its profile) and no sm_scale at plan (it is given to forward():
        # the same 1/sqrt(head_dim) here). Decode graphs are few (one per capture size) and re-planned by consecutive
        # cells, so every decode wrapper gets the eager staging.
        with self.staging.plan(wrapper, self._slots(False)):
            planner(indptr, indices, last_page_len, s.heads.qo, s.heads.kv, s.head_dim, self.plan_page,
                    q_data_type=self.dtype, kv_data_type=self.dtype, sm_scale=self.scale, non_blocking=True,
                    **split, **extra)

    def _eager_decode_run(self, batch: Batch, q: torch.Tensor, split: dict):
        if self._eager_decode is None:
            self._eager_decode = self.fi.BatchDecodeWithPagedKVCacheWrapper(
                self.workspace, self.opts.kv_layout, use_tensor_cores=self.decode_tensor_cores, backend=DECODE_BACKEND)
        w, table = self._eager_decode, batch.full
        self._plan_decode(w, w.plan, table.indptr, table.indices_on(self.device), table.last_page_len, split)
        out, lse = self._nan_outputs(q.shape[0])
        cache = self._cache(batch)
        return w, lambda: w.run(q, cache, out=out, lse=lse, return_lse=True)

    def _graph_decode(self, batch: Batch, q: torch.Tensor, size: int, split: dict):
        """(plan, run, graph key, plan ms) of a graph decode: the first batch of a size builds its wrapper and
        buffers, plans SGLang's capture batch (each entry one token, CG:166-167, FB:580-591) and captures; each
        batch is then written into the buffers, re-planned (fast_decode_plan, as after SGLang's capture) and
        replayed. The plan records graph_bs and the capture-time fields that differ (capture.*)."""
        if self._decode_kv is None:
            self._decode_kv = _StaticKV(self)
        kv = self._decode_kv
        st = self._decode_graphs.get(size)
        key = (PATH_DECODE, size)
        ms = 0.0
        if st is None:
            st = _DecodeGraph(self, size, kv)
            st.write(*_padded_table(_EMPTY, size))
            _, ms = self._timed_plan(lambda: self._plan_decode(st.wrapper, st.wrapper.plan, st.indptr, st.indices,
                                                               st.last, split), True)
            st.capture_plan = decode_plan_of(st.wrapper, self.version)
            self.graphs[key] = _base.capture(st.run, self.device, self.stages)
            self._decode_graphs[size] = st  # only once captured
        kv.load(self, batch)
        st.load_q(q)
        indptr = st.write(*_padded_table(batch.full, size))
        replan = getattr(self.fi, "fast_decode_plan", None)  # SGLang swaps it in after capture (FB:594-597)
        planner = partial(replan, st.wrapper) if replan is not None else st.wrapper.plan
        extra = dict(global_override_indptr_cpu=indptr) if replan is not None else {}
        _, replan_ms = self._timed_plan(
            lambda: self._plan_decode(st.wrapper, planner, st.indptr, st.indices, st.last, split, **extra), True)
        plan = decode_plan_of(st.wrapper, self.version)
        plan["graph_bs"] = size
        plan.update({f"capture.{k}": v for k, v in st.capture_plan.items() if plan.get(k) != v})
        return plan, st.run, key, ms + replan_ms


_EMPTY = PageTable(torch.zeros(1, dtype=torch.int32), torch.zeros(0, dtype=torch.int32),
                   torch.zeros(0, dtype=torch.int32))


def _padded_table(table: PageTable, size: int) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A page table padded to `size` requests as SGLang's graph runner pads a decode batch: each padded entry
    has seq len 1 (get_cuda_graph_seq_len_fill_value, FB:753-754; CG:268-269) in page 0 (its stale
    req_pool_index's first slot). CPU int32 (indptr, indices, last_page_len)."""
    pad = size - (len(table.indptr) - 1)
    tail = table.indptr[-1] + torch.arange(1, pad + 1, dtype=torch.int32)
    return (torch.cat([table.indptr, tail]), torch.cat([table.indices, torch.zeros(pad, dtype=torch.int32)]),
            torch.cat([table.last_page_len, torch.ones(pad, dtype=torch.int32)]))


def pool_pages(spec) -> int:
    """An upper bound of the KV pool of any case's batch (inputs.build_batch: its pages, a prefix's counted
    per request here, plus a spare quarter, at least 2)."""
    most = 0
    for names in spec.cases.values():
        pages = sum(-(-(r.qo_len + r.prefix_len) // spec.page_size) * r.copies
                    for r in (spec.requests[n] for n in names))
        most = max(most, pages + max(2, pages // 4))
    return most


class _StaticKV:
    """The KV pool the decode graphs read (SGLang has one KV pool): a case's cache copied in, once per case."""

    def __init__(self, be: FlashInferBackend):
        s = be.spec
        self.pages = pool_pages(s) * s.page_size // be.plan_page  # pages of the plans' size
        page = (be.plan_page, s.heads.kv) if be.opts.kv_layout == "NHD" else (s.heads.kv, be.plan_page)
        self.k = torch.zeros((self.pages, *page, s.head_dim), dtype=be.dtype, device=be.device)
        self.v = torch.zeros_like(self.k)
        self.loaded: Optional[Batch] = None

    def load(self, be: FlashInferBackend, batch: Batch) -> None:
        if self.loaded is batch:
            return
        k, v = be._cache(batch)
        if k.shape[0] > self.pages:
            raise RuntimeError(f"decode graph: case {batch.case}'s KV pool ({k.shape[0]} pages) exceeds the "
                               f"static pool ({self.pages} pages; flashinfer.pool_pages is out of date)")
        self.k[: k.shape[0]].copy_(k)
        self.v[: v.shape[0]].copy_(v)
        self.loaded = batch


class _DecodeGraph:
    """One capture batch size: a use_cuda_graph wrapper over fixed page-table, q, out and lse buffers (as
    SGLang's init_forward_metadata_capture_cuda_graph, FB:563-579); run() is what the graph captures."""

    def __init__(self, be: FlashInferBackend, size: int, kv: _StaticKV):
        s, dev = be.spec, be.device
        self.size, self.kv = size, kv
        self.indptr = torch.zeros(size + 1, dtype=torch.int32, device=dev)
        self.indices = torch.zeros(kv.pages + size, dtype=torch.int32, device=dev)
        self.last = torch.ones(size, dtype=torch.int32, device=dev)
        self.q = torch.zeros((size, s.heads.qo, s.head_dim), dtype=be.dtype, device=dev)
        self.out, self.lse = be._nan_outputs(size)
        self.wrapper = be.fi.BatchDecodeWithPagedKVCacheWrapper(
            be.workspace, be.opts.kv_layout, use_cuda_graph=True, use_tensor_cores=be.decode_tensor_cores,
            paged_kv_indptr_buffer=self.indptr, paged_kv_indices_buffer=self.indices,
            paged_kv_last_page_len_buffer=self.last, backend=DECODE_BACKEND)
        self.capture_plan: Dict[str, object] = {}

    def write(self, indptr: torch.Tensor, indices: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
        """Write a padded page table into the fixed buffers (SGLang writes them in place before its plan);
        returns the CPU indptr (fast_decode_plan's global_override_indptr_cpu)."""
        self.indptr.copy_(indptr)
        self.indices[: len(indices)].copy_(indices)
        self.last.copy_(last)
        return indptr

    def load_q(self, q: torch.Tensor) -> None:
        self.q[: len(q)].copy_(q)
        self.q[len(q):].zero_()

    def run(self):
        return self.wrapper.run(self.q, (self.kv.k, self.kv.v), out=self.out, lse=self.lse, return_lse=True)


def _slot_padded(qo_indptr: torch.Tensor, kv_indptr: torch.Tensor, last_page_len: torch.Tensor,
                 slots: int) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A paged plan's host arguments padded to `slots` requests with zero-length sentinels, as SGLang 0.5.23's full
    prefill graph plans every batch (prefill_cuda_graph_runner.py:1271-1293; a sentinel's last_page_len is 1, as
    SGLang's kv_last_page_len buffer holds, FB:486-488)."""
    pad = slots - (len(last_page_len))
    return (torch.cat([qo_indptr, qo_indptr[-1:].repeat(pad)]), torch.cat([kv_indptr, kv_indptr[-1:].repeat(pad)]),
            torch.cat([last_page_len, torch.ones(pad, dtype=last_page_len.dtype)]))


def _pinned_reader(w) -> Optional[Callable[[int], int]]:
    """Reads an int32 the plan wrote into the wrapper's pinned int workspace (kv_chunk_size), if it has one."""
    pinned = getattr(w, "_pin_memory_int_workspace_buffer", None)
    return None if pinned is None else (lambda off: int(pinned[off : off + 4].view(torch.int32)[0]))


def decode_plan_of(w, version) -> Dict[str, object]:
    """A decode wrapper's plan fields: with tensor cores its _plan_info is an FA2 prefill plan (plan_of reads
    it); without, a DecodePlanInfo (plan_layouts' decode layout; kv_chunk_size from the pinned int workspace)."""
    tensor_cores = bool(w.use_tensor_cores)
    if tensor_cores:
        plan = FlashInferBackend.plan_of(w, version)
    else:
        plan = {"backend": getattr(w, "_backend", "?"), **read_plan(DECODE, version, w._plan_info, _pinned_reader(w))}
    plan["tensor_cores"] = tensor_cores
    return plan
