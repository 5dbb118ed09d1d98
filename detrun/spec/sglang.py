"""SGLang profiles: the FlashInfer knobs SGLang sets, per (version, --enable-deterministic-inference).

PROFILES is the one table: each knob's value and where SGLang sets it (file:line at that version's tag,
read from the released wheel, whose `sglang/` is the tag's `python/sglang/`), the env flags that version
reads, and what its `cudagraph` prefill is (full_prefill_graph). A job's `sglang: {version,
deterministic_inference}` fills the knobs it did not set (apply_profile, at spec validation); a knob it set
overrides the profile and is recorded in `sglang_overridden`. effective_knobs(spec, flags) is what every
row records (its `knobs` column). No torch, no pydantic: the driver side imports it.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Tuple, cast

from ..envflags import DETERMINISTIC_FLAG, TENSOR_CORE_FLAG, USE_PAGED_FLAG, TaskFlags
from .sglang_releases import ENV, FB, LINES, SRT, lines, release_key, wiring_of

# 0.5.10's server arguments and decode graph runner
SA = f"{SRT}/server_args.py"
CG = f"{SRT}/model_executor/cuda_graph_runner.py"
# 0.5.23 moved server-argument resolution into arg_groups/ and the graph runners into model_executor/runner/
MEM = f"{SRT}/arg_groups/memory_hook.py"
CGH = f"{SRT}/arg_groups/cuda_graph_hook.py"
OVR = f"{SRT}/arg_groups/overrides.py"
SERVE = f"{SRT}/arg_groups/serving_hook.py"
EXEC = f"{SRT}/arg_groups/fields/exec_.py"
SETUP = f"{SRT}/model_executor/model_runner_components/cuda_graph_setup.py"
BASE_RUN = f"{SRT}/model_executor/runner/base_cuda_graph_runner.py"
DECODE_RUN = f"{SRT}/model_executor/runner/decode_cuda_graph_runner.py"
PREFILL_RUN = f"{SRT}/model_executor/runner/prefill_cuda_graph_runner.py"
COMMON = f"{SRT}/utils/common.py"

SGLANG_BACKEND_MIN = "0.5.11"  # the first SGLang that reads SGLANG_FLASHINFER_USE_PAGED (PR #24165)
WORKSPACE_FLAG = "SGLANG_FLASHINFER_WORKSPACE_SIZE"
PREFILL_TILE_FLAG = "SGLANG_FLASHINFER_PREFILL_SPLIT_TILE_SIZE"
DECODE_TILE_FLAG = "SGLANG_FLASHINFER_DECODE_SPLIT_TILE_SIZE"
MIB = 1 << 20


@dataclass(frozen=True)
class Knob:
    value: object
    cite: str  # file:line at the profile's version
    env: Optional[str] = None  # the env flag SGLang reads this value from (an int), if any
    unit: int = 1  # the flag's unit in the knob's (bytes for a MiB knob)


# Decode capture batch sizes on an H200 (tp < 4: max 256), the same in 0.5.10 and 0.5.23:
# [1, 2, 4, 8, 12, 16, 24, ..., 256]
CAPTURE_BS_H200 = [1, 2, 4, 8, 12] + list(range(16, 257, 8))
CAPTURE_BS_0510 = CAPTURE_BS_H200  # DecodeOpts' default


def _prefill_buckets(max_tokens: int) -> Tuple[int, ...]:
    """SGLang 0.5.23's prefill capture token counts up to max_tokens (CGH:480-497)."""
    sizes = (list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32)) + list(range(576, 1025, 64))
             + list(range(1280, 4097, 256)) + list(range(4608, max_tokens + 1, 512)))
    return tuple(n for n in sizes if n <= max_tokens)


