"""backend sglang: SGLang's own FlashInferAttnBackend, driven as SGLang's model runner drives it.

Imported only inside a task. Eager: init_forward_metadata, then forward on layer 0 with the new tokens'
K/V (save_kv_cache, as SGLang does) over the KV pool holding the prefix. cudagraph: SGLang's graph path for
the forward mode (FB = flashinfer_backend.py, 0.5.23): init_cuda_graph_state once, capture through
init_forward_metadata_out_graph(in_capture=True) and init_forward_metadata_in_graph, warm-up,
on_after_cuda_graph_warmup, capture of the forward; each batch written into the static buffers padded as
SGLang's runners pad, out_graph(in_capture=False), replay. EXTEND models the full prefill graph
(prefill_cuda_graph_runner.py: fixed request slots, token buckets), DECODE and DLLM_EXTEND the decode
runner (decode_cuda_graph_runner.py: capture batch sizes, seq_len fill value for padded requests). A batch
SGLang's runner would not replay (too large, or padded beyond its factor) runs eager, graph None.
On CPU (the wiring test, with fake wrappers) there is no CUDA graph: "capture" runs the forward (warm-up,
hook, capture run) and "replay" runs it again with the capture-time metadata; every metadata call is
SGLang's own. The rows record what SGLang did: Output.wiring, read from SGLang's objects and the recorder.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from packaging.version import Version

from ...envflags import TaskFlags
from ...record.paths import path_of
from ...spec.model import JobSpec
from ...spec.sglang import WORKSPACE_FLAG, full_prefill_graph
from ...stages import Stages
from ..envinfo import check_sglang
from ..inputs import Batch
from . import sglang_stubs
from .base import (
    AttentionBackend,
    BackendUnavailable,
    KernelTime,
    Output,
    Unsupported,
    capture,
    kernel_timed,
    timed,
)
from .flashinfer import FlashInferBackend, decode_plan_of
from .profiling import KernelProfiling
from .sglang_batch import DECODE, DLLM_EXTEND, EXTEND, Runner, Step, most_requests, on_device, prepare_import, step_of
from .sglang_record import Recorder, WrapperAPI, activate, install

_WORKSPACE_ENV: Dict[str, Optional[str]] = {}  # the flag as the task had it, before any backend set it
GRAPH_NAMES = {EXTEND: "full-prefill", DECODE: "decode", DLLM_EXTEND: "dllm"}
# Test-only (docs/environment.md): "flip-ragged" makes an eager prefill that SGLang set up ragged run its paged
# wrapper instead (planned for the prefix only): the flag ignored in one path, a wiring fault the audit must fail
WIRING_FAULT = "DETRUN_TEST_SGLANG_WIRING"


def inject_wiring_fault(sgl: Any) -> None:
    """The test fault WIRING_FAULT asks for, on SGLang's forward metadata just set (inert unless it is set)."""
    meta: Any = getattr(sgl, "forward_metadata", None)
    if os.environ.get(WIRING_FAULT) == "flip-ragged" and getattr(meta, "use_ragged", False):
        meta.use_ragged = False


def _fresh_process_state(fb_module: Any) -> None:
    """Let a backend be built again in this process: SGLang keeps its FlashInfer workspace process-wide
    (0.5.23: get_buffer("flashinfer_workspace"), FB:457; before 0.5.19 the module's global_workspace_buffer),
    sized by the first backend, and __init__ rewrites SGLANG_FLASHINFER_WORKSPACE_SIZE (FB:431, FB:451); both
    go back to the task's."""
    if hasattr(fb_module, "global_workspace_buffer"):
        fb_module.global_workspace_buffer = None
    else:
        from sglang.srt.runtime_context import get_context

        get_context().resources.buffers.pop("flashinfer_workspace", None)
    before = _WORKSPACE_ENV.setdefault(WORKSPACE_FLAG, os.environ.get(WORKSPACE_FLAG))
    if before is None:
        os.environ.pop(WORKSPACE_FLAG, None)
    else:
        os.environ[WORKSPACE_FLAG] = before


