"""SGLang profiles: the FlashInfer knobs SGLang sets, per (version, --enable-deterministic-inference).

PROFILES is the one table: each knob's value and where SGLang sets it (file:line at that version's tag,
read from the released wheel, whose `sglang/` is the tag's `python/sglang/`), and the env flags that
version reads. A job's `sglang: {version, deterministic_inference}` fills the knobs it did not set
(apply_profile, at spec validation); a knob it set overrides the profile and is recorded in
`sglang_overridden`. effective_knobs(spec) is what every row records (its `knobs` column).
No torch, no pydantic: the driver side imports it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Tuple, cast

FB = "python/sglang/srt/layers/attention/flashinfer_backend.py"
SA = "python/sglang/srt/server_args.py"
ENV = "python/sglang/srt/environ.py"
CG = "python/sglang/srt/model_executor/cuda_graph_runner.py"

TENSOR_CORE_FLAG = "SGLANG_FLASHINFER_USE_TENSOR_CORE"
SGLANG_BACKEND_MIN = "0.5.11"  # the first SGLang that reads SGLANG_FLASHINFER_USE_PAGED (PR #24165)
MIB = 1 << 20


@dataclass(frozen=True)
class Knob:
    value: object
    cite: str  # file:line at the profile's version
    env: Optional[str] = None  # the env flag SGLang reads this value from (an int), if any
    unit: int = 1  # the flag's unit in the knob's (bytes for a MiB knob)


# SGLang 0.5.10 on an H200 (tp < 4): [1, 2, 4, 8, 12, 16, 24, ..., 256]
CAPTURE_BS_0510 = [1, 2, 4, 8, 12] + list(range(16, 257, 8))


def _profile_0510(det: bool) -> dict:
    """SGLang 0.5.10's FlashInferAttnBackend (flashinfer-python 0.6.7.post2; 0.5.10.post1 pins 0.6.7.post3
    and its four cited files are the same)."""
    knobs = {
        "deterministic": Knob(det, f"{SA}:666 (--enable-deterministic-inference), {FB}:185-187; eager prefill "
                                   f"paged when set: {FB}:488-490"),
        "page_size": Knob(1, f"{SA}:2546-2548 (page_size None -> 1); decode plans pass 1: {FB}:1152, {FB}:1171; "
                             f"prefill: {FB}:1501"),
        "flashinfer.backend": Knob("fa2", f"{FB}:129 (prefill_backend = 'fa2'), {FB}:272-276 (paged wrappers)"),
        "flashinfer.ragged_backend": Knob("auto", f"{FB}:248-262 ('auto'; 'cutlass' only on SM100 with piecewise "
                                                  "CUDA graphs disabled)"),
        "flashinfer.kv_layout": Knob("NHD", f"{FB}:261, {FB}:274, {FB}:288, {FB}:569"),
        "flashinfer.workspace_mb": (
            Knob(2048, f"{FB}:200 (sets SGLANG_FLASHINFER_WORKSPACE_SIZE to 2 GiB)") if det else
            Knob(384, f"{ENV}:349 (384 MiB), read at {FB}:206 ({FB}:170-180 raise it to 512 MiB for "
                      "Qwen2/Qwen3/MiMo architectures)", env="SGLANG_FLASHINFER_WORKSPACE_SIZE", unit=MIB)),
        "flashinfer.fixed_split_size": (
            Knob(4096, f"{FB}:193-195, passed to the paged plan only: {FB}:509, {FB}:1506",
                 env="SGLANG_FLASHINFER_PREFILL_SPLIT_TILE_SIZE") if det else
            Knob(None, f"{FB}:188, {FB}:509")),
        "flashinfer.disable_split_kv": Knob(False, f"{FB}:1493-1511 (the prefill plan passes no disable_split_kv)"),
        "flashinfer.decode.tensor_cores": (
            Knob(True, f"{FB}:192") if det else
            Knob(None, f"{FB}:142-149 -> {FB}:1687-1717: {TENSOR_CORE_FLAG} == 'true', else GQA group >= 4 for "
                       "fp16/bf16 KV")),
        "flashinfer.decode.fixed_split_size": (
            Knob(2048, f"{FB}:196-198, {FB}:440 (eager decode)", env="SGLANG_FLASHINFER_DECODE_SPLIT_TILE_SIZE")
            if det else Knob(None, f"{FB}:189, {FB}:440 (eager decode)")),
        "flashinfer.decode.disable_split_kv": Knob(False, f"{FB}:441 (eager decode)"),
        "flashinfer.decode.graph_fixed_split_size": Knob(None, f"{FB}:589 (capture), {FB}:711 (replay)"),
        "flashinfer.decode.graph_disable_split_kv": Knob(det, f"{FB}:190, {FB}:199; {FB}:590 (capture), {FB}:712 "
                                                              "(replay)"),
        "flashinfer.decode.capture_batch_sizes": Knob(
            CAPTURE_BS_0510, f"{SA}:1206-1215 (H200, tp < 4: cuda_graph_max_bs 256), {SA}:1231-1233, "
                             f"{SA}:1352-1373; padded to the smallest >= bs: {CG}:1088-1091"),
    }
    # Env flags a job may set under the profile (those a knob reads are added below); any other SGLANG_*
    # flag is refused with its reason here, or as one this version's FlashInfer path does not read.
    reads = {k.env: k.cite for k in knobs.values() if k.env}
    refused = {
        "SGLANG_FLASHINFER_USE_PAGED": "SGLang 0.5.10 does not read it (added after 0.5.10, PR #24165; "
                                       f"0.5.10 picks the wrapper at {FB}:488-490)",
        "SGLANG_ENABLE_DETERMINISTIC_INFERENCE": f"SGLang 0.5.10 overwrites it from the server flag ({SA}:3397-3399): "
                                                 "set sglang.deterministic_inference",
    }
    if det:
        refused.update({
            TENSOR_CORE_FLAG: f"no effect: deterministic inference forces tensor-core decode ({FB}:192)",
            "SGLANG_FLASHINFER_WORKSPACE_SIZE": f"no effect: deterministic inference sets it to 2 GiB ({FB}:200)",
        })
    else:
        reads[TENSOR_CORE_FLAG] = f"{FB}:1688-1690"
        for flag in ("SGLANG_FLASHINFER_PREFILL_SPLIT_TILE_SIZE", "SGLANG_FLASHINFER_DECODE_SPLIT_TILE_SIZE"):
            refused[flag] = f"SGLang 0.5.10 reads it only with deterministic inference ({FB}:191-198)"
    return {"knobs": knobs, "reads": reads, "refused": refused}


# (version, deterministic_inference) -> {"knobs": {spec path: Knob}, "reads": {flag: cite}, "refused": {flag: why}}
PROFILES: Dict[Tuple[str, bool], dict] = {
    ("0.5.10", True): _profile_0510(True),
    ("0.5.10", False): _profile_0510(False),
}
VERSIONS = sorted({v for v, _ in PROFILES})
KNOB_PATHS = tuple(PROFILES[("0.5.10", True)]["knobs"])  # every profile sets the same knobs


def _release(version: str) -> Tuple[int, ...]:
    return tuple(int(p) for p in version.split(".")[:3] if p.isdigit())


def reads_use_paged(version: str) -> bool:
    """Does this SGLang release read SGLANG_FLASHINFER_USE_PAGED (0.5.11 and later)?"""
    return _release(version) >= _release(SGLANG_BACKEND_MIN)


def profile_name(version: str, deterministic: bool) -> str:
    return f"sglang-{version}-{'deterministic' if deterministic else 'default'}"


def _get(data: dict, path: str) -> Tuple[object, bool]:
    node: object = data
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return None, False
        node = node[part]
    return node, True


def _set(data: dict, path: str, value: object) -> None:
    *parents, leaf = path.split(".")
    node = data
    for part in parents:
        child = node.get(part, {})
        if not isinstance(child, dict):
            return  # not a mapping: validation names the field
        node[part] = node = dict(child)
    node[leaf] = copy.deepcopy(value)


def _env_int(flag: str, raw: object, unit: int) -> int:
    text = str(raw).strip()
    if not text.isdigit() or int(text) < unit or int(text) % unit:
        what = f"a positive multiple of {unit} (bytes)" if unit > 1 else "a positive integer"
        raise ValueError(f"env.{flag}: {raw!r} is not {what} (SGLang would fall back to its default silently)")
    return int(text) // unit


def _profile_of(raw: object) -> Tuple[str, bool, dict]:
    if not isinstance(raw, dict):
        raise ValueError("sglang: a mapping {version: ..., deterministic_inference: true|false}")
    version, det = str(raw.get("version", "")), raw.get("deterministic_inference", False)
    if not isinstance(det, bool):
        raise ValueError("sglang.deterministic_inference: true or false")
    if (version, det) not in PROFILES:
        raise ValueError(f"sglang.version: unknown SGLang version {version!r} (known: {', '.join(VERSIONS)})")
    return version, det, PROFILES[(version, det)]


def _values(profile: dict, version: str, env: Mapping[str, object]) -> Dict[str, object]:
    """The profile's knob values under the job's env; refuses a SGLANG_* flag the version does not read."""
    for flag in sorted(env):
        if flag in profile["refused"]:
            raise ValueError(f"env.{flag}: {profile['refused'][flag]}")
        if flag.startswith("SGLANG_") and flag not in profile["reads"]:
            raise ValueError(f"env.{flag}: not a flag SGLang {version}'s FlashInfer path reads (the profile reads: "
                             f"{', '.join(sorted(profile['reads']))})")
    return {path: _env_int(k.env, env[k.env], k.unit) if k.env in env else k.value
            for path, k in profile["knobs"].items()}


def _same(a: object, b: object) -> bool:
    return sorted(a) == sorted(b) if isinstance(a, list) and isinstance(b, list) else a == b and type(a) is type(b)


def apply_profile(data: dict) -> dict:
    """The job-file dict with its SGLang profile's knobs filled in where the job did not set them, and
    `sglang_overridden` listing the knobs the job set to another value (recomputed each time, so a stored
    spec validates to itself). Raises ValueError (one line) for an unknown version or an env flag the
    profile's version does not read."""
    if data.get("sglang") is None:
        if data.get("sglang_overridden"):
            raise ValueError("sglang_overridden: only a spec with an sglang profile overrides one")
        return data
    version, det, profile = _profile_of(data["sglang"])
    raw_env, raw_declared = data.get("env"), data.get("sglang_overridden")
    env: Mapping[str, object] = raw_env if isinstance(raw_env, dict) else {}
    # A knob recorded as overridden but absent keeps detrun's default (a dump without defaults drops it)
    declared: List[object] = raw_declared if isinstance(raw_declared, list) else []
    out = dict(data)
    overridden = []
    for path, value in _values(profile, version, env).items():
        have, present = _get(out, path)
        if not present and path in declared:
            overridden.append(path)
        elif not present:
            _set(out, path, value)
        elif not _same(have, value):
            overridden.append(path)
    out["sglang_overridden"] = sorted(overridden)
    return out


