"""SGLang releases 0.5.11 .. 0.5.23 (every one on PyPI, post releases included): where each reads
SGLANG_FLASHINFER_USE_PAGED and wires it (LINES), and the releases where that wiring changed (CHANGES).

Read from the released wheels (`pip download --no-deps sglang==X`; a wheel's `sglang/` is the tag's
`python/sglang/`) by tests/sglang_release_lines.py, which checks LINES against every wheel at hand.
LINES[version][anchor]: a line of FB (a list: every such line), of ENV (env_*), or `file:line` under SRT
(padding_factor, slots, det_env); None where the release has no such line. docs/sglang-releases.md: the same,
as a table.
No torch, no pydantic.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, Tuple

SRT = "python/sglang/srt"
FB = f"{SRT}/layers/attention/flashinfer_backend.py"
ENV = f"{SRT}/environ.py"

LINES: Dict[str, Dict[str, object]] = {
    "0.5.11": dict(
        prefill_backend=126, qwen_workspace=173, det_switch=178, default_tiles=181, det_tc=185, prefill_tile=186,
        decode_tile=189, disable_cg_split=192, det_workspace=193, use_paged=195, workspace_read=201, eager=435,
        eager_rule=493, eager_decode_split=445, eager_decode_nosplit=446, ragged_wrapper=255, eager_prefill_split=516,
        capture=561, replay=714, out_graph=None, prepare=None, capture_meta=710, no_graph_mode=712,
        tensor_core_env=1678, graph_decode_split=[598, 735], graph_dllm=[705, 769], graph_extend=None,
        env_use_paged=362, env_workspace=364, padding_factor=None, slots=None, det_env='server_args.py:3929'),
    "0.5.12": dict(
        prefill_backend=126, qwen_workspace=173, det_switch=178, default_tiles=181, det_tc=185, prefill_tile=186,
        decode_tile=189, disable_cg_split=192, det_workspace=193, use_paged=195, workspace_read=201, eager=435,
        eager_rule=493, eager_decode_split=445, eager_decode_nosplit=446, ragged_wrapper=255, eager_prefill_split=516,
        capture=561, replay=714, out_graph=None, prepare=None, capture_meta=710, no_graph_mode=712,
        tensor_core_env=1678, graph_decode_split=[598, 735], graph_dllm=[705, 769], graph_extend=None,
        env_use_paged=368, env_workspace=370, padding_factor=None, slots=None, det_env='server_args.py:4243'),
    "0.5.13": dict(
        prefill_backend=168, qwen_workspace=217, det_switch=222, default_tiles=225, det_tc=229, prefill_tile=230,
        decode_tile=233, disable_cg_split=236, det_workspace=237, use_paged=239, workspace_read=245, eager=555,
        eager_rule=627, eager_decode_split=571, eager_decode_nosplit=572, ragged_wrapper=297, eager_prefill_split=650,
        capture=None, replay=None, out_graph=477, prepare=750, capture_meta=774, no_graph_mode=777,
        tensor_core_env=1793, graph_decode_split=[505], graph_dllm=[527], graph_extend=None, env_use_paged=500,
        env_workspace=502, padding_factor=None, slots=None, det_env='server_args.py:4138'),
    "0.5.14": dict(
        prefill_backend=303, qwen_workspace=355, det_switch=360, default_tiles=363, det_tc=367, prefill_tile=368,
        decode_tile=371, disable_cg_split=374, det_workspace=375, use_paged=377, workspace_read=383, eager=739,
        eager_rule=794, eager_decode_split=756, eager_decode_nosplit=757, ragged_wrapper=433, eager_prefill_split=817,
        capture=None, replay=None, out_graph=634, prepare=918, capture_meta=938, no_graph_mode=946,
        tensor_core_env=2016, graph_decode_split=[662], graph_dllm=[684], graph_extend=None, env_use_paged=519,
        env_workspace=521, padding_factor=None, slots=None, det_env='server_args.py:5895'),
    "0.5.15": dict(
        prefill_backend=309, qwen_workspace=361, det_switch=366, default_tiles=369, det_tc=373, prefill_tile=374,
        decode_tile=377, disable_cg_split=380, det_workspace=381, use_paged=383, workspace_read=389, eager=769,
        eager_rule=824, eager_decode_split=786, eager_decode_nosplit=787, ragged_wrapper=439, eager_prefill_split=847,
        capture=None, replay=None, out_graph=646, prepare=1058, capture_meta=1078, no_graph_mode=1094,
        tensor_core_env=2164, graph_decode_split=[674], graph_dllm=[696], graph_extend=[712, 726], env_use_paged=560,
        env_workspace=562, padding_factor=None, slots='model_executor/runner/prefill_cuda_graph_runner.py:281',
        det_env='server_args.py:5725'),
    "0.5.16": dict(
        prefill_backend=312, qwen_workspace=408, det_switch=413, default_tiles=416, det_tc=420, prefill_tile=421,
        decode_tile=424, disable_cg_split=427, det_workspace=428, use_paged=430, workspace_read=437, eager=916,
        eager_rule=971, eager_decode_split=933, eager_decode_nosplit=934, ragged_wrapper=486, eager_prefill_split=998,
        capture=None, replay=None, out_graph=703, prepare=1210, capture_meta=1230, no_graph_mode=1246,
        tensor_core_env=2398, graph_decode_split=[741], graph_dllm=[763], graph_extend=[779, 793], env_use_paged=627,
        env_workspace=629, padding_factor='model_executor/runner/prefill_cuda_graph_runner.py:118',
        slots='model_executor/runner/prefill_cuda_graph_runner.py:281', det_env='server_args.py:6650'),
    "0.5.17": dict(
        prefill_backend=300, qwen_workspace=396, det_switch=401, default_tiles=404, det_tc=408, prefill_tile=409,
        decode_tile=412, disable_cg_split=415, det_workspace=416, use_paged=418, workspace_read=425, eager=904,
        eager_rule=959, eager_decode_split=921, eager_decode_nosplit=922, ragged_wrapper=474, eager_prefill_split=986,
        capture=None, replay=None, out_graph=691, prepare=1198, capture_meta=1218, no_graph_mode=1234,
        tensor_core_env=2394, graph_decode_split=[729], graph_dllm=[751], graph_extend=[767, 781], env_use_paged=675,
        env_workspace=677, padding_factor='model_executor/runner/prefill_cuda_graph_runner.py:136',
        slots='model_executor/model_runner_components/cuda_graph_setup.py:272', det_env='server_args.py:7718'),
    "0.5.18": dict(
        prefill_backend=305, qwen_workspace=400, det_switch=405, default_tiles=408, det_tc=412, prefill_tile=413,
        decode_tile=416, disable_cg_split=419, det_workspace=420, use_paged=422, workspace_read=429, eager=908,
        eager_rule=963, eager_decode_split=925, eager_decode_nosplit=926, ragged_wrapper=478, eager_prefill_split=990,
        capture=None, replay=None, out_graph=695, prepare=1202, capture_meta=1222, no_graph_mode=1238,
        tensor_core_env=2401, graph_decode_split=[733], graph_dllm=[755], graph_extend=[771, 785], env_use_paged=887,
        env_workspace=889, padding_factor='model_executor/runner/prefill_cuda_graph_runner.py:140',
        slots='model_executor/model_runner_components/cuda_graph_setup.py:306', det_env='server_args.py:8072'),
    "0.5.19": dict(
        prefill_backend=309, qwen_workspace=406, det_switch=411, default_tiles=414, det_tc=418, prefill_tile=419,
        decode_tile=422, disable_cg_split=425, det_workspace=426, use_paged=428, workspace_read=435, eager=953,
        eager_rule=1009, eager_decode_split=969, eager_decode_nosplit=970, ragged_wrapper=482,
        eager_prefill_split=1036, capture=None, replay=None, out_graph=699, prepare=1269, capture_meta=1289,
        no_graph_mode=1305, tensor_core_env=2511, graph_decode_split=[744], graph_dllm=[768], graph_extend=[786, 800],
        env_use_paged=959, env_workspace=961, padding_factor='model_executor/runner/prefill_cuda_graph_runner.py:151',
        slots='model_executor/model_runner_components/cuda_graph_setup.py:386',
        det_env='arg_groups/serving_hook.py:401'),
    "0.5.20": dict(
        prefill_backend=307, qwen_workspace=403, det_switch=408, default_tiles=411, det_tc=415, prefill_tile=416,
        decode_tile=419, disable_cg_split=422, det_workspace=423, use_paged=425, workspace_read=432, eager=938,
        eager_rule=992, eager_decode_split=953, eager_decode_nosplit=954, ragged_wrapper=479,
        eager_prefill_split=1019, capture=None, replay=None, out_graph=696, prepare=1248, capture_meta=1268,
        no_graph_mode=1284, tensor_core_env=2479, graph_decode_split=[733], graph_dllm=[756], graph_extend=[772, 786],
        env_use_paged=1011, env_workspace=1013,
        padding_factor='model_executor/runner/prefill_cuda_graph_runner.py:155',
        slots='model_executor/model_runner_components/cuda_graph_setup.py:405',
        det_env='arg_groups/serving_hook.py:401'),
    "0.5.21": dict(
        prefill_backend=308, qwen_workspace=404, det_switch=409, default_tiles=412, det_tc=416, prefill_tile=417,
        decode_tile=420, disable_cg_split=423, det_workspace=424, use_paged=426, workspace_read=433, eager=955,
        eager_rule=1009, eager_decode_split=970, eager_decode_nosplit=971, ragged_wrapper=496,
        eager_prefill_split=1036, capture=None, replay=None, out_graph=713, prepare=1265, capture_meta=1285,
        no_graph_mode=1301, tensor_core_env=2509, graph_decode_split=[750], graph_dllm=[773], graph_extend=[789, 803],
        env_use_paged=1052, env_workspace=1054,
        padding_factor='model_executor/runner/prefill_cuda_graph_runner.py:157',
        slots='model_executor/model_runner_components/cuda_graph_setup.py:554',
        det_env='arg_groups/serving_hook.py:403'),
    "0.5.22": dict(
        prefill_backend=310, qwen_workspace=406, det_switch=411, default_tiles=414, det_tc=418, prefill_tile=419,
        decode_tile=422, disable_cg_split=425, det_workspace=426, use_paged=428, workspace_read=435, eager=962,
        eager_rule=1018, eager_decode_split=977, eager_decode_nosplit=978, ragged_wrapper=498,
        eager_prefill_split=1045, capture=None, replay=None, out_graph=715, prepare=1275, capture_meta=1295,
        no_graph_mode=1311, tensor_core_env=2553, graph_decode_split=[752], graph_dllm=[777], graph_extend=[795, 809],
        env_use_paged=1089, env_workspace=1091,
        padding_factor='model_executor/runner/prefill_cuda_graph_runner.py:160',
        slots='model_executor/model_runner_components/cuda_graph_setup.py:551',
        det_env='arg_groups/serving_hook.py:423'),
    "0.5.23": dict(
        prefill_backend=335, qwen_workspace=431, det_switch=436, default_tiles=439, det_tc=443, prefill_tile=444,
        decode_tile=447, disable_cg_split=450, det_workspace=451, use_paged=453, workspace_read=460, eager=1002,
        eager_rule=1058, eager_decode_split=1017, eager_decode_nosplit=1018, ragged_wrapper=523,
        eager_prefill_split=1085, capture=None, replay=None, out_graph=740, prepare=1315, capture_meta=1335,
        no_graph_mode=1351, tensor_core_env=2687, graph_decode_split=[777], graph_dllm=[802], graph_extend=[820, 834],
        env_use_paged=1219, env_workspace=1221,
        padding_factor='model_executor/runner/prefill_cuda_graph_runner.py:158',
        slots='model_executor/model_runner_components/cuda_graph_setup.py:584',
        det_env='arg_groups/serving_hook.py:444'),
}
# post releases whose cited lines are their release's (FB is byte-identical in each pair)
POST = {"0.5.12.post1": "0.5.12", "0.5.13.post1": "0.5.13", "0.5.15.post1": "0.5.15"}
LINES = {v: at for base, at in LINES.items() for v in (base, *(p for p, b in POST.items() if b == base))}
RELEASES: Tuple[str, ...] = tuple(LINES)  # oldest first


def release_key(version: str) -> Tuple[int, ...]:
    """0.5.12.post1 -> (0, 5, 12, 1): releases in order (a release before its post releases)."""
    return tuple(int(p) for p in re.findall(r"[0-9]+", version))


@dataclass(frozen=True)
class Wiring:
    """How the releases from `since` until the next change wire the flag (the same code, the same rule)."""

    since: str
    graph_api: str  # capture/replay: init_forward_metadata_{capture,replay}_cuda_graph; out_graph: one method
    extend_graph: bool  # plain EXTEND has a CUDA graph of its own (the full prefill graph: paged, flag unread)
    piecewise: str  # the piecewise-graph test in the eager rule (forces paged inside a piecewise graph)
    change: str  # what changed at `since`


CHANGES: Tuple[Wiring, ...] = (
    Wiring("0.5.11", "capture/replay", False, "is_in_piecewise_cuda_graph",
           "the first release that reads the flag (PR #24165): eager use_ragged = not deterministic and not "
           "piecewise and not use_paged; the DLLM_EXTEND graph reads it (capture and replay); plain EXTEND has "
           "no graph (capture raises 'Invalid mode')"),
    Wiring("0.5.13", "out_graph", False, "is_in_piecewise_cuda_graph",
           "capture and replay become one method, init_forward_metadata_out_graph(in_capture) with "
           "_prepare_cuda_graph_metadata; the same use_ragged per forward mode"),
    Wiring("0.5.14", "out_graph", False, "is_in_tc_piecewise_cuda_graph",
           "the eager rule's piecewise test becomes is_in_tc_piecewise_cuda_graph; DRAFT_EXTEND_V2 graphs "
           "(paged); the same use_ragged for EXTEND, DECODE and DLLM_EXTEND"),
    Wiring("0.5.15", "out_graph", True, "is_in_tc_piecewise_cuda_graph",
           "plain EXTEND gets a CUDA graph, the full prefill graph: use_ragged=False whatever the flag (eager "
           "prefill with the flag off stays ragged)"),
)


def known(version: str) -> None:
    if version not in LINES:
        raise ValueError(f"SGLang {version}: not a release read (read: {', '.join(RELEASES)})")


def wiring_of(version: str) -> Wiring:
    """The wiring the release shares with the releases since the last change before it."""
    known(version)
    return [w for w in CHANGES if release_key(w.since) <= release_key(version)][-1]


def lines(version: str, anchor: str) -> List[int]:
    """The FB/ENV lines of an anchor at a release ([] where it has none)."""
    known(version)
    at = LINES[version][anchor]
    return [int(n) for n in at] if isinstance(at, list) else [] if at is None else [int(str(at))]
