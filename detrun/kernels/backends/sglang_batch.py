"""detrun's Batch as SGLang sees it: the model runner, the KV pool and the ForwardBatch of one forward.

Pool slots: detrun page p, offset o is SGLang slot (p + 1) * page_size + o (SGLang's first page is its
padding slot). SGLang's FlashInfer backend plans with page size 1 over these slots (flashinfer_backend.py
call_begin_forward passes 1), so the paged wrappers read token slots, whatever detrun's page_size.
"""

from __future__ import annotations

import contextlib
import os
import types
from dataclasses import dataclass
from typing import Any, Iterator, List, Optional, Tuple

import torch

from ...spec.model import JobSpec
from ..inputs import DTYPES, Batch

EXTEND, DECODE, DLLM_EXTEND = "EXTEND", "DECODE", "DLLM_EXTEND"
H200_SMS = 132  # what the CPU shim answers for torch.cuda.get_device_properties().multi_processor_count


class _CudaToCpu(torch.overrides.TorchFunctionMode):
    """device="cuda" in a torch call becomes "cpu" (SGLang allocates some buffers on "cuda" by name)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        device = kwargs.get("device")
        if device is not None and str(device).startswith("cuda"):
            kwargs["device"] = "cpu"
        return func(*args, **kwargs)


def _h200_properties(*args, **kwargs) -> Any:
    return types.SimpleNamespace(multi_processor_count=H200_SMS)


@contextlib.contextmanager
def on_device(device: torch.device) -> Iterator[None]:
    """Where SGLang's code runs: as is on CUDA; on CPU (the wiring test), its "cuda" allocations go to the
    CPU and get_device_properties answers an H200's SM count (the full prefill graph's workspace formula)."""
    if device.type == "cuda":
        with torch.no_grad():
            yield
        return
    real = torch.cuda.get_device_properties
    torch.cuda.get_device_properties = _h200_properties
    try:
        with _CudaToCpu(), torch.no_grad():
            yield
    finally:
        torch.cuda.get_device_properties = real


def prepare_import(device: torch.device) -> None:
    """Before SGLang is imported: its Triton index kernels run in Triton's interpreter on CPU."""
    if device.type != "cuda":
        os.environ.setdefault("TRITON_INTERPRET", "1")


@dataclass
class Step:
    """One SGLang forward over a detrun Batch: which query rows it computes, and each request's tokens
    before them (prefix, in the pool before the forward) and computed by it (new)."""

    mode: str  # EXTEND, DECODE or DLLM_EXTEND
    rows: torch.Tensor  # int64 rows of batch.q/k/v this forward computes, in request order
    prefix_lens: List[int]
    new_lens: List[int]
    locs: List[List[int]]  # each request's pool slot per token position (prefix and new)

    @property
    def seq_lens(self) -> List[int]:
        return [p + n for p, n in zip(self.prefix_lens, self.new_lens)]

    @property
    def tokens(self) -> int:
        return sum(self.new_lens)



def slot_of(page: int, offset: int, page_size: int) -> int:
    return (page + 1) * page_size + offset