@dataclass(frozen=True)
class FullPrefillGraph:
    """SGLang's full prefill CUDA graph (plain EXTEND; 0.5.23, opt-in): what detrun's `cudagraph` prefill models
    under that version. Every plan is paged (FB:820-838), split-KV left to FlashInfer (no split arguments),
    over `slots` requests (zero-length sentinels after the batch) with total_num_rows fixed by the largest
    bucket, which SGLang captures first; its wrappers have a workspace of their own (workspace_bytes)."""

    slots: int
    buckets: Tuple[int, ...]  # captured aggregate token counts; a batch replays the smallest >= its tokens
    max_padding: Optional[int]  # a batch whose bucket exceeds this many times its tokens runs eager (None: no limit)
    cite: str

    def takes(self, qo_lens: List[int]) -> bool:
        """Whether SGLang replays the graph for a batch of these new-token counts (else it runs eager)."""
        tokens = sum(qo_lens)
        bucket = next((n for n in self.buckets if n >= tokens), None)
        padded = self.max_padding is not None and bucket is not None and bucket > tokens * self.max_padding
        return len(qo_lens) <= self.slots and bucket is not None and not padded

    def capture_lens(self) -> List[int]:
        """Each slot's tokens in SGLang's first capture: the largest bucket, then zero-length sentinels
        (PREFILL_RUN:1533-1540; one request, as a model's context is at least the bucket)."""
        return [max(self.buckets)] + [0] * (self.slots - 1)

    def workspace_bytes(self, qo_heads: int, kv_heads: int, head_dim: int, num_sm: int) -> int:
        """The graph wrappers' own float workspace: FB:1205-1247 (_full_cg_prefill_workspace_bytes, 1.25 x
        FlashInfer's split-KV worst case for the largest bucket)."""
        group, tokens = qo_heads // kv_heads, max(self.buckets)
        max_qo_len = (tokens - self.slots + 1) * group
        cta_tile_q = 128 if max_qo_len > 64 and head_dim < 256 else 64 if max_qo_len > 16 else 16
        tiles = -(-tokens * group // cta_tile_q) + self.slots - 1
        per_row = qo_heads * max(2 * num_sm // kv_heads, tiles) * cta_tile_q * 4
        return int((per_row * head_dim + per_row) * 1.25)


# SGLang 0.5.23 on an H200 (tp 1): chunked prefill 8192 (MEM:146-154) -> 16 request slots, buckets up to 8192
FULL_PREFILL_GRAPH_0523 = FullPrefillGraph(
    slots=8192 // 512, buckets=_prefill_buckets(8192), max_padding=2,
    cite=(f"{FB}:820-838 (plain EXTEND: use_ragged=False, no split arguments), {FB}:1249-1313 (its wrappers and "
          f"workspace, sized at {FB}:1205-1247), {FB}:1342-1349; slots: {SETUP}:581-589 (chunked_prefill_size // "
          f"512); buckets: {MEM}:233-236, {MEM}:265-268, {CGH}:480-497; captured largest first: {PREFILL_RUN}:1715; "
          f"replay: {PREFILL_RUN}:1271-1293 (slot-padded plan), eager above {PREFILL_RUN}:1363-1364, "
          f"{PREFILL_RUN}:1414-1420"))


def _cite(cites: Mapping[str, object], key: str, det: bool) -> str:
    text = cites[key]
    return text if isinstance(text, str) else cast(Tuple[str, str], text)[0 if det else 1]


def _profile(version: str, det: bool, cites: Mapping[str, object],
             prefill_graph: Optional[FullPrefillGraph] = None) -> dict:
    """One profile: the knobs (the same values in every known version; each with its version's line: cites[path],
    one text or a (deterministic, default) pair), the env flags the version reads and those it refuses, and
    how its `cudagraph` prefill plans (None: detrun's own capture of the eager choice, no SGLang path)."""
    c = lambda key: _cite(cites, key, det)  # noqa: E731
    knobs = {
        "deterministic": Knob(det, c("deterministic")),
        "page_size": Knob(1, c("page_size")),
        "flashinfer.backend": Knob("fa2", c("flashinfer.backend")),
        "flashinfer.ragged_backend": Knob("auto", c("flashinfer.ragged_backend")),
        "flashinfer.kv_layout": Knob("NHD", c("flashinfer.kv_layout")),
        "flashinfer.workspace_mb": (Knob(2048, c("flashinfer.workspace_mb")) if det else
                                    Knob(384, c("flashinfer.workspace_mb"), env=WORKSPACE_FLAG, unit=MIB)),
        "flashinfer.fixed_split_size": (Knob(4096, c("flashinfer.fixed_split_size"), env=PREFILL_TILE_FLAG) if det
                                        else Knob(None, c("flashinfer.fixed_split_size"))),
        "flashinfer.disable_split_kv": Knob(False, c("flashinfer.disable_split_kv")),
        "flashinfer.decode.tensor_cores": Knob(True if det else None, c("flashinfer.decode.tensor_cores")),
        "flashinfer.decode.fixed_split_size": (
            Knob(2048, c("flashinfer.decode.fixed_split_size"), env=DECODE_TILE_FLAG) if det else
            Knob(None, c("flashinfer.decode.fixed_split_size"))),
        "flashinfer.decode.disable_split_kv": Knob(False, c("flashinfer.decode.disable_split_kv")),
        "flashinfer.decode.graph_fixed_split_size": Knob(None, c("flashinfer.decode.graph_fixed_split_size")),
        "flashinfer.decode.graph_disable_split_kv": Knob(det, c("flashinfer.decode.graph_disable_split_kv")),
        "flashinfer.decode.capture_batch_sizes": Knob(CAPTURE_BS_H200, c("flashinfer.decode.capture_batch_sizes")),
    }
    # Env flags a job may set under the profile (those a knob reads are added below); any other SGLANG_*
    # flag is refused with its reason here, or as one this version's FlashInfer path does not read.
    reads = {k.env: k.cite for k in knobs.values() if k.env}
    refused = {DETERMINISTIC_FLAG: f"SGLang {version} overwrites it from the server flag ({c('env.deterministic')}): "
                                   "set sglang.deterministic_inference"}
    if "env.use_paged" in cites:
        reads[USE_PAGED_FLAG] = c("env.use_paged")
    else:
        refused[USE_PAGED_FLAG] = f"SGLang {version} does not read it ({c('env.no_use_paged')})"
    if det:
        refused.update({
            TENSOR_CORE_FLAG: "no effect: deterministic inference forces tensor-core decode "
                              f"({c('env.det_tensor_cores')})",
            WORKSPACE_FLAG: f"no effect: deterministic inference sets it to 2 GiB ({c('env.det_workspace')})",
        })
    else:
        reads[TENSOR_CORE_FLAG] = c("env.tensor_core")
        for flag in (PREFILL_TILE_FLAG, DECODE_TILE_FLAG):
            refused[flag] = f"SGLang {version} reads it only with deterministic inference ({c('env.split_tiles')})"
    return {"knobs": knobs, "reads": reads, "refused": refused, "prefill_graph": prefill_graph}


# SGLang 0.5.10's FlashInferAttnBackend (flashinfer-python 0.6.7.post2; 0.5.10.post1 pins 0.6.7.post3 and its four
# cited files are the same)
CITES_0510: Dict[str, object] = {
    "deterministic": f"{SA}:666 (--enable-deterministic-inference), {FB}:185-187; eager prefill paged when set: "
                     f"{FB}:488-490",
    "page_size": f"{SA}:2546-2548 (page_size None -> 1); decode plans pass 1: {FB}:1152, {FB}:1171; prefill: {FB}:1501",
    "flashinfer.backend": f"{FB}:129 (prefill_backend = 'fa2'), {FB}:272-276 (paged wrappers)",
    "flashinfer.ragged_backend": f"{FB}:248-262 ('auto'; 'cutlass' only on SM100 with piecewise CUDA graphs disabled)",
    "flashinfer.kv_layout": f"{FB}:261, {FB}:274, {FB}:288, {FB}:569",
    "flashinfer.workspace_mb": (f"{FB}:200 (sets SGLANG_FLASHINFER_WORKSPACE_SIZE to 2 GiB)",
                                f"{ENV}:349 (384 MiB), read at {FB}:206 ({FB}:170-180 raise it to 512 MiB for "
                                "Qwen2/Qwen3/MiMo architectures)"),
    "flashinfer.fixed_split_size": (f"{FB}:193-195, passed to the paged plan only: {FB}:509, {FB}:1506",
                                    f"{FB}:188, {FB}:509"),
    "flashinfer.disable_split_kv": f"{FB}:1493-1511 (the prefill plan passes no disable_split_kv)",
    "flashinfer.decode.tensor_cores": (f"{FB}:192", f"{FB}:142-149 -> {FB}:1687-1717: {TENSOR_CORE_FLAG} == 'true', "
                                                    "else GQA group >= 4 for fp16/bf16 KV"),
    "flashinfer.decode.fixed_split_size": (f"{FB}:196-198, {FB}:440 (eager decode)",
                                           f"{FB}:189, {FB}:440 (eager decode)"),
    "flashinfer.decode.disable_split_kv": f"{FB}:441 (eager decode)",
    "flashinfer.decode.graph_fixed_split_size": f"{FB}:589 (capture), {FB}:711 (replay)",
    "flashinfer.decode.graph_disable_split_kv": f"{FB}:190, {FB}:199; {FB}:590 (capture), {FB}:712 (replay)",
    "flashinfer.decode.capture_batch_sizes": f"{SA}:1206-1215 (H200, tp < 4: cuda_graph_max_bs 256), {SA}:1231-1233, "
                                             f"{SA}:1352-1373; padded to the smallest >= bs: {CG}:1088-1091",
    "env.deterministic": f"{SA}:3397-3399",
    "env.no_use_paged": f"added after 0.5.10, PR #24165; 0.5.10 picks the wrapper at {FB}:488-490",
    "env.det_tensor_cores": f"{FB}:192",
    "env.det_workspace": f"{FB}:200",
    "env.tensor_core": f"{FB}:1688-1690",
    "env.split_tiles": f"{FB}:191-198",
}

# SGLang 0.5.23 (flashinfer-python 0.7.2 pinned; the calls are the same in 0.6.7.post3): what changed from 0.5.10 is
# where the values are set, the flag (read), and the CUDA-graph path (docs/sglang-profiles.md)
CITES_0523: Dict[str, object] = {
    "deterministic": f"{EXEC}:1153-1155 (--enable-deterministic-inference), {FB}:436-438; eager prefill paged when "
                     f"set: {FB}:1058-1062",
    "page_size": f"{OVR}:1341-1362 (page_size None -> 1 on CUDA); decode plans pass 1: {FB}:1847, {FB}:1866; "
                 f"prefill: {FB}:2403",
    "flashinfer.backend": f"{FB}:335 (prefill_backend = 'fa2'), {FB}:534-547 (paged wrappers)",
    "flashinfer.ragged_backend": f"{FB}:501-525 ('auto'; 'fa2' or 'cutlass' only on SM100)",
    "flashinfer.kv_layout": f"{FB}:524, {FB}:537, {FB}:551, {FB}:1146, {FB}:1193, {FB}:1304",
    "flashinfer.workspace_mb": (
        f"{FB}:451 (sets SGLANG_FLASHINFER_WORKSPACE_SIZE to 2 GiB); allocated once per process, by name: "
        f"{FB}:457-464 (get_buffer('flashinfer_workspace'): the first backend built decides its size)",
        f"{ENV}:1221 (384 MiB), read at {FB}:460 ({FB}:421-431 raise it to 512 MiB for Qwen2/Qwen3/MiMo/Qwen3-VL "
        f"architectures); allocated once per process, by name: {FB}:457-464 (get_buffer('flashinfer_workspace'): "
        "the first backend built decides its size)"),
    "flashinfer.fixed_split_size": (f"{FB}:444-446, passed to the eager paged plan only: {FB}:1085, {FB}:2408 (the "
                                    f"full prefill graph's plan gets none: {FB}:827-838)", f"{FB}:439, {FB}:1085"),
    "flashinfer.disable_split_kv": f"{FB}:2395-2414 (the prefill plan passes no disable_split_kv)",
    "flashinfer.decode.tensor_cores": (f"{FB}:443", f"{FB}:394-401 -> {FB}:2670-2716: {TENSOR_CORE_FLAG} == 'true', "
                                                    "else GQA group >= 4 for fp16/bf16 KV (heads / attn_tp_size)"),
    "flashinfer.decode.fixed_split_size": (f"{FB}:447-449, {FB}:1017 (eager decode)",
                                           f"{FB}:440, {FB}:1017 (eager decode)"),
    "flashinfer.decode.disable_split_kv": f"{FB}:1018 (eager decode)",
    "flashinfer.decode.graph_fixed_split_size": f"{FB}:776 (capture and replay: init_forward_metadata_out_graph)",
    "flashinfer.decode.graph_disable_split_kv": f"{FB}:441, {FB}:450; {FB}:777 (capture and replay)",
    "flashinfer.decode.capture_batch_sizes": f"{MEM}:146-159 (H200, tp < 4: decode max_bs 256), {MEM}:201-205, "
                                             f"{CGH}:500-532, {BASE_RUN}:65-110; padded to the smallest >= bs: "
                                             f"{DECODE_RUN}:1626-1628, {BASE_RUN}:166-180; above: eager, "
                                             f"{DECODE_RUN}:887-891",
    "env.deterministic": f"{SERVE}:444-446",
    "env.use_paged": f"{ENV}:1219 (EnvBool), read once at {FB}:453; eager rule {FB}:1058-1062, DLLM_EXTEND graph "
                     f"{FB}:802",
    "env.det_tensor_cores": f"{FB}:443",
    "env.det_workspace": f"{FB}:451",
    "env.tensor_core": f"{FB}:2687-2689",
    "env.split_tiles": f"{FB}:442-449; read by get_int_env_var, {COMMON}:1444-1452",
}


def _at(version: str, anchor: str, span: int = 0) -> str:
    """FB (or ENV for env_* anchors) line(s) of an anchor at a release: 'FB:12', 'FB:12-14' with span 2."""
    where = ENV if anchor.startswith("env_") else FB
    return ", ".join(f"{where}:{n}" + (f"-{n + span}" if span else "") for n in lines(version, anchor))


def release_cites(version: str) -> Dict[str, object]:
    """The cites of a release 0.5.11 .. 0.5.22 from its lines (spec/sglang_releases.py LINES, FB and ENV; the
    values are the same as 0.5.10's and 0.5.23's there). Values SGLang resolves in its server arguments (page
    size, capture batch sizes, the deterministic env flag) are 0.5.23's: their lines were not read per release."""
    at = lambda anchor, span=0: _at(version, anchor, span)  # noqa: E731
    unread = f"server arguments (lines not read for {version}: as 0.5.10 and 0.5.23)"
    graph = ("capture and replay" if wiring_of(version).graph_api == "capture/replay"
             else "init_forward_metadata_out_graph")
    fixed = ", ".join(str(n - 1) for n in lines(version, "graph_decode_split"))
    return {
        "deterministic": f"{at('det_switch', 2)}; eager prefill paged when set: {at('eager_rule', 4)}",
        "page_size": f"{unread}: page_size None -> 1",
        "flashinfer.backend": f"{at('prefill_backend')} (prefill_backend = 'fa2')",
        "flashinfer.ragged_backend": f"{at('ragged_wrapper', 2)} (backend=fmha_backend: 'auto' off SM100; the "
                                     f"selection's lines not read for {version})",
        "flashinfer.kv_layout": f"{FB}:{lines(version, 'ragged_wrapper')[0] + 1} and every wrapper ('NHD')",
        "flashinfer.workspace_mb": (
            f"{at('det_workspace')} (sets SGLANG_FLASHINFER_WORKSPACE_SIZE to 2 GiB)",
            f"{at('env_workspace')} (384 MiB), read at {at('workspace_read')} ({at('qwen_workspace')}: 512 MiB for "
            "Qwen2/Qwen3/MiMo architectures)"),
        "flashinfer.fixed_split_size": (f"{at('prefill_tile', 2)}, passed to the eager paged plan: "
                                        f"{at('eager_prefill_split')}",
                                        f"{at('default_tiles')}, {at('eager_prefill_split')}"),
        "flashinfer.disable_split_kv": f"no prefill plan passes disable_split_kv (as 0.5.10 and 0.5.23; the plan "
                                       f"calls' lines not read for {version})",
        "flashinfer.decode.tensor_cores": (at("det_tc"), f"{at('tensor_core_env')}: {TENSOR_CORE_FLAG} == 'true', "
                                                         "else GQA group >= 4 for fp16/bf16 KV"),
        "flashinfer.decode.fixed_split_size": (f"{at('decode_tile', 2)}, {at('eager_decode_split')} (eager decode)",
                                               f"{FB}:{lines(version, 'default_tiles')[0] + 1}, "
                                               f"{at('eager_decode_split')} (eager decode)"),
        "flashinfer.decode.disable_split_kv": f"{at('eager_decode_nosplit')} (eager decode)",
        "flashinfer.decode.graph_fixed_split_size": f"{FB}:{fixed} ({graph})",
        "flashinfer.decode.graph_disable_split_kv": f"{at('disable_cg_split')}; {at('graph_decode_split')} ({graph})",
        "flashinfer.decode.capture_batch_sizes": f"{unread}: H200, tp < 4, max 256",
        "env.deterministic": f"{SRT}/{LINES[version]['det_env']}-"
                             f"{int(str(LINES[version]['det_env']).rpartition(':')[2]) + 2}",
        "env.use_paged": f"{at('env_use_paged')} (EnvBool), read once at {at('use_paged')}; eager rule "
                         f"{at('eager_rule', 4)}, DLLM_EXTEND graph {at('graph_dllm')}",
        "env.det_tensor_cores": at("det_tc"),
        "env.det_workspace": at("det_workspace"),
        "env.tensor_core": at("tensor_core_env"),
        "env.split_tiles": f"{FB}:{lines(version, 'det_tc')[0] - 1}-{lines(version, 'decode_tile')[0] + 2}",
    }


def release_prefill_graph(version: str) -> Optional[FullPrefillGraph]:
    """A release's full prefill graph (0.5.15 and later; None before: plain EXTEND is never captured) on an H200,
    as 0.5.23's: 16 slots, buckets up to 8192, twice the tokens at most (0.5.15 has no padding factor)."""
    if not wiring_of(version).extend_graph:
        return None
    branch, ragged = lines(version, "graph_extend")
    factor, slots = LINES[version]["padding_factor"], LINES[version]["slots"]
    return FullPrefillGraph(
        slots=8192 // 512, buckets=_prefill_buckets(8192), max_padding=2 if factor else None,
        cite=(f"{FB}:{branch}-{ragged} (plain EXTEND: use_ragged=False); slots: {SRT}/{slots} (chunked_prefill_size "
              f"// 512); " + (f"eager above twice the tokens: {SRT}/{factor}" if factor else
                              "no padding factor (its runner replays any batch up to the largest bucket)")
              + f"; buckets and capture order: lines not read for {version} (0.5.23's)"))


# (version, deterministic_inference) -> {"knobs": {spec path: Knob}, "reads": {flag: cite}, "refused": {flag: why},
# "prefill_graph": FullPrefillGraph or None}
PROFILES: Dict[Tuple[str, bool], dict] = {
    (version, det): _profile(version, det, cites, graph)
    for version, cites, graph in (
        ("0.5.10", CITES_0510, None),
        *((v, release_cites(v), release_prefill_graph(v)) for v in LINES if v != "0.5.23"),
        ("0.5.23", CITES_0523, FULL_PREFILL_GRAPH_0523))
    for det in (True, False)
}
VERSIONS = sorted({v for v, _ in PROFILES}, key=release_key)
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
    if not re.fullmatch(r"[0-9]+", text) or int(text) < unit or int(text) % unit:
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


def decode_tensor_cores(choice: Optional[bool], flag: Optional[bool], qo_heads: int, kv_heads: int,
                        dtype: str) -> bool:
    """Tensor-core decode: the spec's choice, else SGLang's should_use_tensor_core (0.5.10 FB:1671-1717, 0.5.23
    FB:2670-2716, the same code): the task's SGLANG_FLASHINFER_USE_TENSOR_CORE (flag, as TaskFlags parsed it:
    == 'true', any case), else a GQA group >= 4 for fp16/bf16 KV (fp32 KV: no). flashinfer 0.6.7.post3 has no
    _grouped_size_compiled_for_decode_kernels, so SGLang's older check (0.5.10 FB:1692-1705) falls through."""
    if choice is not None:
        return choice
    if flag is not None:
        return flag
    return dtype in ("bf16", "fp16") and qo_heads // kv_heads >= 4


def _key(sglang: object) -> Tuple[str, bool]:
    get = sglang.get if isinstance(sglang, dict) else lambda k: getattr(sglang, k)
    return cast(str, get("version")), bool(get("deterministic_inference"))


def profile_label(sglang: object) -> Optional[str]:
    """The profile's name for a spec's `sglang` (a model or a stored dict), None without one."""
    return None if sglang is None else profile_name(*_key(sglang))


def full_prefill_graph(sglang: object) -> Optional[FullPrefillGraph]:
    """SGLang's full prefill graph, which a spec's `cudagraph` prefill models under its profile's version (0.5.23);
    None without a profile or for a version without one (0.5.10): detrun's own capture of the flag's wrapper."""
    return None if sglang is None else PROFILES[_key(sglang)]["prefill_graph"]


def effective_knobs(spec, flags: TaskFlags) -> dict:
    """Every FlashInfer knob the task runs with (spec paths; flags: the task's, as its backend got them), the
    profile's name (None without one) and the knobs the job overrode: a row's `knobs` column (informational: the
    plan fields explain differences)."""
    knobs: Dict[str, object] = {"profile": profile_label(spec.sglang)}
    for path in KNOB_PATHS:
        node = spec
        for part in path.split("."):
            node = getattr(node, part)
        knobs[path] = list(node) if isinstance(node, (list, tuple)) else node
    fi = spec.flashinfer
    knobs["flashinfer.ragged_backend"] = fi.ragged_backend or fi.backend
    knobs["flashinfer.decode.tensor_cores"] = decode_tensor_cores(
        fi.decode.tensor_cores, flags.tensor_core, spec.heads.qo, spec.heads.kv, spec.dtype)
    knobs["overridden"] = list(spec.sglang_overridden)
    return knobs


def profile_values(version: str, deterministic: bool) -> Dict[str, object]:
    """The profile's knob values with no env flags set (spec path -> value)."""
    return {path: k.value for path, k in PROFILES[(version, deterministic)]["knobs"].items()}


def citations(version: str, deterministic: bool) -> Dict[str, str]:
    return {path: k.cite for path, k in PROFILES[(version, deterministic)]["knobs"].items()}
