"""Job specs: pydantic models of a job file and load_spec(path)."""

from __future__ import annotations

import copy
from collections import Counter
from pathlib import Path
from typing import Annotated, Callable, Dict, List, Literal, Optional, Sequence, Union

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..envflags import (
    BOOL_FLAGS,
    FORBIDDEN_FLAGS,
    TASK_SETTINGS,
    TENSOR_CORE_FLAG,
    parse_bool,
)
from ..errors import DetrunError
from ..record.keys import COPY, base_request, copy_name
from .levels import checked_level
from .messages import blamed_override, error_text, kind_of
from .sglang import CAPTURE_BS_0510, SGLANG_BACKEND_MIN, apply_profile, reads_use_paged
from .sweep import Generator, expand
from .versions import Versions, absolute_wheelhouse

Mode = Literal["eager", "cudagraph"]
# decode: one new token per request over its whole cache; dllm: SGLang's DLLM_EXTEND (backend: sglang), each
# request's last sglang.dllm_block_size tokens over the rest as prefix
Phase = Literal["prefill", "decode", "dllm"]


def _all_modes() -> List[Mode]:
    return ["eager", "cudagraph"]


def _prefill_only() -> List[Phase]:
    return ["prefill"]
Axis = Literal["repeat", "gpu", "mode", "batch", "phase", "run", "backend", "version"]  # claims.AXIS_NAMES
Level = Annotated[str, AfterValidator(checked_level)]  # levels.py: bitwise, explained, ignore, ulp:N, abs:X, rel:X
DType = Literal["bf16", "fp16", "fp32"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Heads(_Model):
    qo: int = Field(ge=1)
    kv: int = Field(ge=1)

    @model_validator(mode="after")
    def _gqa(self) -> "Heads":
        if self.qo % self.kv:
            raise ValueError(f"qo heads ({self.qo}) must be a multiple of kv heads ({self.kv})")
        return self


class Request(_Model):
    """One request: qo_len new tokens after prefix_len cached ones (prefix: content key)."""

    qo_len: int = Field(ge=1)
    prefix_len: int = Field(default=0, ge=0)
    prefix: Optional[str] = None
    copies: int = Field(default=1, ge=1, le=4096)


class DecodeOpts(_Model):
    """FlashInfer decode (BatchDecodeWithPagedKVCacheWrapper), as SGLang plans it (sglang.py cites where)."""

    tensor_cores: Optional[bool] = None  # None: SGLang's rule (SGLANG_FLASHINFER_USE_TENSOR_CORE, else GQA group >= 4)
    fixed_split_size: Optional[int] = Field(default=None, ge=1)  # eager decode, in pages (tensor cores only)
    disable_split_kv: bool = False  # eager decode (tensor cores only)
    graph_fixed_split_size: Optional[int] = Field(default=None, ge=1)  # CUDA-graph decode
    graph_disable_split_kv: bool = False  # CUDA-graph decode (SGLang: disable_cuda_graph_kv_split)
    # A graph decode of bs requests runs the graph captured for the smallest of these >= bs (padded to it);
    # larger batches run eager, as SGLang's CUDA graph runner does. Default: SGLang 0.5.10's on an H200.
    capture_batch_sizes: List[int] = Field(default_factory=lambda: list(CAPTURE_BS_0510), min_length=1)

    @field_validator("capture_batch_sizes")
    @classmethod
    def _sizes(cls, sizes: List[int]) -> List[int]:
        if min(sizes) < 1 or len(set(sizes)) != len(sizes):
            raise ValueError("capture batch sizes must be positive and distinct")
        return sorted(sizes)


class SGLangProfile(_Model):
    """The FlashInfer knobs an SGLang version sets, with or without --enable-deterministic-inference."""

    version: str  # one of sglang.VERSIONS (apply_profile refuses another)
    deterministic_inference: bool = False
    # backend sglang's DLLM_EXTEND cells: each request's last block of this many tokens over the rest as prefix
    dllm_block_size: int = Field(default=32, ge=1)


class FlashInferOpts(_Model):
    backend: Literal["fa2", "fa3", "auto"] = "fa2"
    ragged_backend: Optional[Literal["fa2", "fa3", "auto"]] = None
    disable_split_kv: bool = False
    fixed_split_size: Optional[int] = Field(default=None, ge=1)
    kv_layout: Literal["NHD", "HND"] = "NHD"
    workspace_mb: int = Field(default=512, ge=16)
    profile_kernels: bool = True
    # Kernel names (torch.profiler, ~3 s to start in each process) for the first cell of each distinct
    # (path, plan) in a task, within the first N repeats (null: any repeat). Rows without names pass the audit.
    profile_repeats: Optional[int] = Field(default=1, ge=1)
    decode: DecodeOpts = DecodeOpts()


# Spec fields that change no row: claims, size guards, crash isolation, the record of expanded generators
# (their requests and cases are in the spec) (baselines and jobs ignore them).
ROW_NEUTRAL = ("expect", "limits", "isolation", "sweep", "swept")
Fault = Literal["crash", "hang", "known_bug_crash", "known_bug_pass"]


class ReferenceOpts(_Model):
    variant: Literal["exact", "split_kv", "canary"] = "exact"
    kv_tile: int = Field(default=64, ge=1)
    num_sms: int = Field(default=8, ge=1)
    # Negative controls for crash isolation, per case: its cells kill their process (crash), never return
    # (hang), or are a known bug that crashes (or passes) when run anyway.
    faults: Dict[str, Fault] = Field(default_factory=dict)


class _Profiled(_Model):
    # The kernels torch ran (torch.profiler; on the CPU the aten attention ops), for the kernel audit: the first
    # cell of each (path, plan) in a task, within the first N repeats (null: any repeat).
    profile_kernels: bool = True
    profile_repeats: Optional[int] = Field(default=1, ge=1)


class SdpaOpts(_Profiled):
    """backend sdpa: torch's scaled_dot_product_attention with one kernel pinned (sdpa_kernel of that backend
    alone). CPU: math or flash (torch's CPU flash kernel); efficient and cudnn need CUDA."""

    kernel: Literal["flash", "efficient", "cudnn", "math"] = "flash"


class FlexOpts(_Profiled):
    """backend flex: FlexAttention over the batch packed as one sequence with a document + causal block mask."""

    compile: Optional[bool] = None  # torch.compile'd flex_attention; None: on CUDA only (CPU runs it eager)
    block_size: int = Field(default=128, ge=16)


class IsolationOpts(_Model):
    """Cells that crash, hang or poison the CUDA context run in sacrificial workers (run/runner.py)."""

    # run: known-bug cells alone in isolated workers; skip: record them unrun; inline: the gate lifted,
    # they run in their shard like any cell (a crash there is isolated like any crash)
    known_bugs: Literal["run", "skip", "inline"] = "run"
    samples: int = Field(default=1, ge=1)  # known-bug cells run per bug and run; a reproduced bug stops there
    cell_timeout_s: float = Field(default=300, gt=0)  # a cell running longer has its process ended
    split_crashed: bool = True  # a shard whose process died re-runs its cells one per worker


class Limits(_Model):
    """Size guards, checked before anything runs (raise them with --set limits.max_rows=N)."""

    max_tokens: int = Field(default=1_048_576, ge=1)  # per case: qo_len + prefix_len over its members
    max_rows: int = Field(default=2_000_000, ge=1)  # per run: members x modes x phases x repeats x GPU slots


class JobSpec(_Model):
    name: str = Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")  # run ids start with it
    # sglang: SGLang's own FlashInferAttnBackend (kernels/backends/sglang.py), the version `sglang:` names
    # sdpa, flex: the trainer's attention (torch's SDPA with a pinned kernel, FlexAttention) on the same cells
    backend: Literal["auto", "flashinfer", "reference", "sglang", "sdpa", "flex"] = "auto"
    env: Dict[str, Union[str, int, bool]] = Field(default_factory=dict)
    deterministic: bool = False  # also claims batch: bitwise unless expect says otherwise
    expect: Dict[Axis, Level] = Field(default_factory=dict)  # claims per comparison axis (judge/claims.py)
    modes: List[Mode] = Field(default_factory=lambda: _all_modes(), min_length=1)
    phases: List[Phase] = Field(default_factory=lambda: _prefill_only(), min_length=1)
    dtype: DType = "bf16"
    heads: Heads
    head_dim: int = Field(ge=8, le=512)
    page_size: int = Field(default=16, ge=1)
    causal: bool = True
    seed: int = 0
    # Request values: torch's CPU generator (normal, drawn on CPU threads: the bits of every run so far), or
    # a counter hash drawn on the task's own device (kernels/inputs.py counter_values: same bits on any device)
    draws: Literal["cpu", "counter"] = "cpu"
    repeats: int = Field(default=2, ge=1)
    repeats_per_task: Optional[int] = Field(default=None, ge=1)
    store_tensors: bool = True  # keep the bytes of the first tensor per digest (diff statistics need them)
    requests: Dict[str, Request] = Field(min_length=1)  # names may not contain '#'

    cases: Dict[str, List[str]] = Field(min_length=1)
    flashinfer: FlashInferOpts = FlashInferOpts()
    reference: ReferenceOpts = ReferenceOpts()
    sdpa: SdpaOpts = SdpaOpts()
    flex: FlexOpts = FlexOpts()
    # Each row's error against attention computed from the same inputs in fp64 on the CPU (fp64) or in fp32 on
    # the task's device (fp32): the row's ref_error column (kernels/referror.py); none: "".
    reference_error: Literal["none", "fp64", "fp32"] = "none"
    isolation: IsolationOpts = IsolationOpts()
    limits: Limits = Limits()
    # Generated cases (sweep.py): expanded at validation into requests and cases, then recorded in `swept`;
    # a validated spec always has sweep: [] (so a stored spec validates to itself).
    sweep: List[Generator] = Field(default_factory=list)
    swept: List[Generator] = Field(default_factory=list)
    # SGLang's knobs (sglang.py) fill those the job did not set; sglang_overridden lists the knobs it
    # set otherwise (recomputed at each validation, so a stored spec validates to itself).
    sglang: Optional[SGLangProfile] = None
    sglang_overridden: List[str] = Field(default_factory=list)
    # One package at several versions (versions.py): a run per version, each in a Ray runtime_env of its own
    versions: Optional[Versions] = None

    @model_validator(mode="before")
    @classmethod
    def _expand_sweep(cls, data: object) -> object:
        if isinstance(data, dict) and data.get("sweep"):
            return expand(data, cls.model_fields["page_size"].default)
        return data

    @model_validator(mode="before")
    @classmethod
    def _apply_sglang(cls, data: object) -> object:
        # Defined after _expand_sweep, so it runs first (pydantic runs "before" validators last-defined first):
        # a sweep sees the profile's page_size.
        return apply_profile(data) if isinstance(data, dict) else data

    @field_validator("env")
    @classmethod
    def _env(cls, env: Dict[str, Union[str, int, bool]]) -> Dict[str, str]:
        out = {}
        for name, value in env.items():
            if name in FORBIDDEN_FLAGS:
                raise ValueError(f"{name} is set by Ray per task; a job spec may not set it")
            if name == TENSOR_CORE_FLAG:  # SGLang reads it as value.lower() == "true" (sglang.py)
                text = str(value).lower() if isinstance(value, bool) else str(value)
                if text.lower() not in ("true", "false"):
                    raise ValueError(f"{name}={text!r}: SGLang reads only 'true' as true (anything else as false); "
                                     "write true or false")
                out[name] = text
                continue
            text = ("1" if value else "0") if isinstance(value, bool) else str(value)
            if name in BOOL_FLAGS:
                parse_bool(name, text)
            if name in TASK_SETTINGS:
                TASK_SETTINGS[name](text)
            out[name] = text
        return out

    @field_validator("modes", "phases")
    @classmethod
    def _unique(cls, values: List[str], info) -> List[str]:
        if len(set(values)) != len(values):
            raise ValueError(f"{info.field_name} must not repeat")
        return values

    @model_validator(mode="after")
    def _sglang_backend(self) -> "JobSpec":
        if self.backend == "sglang" and (self.sglang is None or not reads_use_paged(self.sglang.version)):
            raise ValueError("backend: sglang runs SGLang's own FlashInferAttnBackend; it needs sglang: {version: ...} "
                             f"of {SGLANG_BACKEND_MIN} or newer (the first that reads SGLANG_FLASHINFER_USE_PAGED)")
        return self

    @model_validator(mode="after")
    def _cases(self) -> "JobSpec":
        for case, names in self.cases.items():
            if not names:
                raise ValueError(f"cases.{case}: a case needs at least one request")
            for name in names:
                if name not in self.requests:
                    raise ValueError(f"cases.{case}: unknown request {name!r}")
            if len(set(names)) != len(names):
                raise ValueError(f"cases.{case}: a request may appear once per case")
            tokens = self.case_tokens(case)
            if tokens > self.limits.max_tokens:
                raise ValueError(f"cases.{case}: {tokens} tokens (qo_len + prefix_len over its requests, copies "
                                 f"counted) exceed limits.max_tokens ({self.limits.max_tokens})")
        lens: Dict[str, int] = {}
        for name, request in self.requests.items():
            if COPY in name:
                raise ValueError(f"requests.{name}: '{COPY}' is reserved for copies")
            if request.prefix is not None and request.prefix not in self.requests:
                raise ValueError(f"requests.{name}.prefix: {request.prefix!r} names no request")
        for name in (m for case in self.cases for m in self.members(case)):
            key, plen = self.prefix_key(name), self.request(name).prefix_len
            if lens.setdefault(key, plen) != plen:
                raise ValueError(f"requests.{name}: prefix {key!r} used with two prefix_len values")
        for case in self.cases:
            names = self.members(case)
            keys = [self.prefix_key(n) for n in names if self.request(n).prefix_len]
            for key in {k for k, n in Counter(keys).items() if n > 1}:
                if lens[key] % self.page_size:
                    raise ValueError(
                        f"cases.{case}: shared prefix {key!r} needs prefix_len a multiple of page_size"
                    )
        return self

    def members(self, case: str) -> List[str]:
        """The requests of a case, copies expanded to name#0, name#1, ..."""
        out = []
        for name in self.cases[case]:
            n = self.requests[name].copies
            out.extend([name] if n == 1 else [copy_name(name, i) for i in range(n)])
        return out

    def case_tokens(self, case: str) -> int:
        """Tokens of one case: qo_len + prefix_len over its requests, copies counted."""
        return sum((r.qo_len + r.prefix_len) * r.copies for r in (self.requests[n] for n in self.cases[case]))

    def request(self, name: str) -> Request:
        return self.requests[base_request(name)]

    def prefix_key(self, name: str) -> str:
        return self.request(name).prefix or name

    @property
    def bool_flags(self) -> Dict[str, bool]:
        return {k: parse_bool(k, str(v)) for k, v in self.env.items() if k in BOOL_FLAGS}


def spec_from_dict(data: object, source: str = "<spec>", overrides: Sequence[str] = ()) -> JobSpec:
    """Validate a parsed job file; raise DetrunError naming the source and field (or the --set among
    overrides that made the bad value, messages.py)."""
    if not isinstance(data, dict):
        raise DetrunError(f"{source}: a job spec must be a mapping of fields, got {kind_of(data)}")
    try:
        return JobSpec.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        text = error_text(err, JobSpec)
        item = blamed_override(tuple(str(p) for p in err["loc"]), text, overrides)
        raise DetrunError(f"--set {item}: {text}" if item else f"{source}: {text}") from None


def as_validated(data: dict) -> dict:
    """A stored spec as this version reads it (fields added since it was stored take their defaults), so
    runs stored before and after a new field compare as the same spec; one that no longer validates as is."""
    try:
        return JobSpec.model_validate(data).model_dump(mode="json")
    except ValidationError:
        return data


def apply_overrides(data: dict, overrides: List[str], source: str) -> dict:
    """Apply KEY.PATH=VALUE overrides (VALUE read as YAML) to a parsed job file."""
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise DetrunError(f"--set {item!r}: expected KEY=VALUE (e.g. flashinfer.backend=fa3)")
        node = data
        *parents, leaf = key.split(".")
        for i, part in enumerate(parents):
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise DetrunError(f"--set {item}: {'.'.join(parents[:i + 1])} is {kind_of(node)} in {source}, "
                                  "not a mapping")
        try:
            node[leaf] = yaml.safe_load(raw)
        except yaml.YAMLError:
            raise DetrunError(f"--set {item!r}: the value is not valid YAML") from None
    return data


def load_spec(path: Union[str, Path], overrides: Optional[List[str]] = None) -> JobSpec:
    """Read, override and validate a job file; its rows on one GPU slot must fit limits.max_rows."""
    from .matrix import check_size  # matrix imports this module

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise DetrunError(f"{path}: cannot read job spec ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise DetrunError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise DetrunError(f"{path}: not valid YAML{where}") from None
    if data is None:
        raise DetrunError(f"{path}: the file is empty (a job spec is a mapping: name, heads, requests, cases, ...)")

    def checked(doc: object, sets: Sequence[str] = ()) -> JobSpec:
        spec = spec_from_dict(absolute_wheelhouse(doc, path.parent), str(path), sets)  # wheelhouse: by the file
        check_size(spec, 1, str(path))
        return spec

    if not overrides or not isinstance(data, dict):
        return checked(data)
    original = copy.deepcopy(data)
    try:
        return checked(apply_overrides(data, overrides, str(path)), overrides)
    except DetrunError as exc:
        if not str(exc).startswith(f"{path}: "):
            raise  # blamed on a --set already
        # The error is not where a --set wrote: blame the first --set after which the spec no longer holds.
        for n in range(len(overrides) + 1):
            if not _valid(checked, apply_overrides(copy.deepcopy(original), overrides[:n], str(path))):
                break
        if n == 0:
            raise  # the file itself is wrong
        raise DetrunError(f"--set {overrides[n - 1]}: {str(exc).removeprefix(f'{path}: ')}") from None


def _valid(check: Callable[[object], object], doc: object) -> bool:
    try:
        check(doc)
    except DetrunError:
        return False
    return True
