"""Reads, from a released SGLang wheel, the lines detrun cites for each release (detrun/spec/sglang_releases.py
LINES): where FlashInferAttnBackend reads SGLANG_FLASHINFER_USE_PAGED, its eager rule, its CUDA-graph branches per
forward mode and the determinism knobs. `sglang/` in a wheel is the tag's `python/sglang/`.

    python3 -m tests.sglang_release_lines WHEEL...   # prints LINES entries (how the table was made)

tests/test_sglang_releases.py checks the table against every SGLang wheel in .wheelhouse/ (and DETRUN_SGLANG_WHEELS).
"""

from __future__ import annotations

import re
import sys
import zipfile
from pathlib import Path
from typing import Dict, List, Optional, Union

FB = "sglang/srt/layers/attention/flashinfer_backend.py"
ENV = "sglang/srt/environ.py"
OTHERS = ("sglang/srt/model_executor/runner/prefill_cuda_graph_runner.py",
          "sglang/srt/model_executor/model_runner_components/cuda_graph_setup.py",
          "sglang/srt/server_args.py", "sglang/srt/arg_groups/serving_hook.py")

# anchor -> the pattern of its line in FB (the first match; a list anchor: every match)
FB_ONE = {
    "prefill_backend": r'self\.prefill_backend = "fa2"',
    "qwen_workspace": r"WORKSPACE_SIZE\.set\(512 \* 1024 \* 1024\)",
    "det_switch": r"self\.enable_deterministic = \($",
    "default_tiles": r"self\.prefill_split_tile_size = None",
    "det_tc": r"self\.decode_use_tensor_cores = True",
    "prefill_tile": r"self\.prefill_split_tile_size = get_int_env_var\(",
    "decode_tile": r"self\.decode_split_tile_size = get_int_env_var\(",
    "disable_cg_split": r"self\.disable_cuda_graph_kv_split = True",
    "det_workspace": r"WORKSPACE_SIZE\.set\(2048 \* 1024 \* 1024\)",
    "use_paged": r"self\.use_paged = envs\.SGLANG_FLASHINFER_USE_PAGED\.get\(\)",
    "workspace_read": r"envs\.SGLANG_FLASHINFER_WORKSPACE_SIZE\.get\(\)",
    "eager": r"^    def init_forward_metadata\(self, forward_batch",
    "eager_rule": r"^\s+use_ragged = \($",
    "eager_decode_split": r"fixed_split_size=self\.decode_split_tile_size,",
    "eager_decode_nosplit": r"^\s+disable_split_kv=False,",
    "ragged_wrapper": r"BatchPrefillWithRaggedKVCacheWrapper\($",
    "eager_prefill_split": r"fixed_split_size=self\.prefill_split_tile_size,",
    "capture": r"^    def init_forward_metadata_capture_cuda_graph\(",
    "replay": r"^    def init_forward_metadata_replay_cuda_graph\(",
    "out_graph": r"^    def init_forward_metadata_out_graph\(",
    "prepare": r"^    def _prepare_cuda_graph_metadata\(",
    "capture_meta": (r"prefill_wrappers, forward_mode\.is_dllm_extend\(\), False"
                     r"|PrefillMetadata\(prefill_wrappers, True, False\)"),
    "no_graph_mode": r'raise ValueError\(f"Invalid mode: \{forward_mode=\}"\)',
    "tensor_core_env": r'os\.environ\.get\("SGLANG_FLASHINFER_USE_TENSOR_CORE"\)',
}
FB_ALL = {
    "graph_decode_split": r"disable_split_kv=self\.disable_cuda_graph_kv_split,",
    "graph_dllm": r"use_ragged=not self\.use_paged,",
}
ENV_ONE = {
    "env_use_paged": r"SGLANG_FLASHINFER_USE_PAGED = EnvBool\(False\)",
    "env_workspace": r"SGLANG_FLASHINFER_WORKSPACE_SIZE = EnvInt\(384 \* 1024 \* 1024\)",
}
OTHER_ONE = {  # file:line in the first of OTHERS that has it
    "padding_factor": r"^_MAX_PREFILL_CUDA_GRAPH_PADDING_FACTOR = 2$",
    "slots": r"chunked_prefill_size // 512(, 1\)?)?$",
    "det_env": r"^\s+envs\.SGLANG_ENABLE_DETERMINISTIC_INFERENCE\.set\($",  # from --enable-deterministic-inference
}
Line = Union[int, List[int], str, None]


def _find(lines: List[str], pattern: str, after: int = 0) -> Optional[int]:
    return next((i + 1 for i, text in enumerate(lines) if i + 1 > after and re.search(pattern, text)), None)


def _read(wheel: zipfile.ZipFile, name: str) -> List[str]:
    try:
        return wheel.read(name).decode().splitlines()
    except KeyError:
        return []


def release_lines(path: Union[str, Path]) -> Dict[str, Line]:
    """The anchors of one wheel: anchor -> FB line (or lines), ENV line, or 'file:line' for OTHER_ONE."""
    with zipfile.ZipFile(path) as wheel:
        fb, env = _read(wheel, FB), _read(wheel, ENV)
        others = {name: _read(wheel, name) for name in OTHERS}
    out: Dict[str, Line] = {k: _find(fb, p) for k, p in FB_ONE.items()}
    out.update({k: [i + 1 for i, text in enumerate(fb) if re.search(p, text)] for k, p in FB_ALL.items()})
    # the plain-EXTEND branch of the graph path (0.5.15 and later) and its use_ragged line
    start = out["out_graph"]
    branch = _find(fb, r"^        elif forward_mode\.is_extend\(\):", int(start)) if start else None  # type: ignore
    inside = branch is not None and branch < (out["eager"] or 0) and out["eager"] > (out["out_graph"] or 0)
    out["graph_extend"] = [branch, _find(fb, r"use_ragged=False,", branch)] if inside and branch else None
    out.update({k: _find(env, p) for k, p in ENV_ONE.items()})
    for key, pattern in OTHER_ONE.items():
        hit = next(((name, _find(text, pattern)) for name, text in others.items() if _find(text, pattern)), None)
        out[key] = f"{hit[0].removeprefix('sglang/srt/')}:{hit[1]}" if hit else None
    return out


def version_of(wheel: Union[str, Path]) -> str:
    return Path(wheel).name.split("-")[1]


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(f'    "{version_of(arg)}": {release_lines(arg)},')