def step_of(batch: Batch, mode: str, block: int = 0) -> Step:
    """EXTEND: every new token over its cached prefix. DECODE: each request's last token over all before it.
    DLLM_EXTEND: each request's last `block` tokens over all before them (each qo_len must be >= block)."""
    ps, table = batch.page_size, batch.full
    locs = []
    for i, n in enumerate(batch.kv_lens):
        pages = table.indices[int(table.indptr[i]) : int(table.indptr[i + 1])].tolist()
        locs.append([slot_of(pages[t // ps], t % ps, ps) for t in range(n)])
    ends = batch.qo_indptr[1:].tolist()
    if mode == EXTEND:
        new = list(batch.qo_lens)
    elif mode == DECODE:
        new = [1] * len(ends)
    else:
        short = [r for r, q in zip(batch.requests, batch.qo_lens) if q < block]
        if short:
            raise ValueError(f"dllm block of {block} tokens: requests {', '.join(short[:3])} have fewer new tokens")
        new = [block] * len(ends)
    rows = torch.cat([torch.arange(e - n, e) for e, n in zip(ends, new)])
    prefix = [k - n for k, n in zip(batch.kv_lens, new)]
    return Step(mode, rows, prefix, new, locs)


def pool_tokens(spec: JobSpec) -> int:
    """Pool slots every case's pages fit in (flashinfer.pool_pages' bound) plus SGLang's padding page."""
    from .flashinfer import pool_pages

    return (pool_pages(spec) + 1) * spec.page_size


def longest(spec: JobSpec) -> int:
    """The longest request (prefix + new tokens), rounded up to a page: SGLang's context length here."""
    n = max(r.qo_len + r.prefix_len for r in spec.requests.values())
    return -(-n // spec.page_size) * spec.page_size


def most_requests(spec: JobSpec) -> int:
    return max(len(spec.members(case)) for case in spec.cases)


_HELD: List[Any] = []  # process-wide overrides entered for older kits (see _install_server_args)


def _install_server_args(mock: Any, deterministic: bool) -> Any:
    """The kit installs server args with enable_deterministic_inference=False: install them again with the
    job's switch. Kits with a runtime-context override (SGLang reads get_exec().deterministic, 0.5.19 and later):
    a new override, returned for close(); older kits: the args object FB reads (model_runner.server_args)."""
    override = getattr(mock, "_server_args_override", None)
    if override is None:
        from sglang.srt.runtime_context import get_parallel
        from sglang.srt.server_args import set_global_server_args_for_scheduler

        # FB's __init__ pads max_bs by attn_cp_size (0.5.14-0.5.18 _cuda_graph_capture_max_bs); those kits
        # override attn_tp_size only, for the process, as this does attn_cp_size (one rank, no group)
        held = get_parallel().override(attn_cp_size=1)  # kept: a collected generator would undo it
        held.__enter__()
        _HELD.append(held)
        mock.server_args.enable_deterministic_inference = deterministic
        set_global_server_args_for_scheduler(mock.server_args)
        return None
    from sglang.srt.runtime_context import get_context

    fields = dict(override._fields, enable_deterministic_inference=deterministic)
    override.restore()
    overrides = get_context().override_server_args(**fields)
    mock.server_args = overrides.install()
    return overrides


class Runner:
    """SGLang's test-kit MockModelRunner (TinyModelConfig: the spec's heads, head_dim, dtype, page size)
    with a pool every case fits in, SGLang's server args with enable_deterministic_inference as the job
    says, and layer 0 (RadixAttention) whose KV the pool holds."""

    def __init__(self, spec: JobSpec, device: torch.device, deterministic: bool, rows: int = 0,
                 context_len: int = 0):
        from sglang.srt.layers.radix_attention import RadixAttention
        from sglang.srt.model_executor.forward_batch_info import ForwardMode
        from sglang.test.kits.attention_unittest.attention_methods import dense_attention as kit

        ctx = max(longest(spec), context_len)  # context_len: a full prefill graph's one-request capture
        # Request rows: every case's requests (and every graph's padded batch), and enough rows x context
        # length that the pool holds every case's pages (the kit sizes the pool from them).
        rows = max(most_requests(spec), rows, -(-pool_tokens(spec) // ctx)) + 1
        hq, hkv, d = spec.heads.qo, spec.heads.kv, spec.head_dim
        case = kit.DenseAttentionCase(name="detrun", backend="flashinfer", forward_mode=ForwardMode.EXTEND,
                                      num_heads=hq, num_kv_heads=hkv, page_size=spec.page_size,
                                      prefix_lens=(0,) * rows, extend_lens=(1,) * rows)
        config = kit.TinyModelConfig(num_heads=hq, num_kv_heads=hkv, head_dim=d, hidden_size=hq * d,
                                     context_len=ctx)
        self.mock = kit.MockModelRunner(case=case, model_config=config, dtype=DTYPES[spec.dtype],
                                        device=str(device), max_context_len=ctx, head_dim=d, runner_batch_size=rows)
        self.overrides = _install_server_args(self.mock, deterministic)
        self.layer = RadixAttention(num_heads=hq, head_dim=d, scaling=d**-0.5, num_kv_heads=hkv, layer_id=0)
        self.device, self.context_len, self.rows = device, ctx, rows

    def close(self) -> None:
        if self.overrides is not None:
            self.overrides.restore()

    @property
    def pool(self):
        return self.mock.token_to_kv_pool

    def load(self, batch: Batch, step: Step) -> None:
        """Each request's slots into req_to_token (request i in row i) and its prefix KV into the pool
        (the new tokens' KV is SGLang's to write: forward_extend/forward_decode with save_kv_cache)."""
        table = self.mock.req_to_token_pool.req_to_token
        pages, offs, locs = [], [], []
        ps = batch.page_size
        for i, slots in enumerate(step.locs):
            table[i, : len(slots)] = torch.tensor(slots, dtype=table.dtype, device=table.device)
            for t in range(step.prefix_lens[i]):
                pages.append((slots[t] // ps) - 1)
                offs.append(slots[t] % ps)
                locs.append(slots[t])
        if locs:
            p = torch.tensor(pages, device=batch.k_cache.device)
            o = torch.tensor(offs, device=batch.k_cache.device)
            loc = torch.tensor(locs, dtype=torch.int64, device=self.device)
            self.pool.set_kv_buffer(self.layer, loc, batch.k_cache[p, o], batch.v_cache[p, o])

    def forward_batch(self, mode: str, seq_lens: List[int], new_lens: List[int], req_rows: List[int],
                      out_loc: torch.Tensor, positions: torch.Tensor, batch_size: Optional[int] = None) -> Any:
        """A ForwardBatch as SGLang's scheduler makes one (the kit's _make_forward_batch fields), bound to
        its own KV plan; out_loc and positions are taken as they are (a graph's static buffers)."""
        from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

        dev = self.device
        forward_mode = getattr(ForwardMode, mode)
        prefix = [s - n for s, n in zip(seq_lens, new_lens)]
        fb = ForwardBatch(
            forward_mode=forward_mode,
            batch_size=batch_size if batch_size is not None else len(seq_lens),
            input_ids=torch.zeros(out_loc.numel(), dtype=torch.int64, device=dev),
            req_pool_indices=torch.tensor(req_rows, dtype=torch.int32, device=dev),
            seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=dev),
            seq_lens_cpu=torch.tensor(seq_lens, dtype=torch.int32),
            out_cache_loc=out_loc,
            seq_lens_sum=sum(seq_lens),
            positions=positions,
        )
        translator = getattr(self.mock, "kv_index_translator", None)  # 0.5.19 and later
        if translator is not None:
            translator.own_plan(fb).bind_replay(fb, translator, slots=out_loc)
        if mode != DECODE:
            fb.extend_prefix_lens = torch.tensor(prefix, dtype=torch.int32, device=dev)
            fb.extend_prefix_lens_cpu = list(prefix)
            fb.extend_seq_lens = torch.tensor(new_lens, dtype=torch.int32, device=dev)
            fb.extend_seq_lens_cpu = list(new_lens)
            fb.extend_num_tokens = sum(new_lens)
        return fb

    def new_slots(self, step: Step) -> Tuple[torch.Tensor, torch.Tensor]:
        """(out_cache_loc, positions) of the step's new tokens, in request order."""
        loc = torch.tensor([s[p + j] for s, p, n in zip(step.locs, step.prefix_lens, step.new_lens)
                            for j in range(n)], dtype=torch.int64, device=self.device)
        pos = torch.tensor([p + j for p, n in zip(step.prefix_lens, step.new_lens) for j in range(n)],
                           dtype=torch.int64, device=self.device)
        return loc, pos

    def eager_batch(self, step: Step) -> Any:
        loc, pos = self.new_slots(step)
        return self.forward_batch(step.mode, step.seq_lens, step.new_lens, list(range(len(step.new_lens))),
                                  loc, pos)