def decode_tensor_cores(choice: Optional[bool], env: Mapping[str, object], qo_heads: int, kv_heads: int,
                        dtype: str) -> bool:
    """Tensor-core decode: the spec's choice, else SGLang 0.5.10's should_use_tensor_core (FB:1671-1717):
    SGLANG_FLASHINFER_USE_TENSOR_CORE == 'true' (any case; anything else is false), else a GQA group >= 4
    for fp16/bf16 KV (fp32 KV: no). flashinfer 0.6.7.post3 has no _grouped_size_compiled_for_decode_kernels,
    so SGLang's older check (FB:1692-1705) falls through."""
    if choice is not None:
        return choice
    raw = env.get(TENSOR_CORE_FLAG)
    if raw is not None:
        return str(raw).lower() == "true"
    return dtype in ("bf16", "fp16") and qo_heads // kv_heads >= 4


def profile_label(sglang: object) -> Optional[str]:
    """The profile's name for a spec's `sglang` (a model or a stored dict), None without one."""
    if sglang is None:
        return None
    get = sglang.get if isinstance(sglang, dict) else lambda k: getattr(sglang, k)
    return profile_name(cast(str, get("version")), bool(get("deterministic_inference")))


def effective_knobs(spec) -> dict:
    """Every FlashInfer knob the task runs with (spec paths), the profile's name (None without one) and the
    knobs the job overrode: a row's `knobs` column (informational: the plan fields explain differences)."""
    knobs: Dict[str, object] = {"profile": profile_label(spec.sglang)}
    for path in KNOB_PATHS:
        node = spec
        for part in path.split("."):
            node = getattr(node, part)
        knobs[path] = list(node) if isinstance(node, (list, tuple)) else node
    fi = spec.flashinfer
    knobs["flashinfer.ragged_backend"] = fi.ragged_backend or fi.backend
    knobs["flashinfer.decode.tensor_cores"] = decode_tensor_cores(
        fi.decode.tensor_cores, spec.env, spec.heads.qo, spec.heads.kv, spec.dtype)
    knobs["overridden"] = list(spec.sglang_overridden)
    return knobs


def profile_values(version: str, deterministic: bool) -> Dict[str, object]:
    """The profile's knob values with no env flags set (spec path -> value)."""
    return {path: k.value for path, k in PROFILES[(version, deterministic)]["knobs"].items()}


def citations(version: str, deterministic: bool) -> Dict[str, str]:
    return {path: k.cite for path, k in PROFILES[(version, deterministic)]["knobs"].items()}