class _CpuCaptured:
    """No CUDA graph on CPU: replay runs the captured forward again, with the metadata SGLang set at
    capture (a real replay runs the captured kernels, whatever forward_metadata says by then)."""

    def __init__(self, fn: Callable[[], Tuple[torch.Tensor, ...]], restore: Callable[[], None]):
        self.fn, self.restore = fn, restore

    def replay(self, clone: bool = True) -> Tuple[Tuple[torch.Tensor, ...], KernelTime]:
        self.restore()
        outputs, ms = timed(self.fn, torch.device("cpu"))
        return outputs, KernelTime(ms)  # type: ignore[return-value]


@dataclass
class _Graph:
    """One captured graph: its static ForwardBatch and q/k/v, the wrappers its forward ran at capture."""

    name: str
    slots: int  # requests per replay (padded)
    tokens: int  # query rows per replay (padded)
    fb: Any
    qkv: Tuple[torch.Tensor, torch.Tensor, torch.Tensor]
    captured: Any = None
    ran: Optional[List[Any]] = None
    metadata: Any = None
    capture_plan: Optional[Dict[str, object]] = None


class SGLangBackend(KernelProfiling, AttentionBackend):
    name = "sglang"

    def __init__(self, spec: JobSpec, device: torch.device, stages: Optional[Stages] = None,
                 flags: Optional[TaskFlags] = None, wrappers: Optional[WrapperAPI] = None):
        super().__init__(spec, device, stages, flags)  # detrun's record; SGLang reads its own flags (below)
        if spec.sglang is None:
            raise BackendUnavailable("backend sglang: the job names no SGLang (sglang: {version: ...})")
        prepare_import(device)
        sglang_stubs.install()
        check_sglang(spec)
        from sglang.srt.dllm.config import DllmConfig
        from sglang.srt.layers.attention import flashinfer_backend as fb_module

        self.rec, self.fb_module = Recorder(), fb_module
        try:
            self._globals = install(fb_module, wrappers or WrapperAPI(), self.rec)
        except LookupError as exc:
            raise BackendUnavailable(f"backend sglang: {exc}") from None
        self.version = Version(str(getattr(_flashinfer(), "__version__", "0")))
        self.opts = spec.flashinfer  # the kernel-profiling knobs (profiling.py)
        self._profiled_plans = set()
        self.block = spec.sglang.dllm_block_size
        self.capture_sizes = list(spec.flashinfer.decode.capture_batch_sizes)
        # SGLang's full prefill graph on an H200 (the profile's: request slots, token buckets, padding factor),
        # as detrun's model of it uses; None for a release without one (before 0.5.15: plain EXTEND is never
        # captured, FB raises "Invalid mode", and SGLang's runner prefills eager)
        self.full = full_prefill_graph(spec.sglang)
        slots = self.full.slots if self.full else 0
        with on_device(device):
            _fresh_process_state(fb_module)
            self.runner = Runner(spec, device, spec.sglang.deterministic_inference,
                                 rows=max(self._size(most_requests(spec)) or 0, slots),
                                 context_len=self._extend_tokens())
            self.sgl = fb_module.FlashInferAttnBackend(self.runner.mock)
        self.rec.backend = self.sgl
        # dLLM servers build it from their model's config (DllmConfig.from_server_args needs a checkpoint);
        # FB reads only its block_size (FB:800).
        self.sgl.dllm_config = DllmConfig(algorithm="detrun", algorithm_config={}, block_size=self.block,
                                          mask_id=0, max_running_requests=self.runner.rows)
        self.use_paged = bool(self.sgl.use_paged)  # what SGLang read (FB:453), not detrun's parse
        self.deterministic = bool(self.sgl.enable_deterministic)
        self.stubs = sglang_stubs.used()
        self._graphs: Dict[Tuple[str, int], _Graph] = {}
        self._graph_state = False

    def close(self) -> None:
        self.runner.close()

    # -- the protocol
    def forward(self, batch: Batch, mode: str, repeat: int = 0) -> Output:
        return self._run(batch, EXTEND, mode, repeat)

    def forward_decode(self, batch: Batch, mode: str, repeat: int = 0) -> Output:
        return self._run(batch, DECODE, mode, repeat)

    def forward_dllm(self, batch: Batch, mode: str, repeat: int = 0) -> Output:
        return self._run(batch, DLLM_EXTEND, mode, repeat)

    def _run(self, batch: Batch, kind: str, mode: str, repeat: int) -> Output:
        try:
            step = step_of(batch, kind, self.block)
        except ValueError as exc:
            raise Unsupported(str(exc)) from None
        rows = step.rows.to(batch.q.device)
        q, k, v = (t.index_select(0, rows) for t in (batch.q, batch.k, batch.v))
        activate(self.fb_module, self._globals)  # another backend of this process may have run since
        with on_device(self.device):
            self.runner.load(batch, step)
            graph = self._graph_for(kind, step) if mode == "cudagraph" else None
            if graph is None:
                return self._eager(kind, step, q, k, v, repeat)
            return self._replay(graph, kind, step, q, k, v, repeat)

    # -- eager: SGLang's init_forward_metadata (also what its breakable prefill graph calls)
    def _eager(self, kind: str, step: Step, q, k, v, repeat: int) -> Output:
        fb = self.runner.eager_batch(step)
        self.rec.start()
        _, plan_ms = timed(lambda: self.sgl.init_forward_metadata(fb), self.device, sync=False)
        inject_wiring_fault(self.sgl)
        planned = list(self.rec.planned)
        run = lambda: self._forward(q, k, v, fb)  # noqa: E731
        (out, lse), timer = kernel_timed(run, self.device)
        ran = list(self.rec.ran)
        return self._output(kind, None, planned, ran, out, lse, timer, plan_ms, repeat, run, {})

    def _forward(self, q, k, v, fb) -> Tuple[torch.Tensor, torch.Tensor]:
        """SGLang's attention forward on layer 0; (out [rows, Hq, D], the LSE of what it computed)."""
        from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

        self.rec.start_runs()
        with forward_context(ForwardContext(attn_backend=self.sgl)):
            o = self.sgl.forward(q, k, v, self.runner.layer, fb, save_kv_cache=True)
        out = o.view(-1, self.spec.heads.qo, self.spec.head_dim)
        if self.rec.merged is not None:
            return out, self.rec.merged[1]
        if not self.rec.ran:
            raise RuntimeError("SGLang's forward ran no FlashInfer wrapper")
        return out, self.rec.results[id(self.rec.ran[-1])][1]

    # -- graphs
    def _size(self, bs: int) -> Optional[int]:
        return next((n for n in self.capture_sizes if n >= bs), None)

    def _extend_tokens(self) -> int:
        """The full prefill graph's largest bucket when the job captures it (0: it does not, or no such graph)."""
        if self.full is None or "cudagraph" not in self.spec.modes or "prefill" not in self.spec.phases:
            return 0
        return max(self.full.buckets)

    def _graph_for(self, kind: str, step: Step) -> Optional[_Graph]:
        """The graph SGLang's runner would replay this batch with (captured on first use), or None when its
        runner runs it eager: bs beyond the capture sizes, or (full prefill graph) beyond its request slots or
        token buckets or padded past its factor (FullPrefillGraph.takes). The full prefill graph's first capture
        is its largest bucket, as SGLang's runner captures largest first (prefill_cuda_graph_runner.py:1715):
        that first plan fixes the graph wrappers' total_num_rows for every later plan."""
        bs = len(step.new_lens)
        if kind == EXTEND:
            if self.full is None or not self.full.takes(step.new_lens):
                return None
            slots = self.full.slots
            tokens = next(n for n in self.full.buckets if n >= step.tokens)
            key = (kind, tokens)
            first = (kind, max(self.full.buckets))
            if first not in self._graphs:
                self._graphs[first] = self._capture(kind, slots, first[1])
        else:
            size = self._size(bs)
            if size is None:
                return None
            slots, tokens = size, size * (1 if kind == DECODE else self.block)
            key = (kind, size)
        if key not in self._graphs:
            self._graphs[key] = self._capture(kind, slots, tokens)
        return self._graphs[key]

    def _fill(self, kind: str) -> int:
        """The seq len of a padded request in SGLang's decode-style graph runner: the block size for a dLLM
        model, else the backend's fill value (decode_cuda_graph_runner.py:433-436; FB:1353-1354)."""
        return self.block if kind == DLLM_EXTEND else int(self.sgl.get_cuda_graph_seq_len_fill_value())

    def _init_graph_state(self) -> None:
        """SGLang's init_cuda_graph_state, once, sized for every graph this job can replay."""
        if self._graph_state:
            return
        sizes = [self._size(len(self.spec.members(c))) or 0 for c in self.spec.cases]
        max_bs = max(sizes + [self.full.slots if self.full else 0])
        tokens = max(max(sizes) * max(self.block, 1), self._extend_tokens())
        self.sgl.init_cuda_graph_state(max_bs, tokens)
        self._graph_state = True

    def _capture(self, kind: str, slots: int, tokens: int) -> _Graph:
        """SGLang's capture batch for the graph (decode runner: seq_len fill value, every slot a request;
        full prefill: the fewest requests of at most the context length, zero-length sentinels to the slots),
        its capture-path metadata, warm-up, on_after_cuda_graph_warmup, capture."""
        self._init_graph_state()
        dev, r = self.device, self.runner
        fill = self._fill(kind)
        if kind == EXTEND:
            ctx = r.context_len
            lens = [min(ctx, tokens - s) for s in range(0, tokens, ctx)]
            lens += [0] * (slots - len(lens))
            seq, new, req_rows = lens, lens, list(range(slots))
        else:
            width = 1 if kind == DECODE else self.block
            seq, new, req_rows = [fill] * slots, [width] * slots, [0] * slots
        loc = torch.zeros(tokens, dtype=torch.int64, device=dev)
        pos = torch.zeros(tokens, dtype=torch.int64, device=dev)
        fb = r.forward_batch(kind, seq, new, req_rows, loc, pos, batch_size=slots)
        shape = (tokens, self.spec.heads.kv, self.spec.head_dim)
        qkv = (torch.zeros((tokens, self.spec.heads.qo, self.spec.head_dim), dtype=r.mock.dtype, device=dev),
               torch.zeros(shape, dtype=r.mock.dtype, device=dev), torch.zeros(shape, dtype=r.mock.dtype, device=dev))
        g = _Graph(GRAPH_NAMES[kind], slots, tokens, fb, qkv)
        self.rec.start()
        self.sgl.init_forward_metadata_out_graph(fb, in_capture=True)
        self.sgl.init_forward_metadata_in_graph(fb)
        g.capture_plan = self._plan(kind, list(self.rec.planned))
        run = lambda: self._forward(*g.qkv, g.fb)  # noqa: E731
        if dev.type == "cuda":
            g.captured = capture(run, dev, self.stages, after_warmup=self.sgl.on_after_cuda_graph_warmup)
        else:
            run()  # the warm-up run
            self.sgl.on_after_cuda_graph_warmup()
            run()  # what capture records
            g.captured = _CpuCaptured(run, lambda: setattr(self.sgl, "forward_metadata", g.metadata))
        g.ran, g.metadata = list(self.rec.ran), self.sgl.forward_metadata
        return g

    def _replay(self, g: _Graph, kind: str, step: Step, q, k, v, repeat: int) -> Output:
        """Write the batch into the graph's static buffers, padded as SGLang's runner pads (padded requests
        get the seq_len fill value, or zero-length sentinels in the full prefill graph; padded rows slot 0),
        out_graph(in_capture=False) over the padded view, replay."""
        bs, n = len(step.new_lens), step.tokens
        pad = g.slots - bs
        if kind == EXTEND:
            seq, new = step.seq_lens + [0] * pad, step.new_lens + [0] * pad
        else:
            fill = self._fill(kind)
            seq, new = step.seq_lens + [fill] * pad, step.new_lens + [step.new_lens[0]] * pad
        req_rows = list(range(bs)) + [0] * pad
        for static, real in zip(g.qkv, (q, k, v)):
            static[:n].copy_(real)
            static[n:].zero_()
        loc, pos = self.runner.new_slots(step)
        g.fb.out_cache_loc[:n].copy_(loc)
        g.fb.out_cache_loc[n:].zero_()
        g.fb.positions[:n].copy_(pos)
        g.fb.positions[n:].zero_()
        g.fb.seq_lens.copy_(torch.tensor(seq, dtype=g.fb.seq_lens.dtype))
        g.fb.req_pool_indices.copy_(torch.tensor(req_rows, dtype=g.fb.req_pool_indices.dtype))
        view = self.runner.forward_batch(kind, seq, new, req_rows, g.fb.out_cache_loc, g.fb.positions,
                                         batch_size=g.slots)
        self.rec.start()
        _, plan_ms = timed(lambda: self.sgl.init_forward_metadata_out_graph(view), self.device, sync=False)
        planned = list(self.rec.planned)
        keep = self.spec.store_tensors or self.keep_outputs
        (out, lse), timer = g.captured.replay(keep)
        rows = slice(0, n)
        extra: Dict[str, object] = {"graph_bs": g.slots, "graph_tokens": g.tokens}
        return self._output(kind, g, planned, list(g.ran or []), out[rows], lse[rows], timer, plan_ms, repeat,
                            lambda: self._forward(*g.qkv, g.fb), extra)

    # -- what the row records
    def _plan(self, kind: str, wrappers: List[Any]) -> Dict[str, object]:
        """The wrappers' plan fields (flashinfer.py's readers), the first's plain, the second's as prefix.*."""
        unique: List[Any] = []
        for w in wrappers:
            if all(w is not u for u in unique):
                unique.append(w)
        read = (lambda w: decode_plan_of(w, self.version)) if kind == DECODE else (
            lambda w: FlashInferBackend.plan_of(w, self.version))
        plans = [read(w) for w in unique]
        plan: Dict[str, object] = dict(plans[0]) if plans else {}
        if len(plans) > 1:
            plan.update({f"prefix.{k}": val for k, val in plans[1].items()})
        return plan

    def _output(self, kind: str, g: Optional[_Graph], planned: List[Any], ran: List[Any], out, lse,
                timer: KernelTime, plan_ms: float, repeat: int, run, extra: Dict[str, object]) -> Output:
        meta = self.sgl.forward_metadata if g is None else g.metadata
        use_ragged = getattr(meta, "use_ragged", None)
        labels_ran = self.rec.labels(ran)
        labels_planned = self.rec.labels(planned)
        wiring: Dict[str, object] = {
            "forward_mode": kind, "graph": g.name if g is not None else None,
            "use_ragged": None if use_ragged is None else bool(use_ragged),
            "extend_no_prefix": None if kind == DECODE else bool(getattr(meta, "extend_no_prefix", False)),
            "planned": labels_planned, "ran": labels_ran,
            "stale": [label for label in labels_ran if label not in labels_planned],
        }
        path = path_of(labels_ran)
        plan = self._plan(kind, ran)
        if use_ragged is not None:
            plan["sglang.use_ragged"] = bool(use_ragged)
        plan.update(extra)
        attn = self._attn(kind, ran)
        self.stages.add("plan", plan_ms / 1e3)
        timer.stages = self.stages
        kernels: List[str] = []
        if self.device.type == "cuda" and self._profiled(repeat, path, plan):
            out, lse = out.clone(), lse.clone()
            kernels = self._kernels(run, g is not None)
        return Output(out=out, lse=lse, path=path, attn=attn, plan=plan, kernels=kernels, plan_ms=plan_ms,
                      timer=timer, wiring=wiring)

    def _attn(self, kind: str, ran: List[Any]) -> str:
        if kind == DECODE and ran:
            return "fa2" if getattr(ran[0], "use_tensor_cores", False) else "cuda-core"
        return "+".join(sorted({str(getattr(w, "_backend", "?")) for w in ran})) or "?"


def _flashinfer() -> Any:
    try:
        import flashinfer

        return flashinfer
    except ImportError:
        return None
