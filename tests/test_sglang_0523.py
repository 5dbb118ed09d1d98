"""detrun's model of SGLang 0.5.23: the flag read (and parsed as SGLang's EnvBool parses it), the wrapper rule per
(version, mode, flag, deterministic), and a CUDA-graph prefill as SGLang 0.5.23's full prefill graph (paged, no
split arguments, planned over its request slots after its first capture, on a workspace of its own), against a
stand-in flashinfer on the CPU. Each 0.5.23 case has a twin that fails if the rule were 0.5.10's."""

import os
import re
from importlib import metadata, util
from pathlib import Path

import pytest
import torch

from detrun.envflags import TaskFlags
from detrun.errors import DetrunError
from detrun.kernels.backends.base import PATH_PAGED, PATH_RAGGED, PATH_RAGGED_PREFIX, KnownBug
from detrun.kernels.backends.reference import ReferenceBackend
from detrun.kernels.inputs import build_batch
from detrun.spec.model import spec_from_dict
from detrun.spec.sglang import FULL_PREFILL_GRAPH_0523, PROFILES, FullPrefillGraph, full_prefill_graph
from tests.helpers import (
    FakeGraph,
    FakePaged,
    FakePrefillWrapper,
    cli_main,
    fake_flashinfer,
    one_line,
    small,
)

FLAG = "SGLANG_FLASHINFER_USE_PAGED"
V0523 = {"version": "0.5.23", "deterministic_inference": False}
V0510 = {"version": "0.5.10", "deterministic_inference": False}
CROWD = {"crowd17": ["decode17"]}  # more requests than the full prefill graph's 16 slots


def job(profile, env=None, **overrides):
    """small() under a profile (or none), the flag only where the job sets it."""
    data = small(env=env or {}, heads={"qo": 8, "kv": 2}, requests={**small()["requests"],
                 "decode17": {"qo_len": 1, "prefix_len": 9, "copies": 17}}, cases={**small()["cases"], **CROWD},
                 **overrides)
    if profile is not None:
        data["sglang"] = profile
        del data["page_size"]  # the profile's
    return data


# -- the flag: read by 0.5.23, refused for 0.5.10; a value SGLang would misread is refused

def test_the_flag_is_read_under_0523_and_refused_under_0510():
    spec = spec_from_dict(job(V0523, env={FLAG: "1"}))
    assert spec.bool_flags == {FLAG: True} and spec.sglang_overridden == []
    assert spec_from_dict(job({**V0523, "deterministic_inference": True}, env={FLAG: "no"})).bool_flags == {FLAG: False}
    with pytest.raises(DetrunError, match=f"env.{FLAG}: SGLang 0.5.10 does not read it"):
        spec_from_dict(job(V0510, env={FLAG: "1"}))


@pytest.mark.parametrize("value", ["maybe", " 1", "1 ", "", "on", "2"])
def test_a_value_sglang_would_silently_read_as_false_is_refused(value):
    with pytest.raises(DetrunError) as err:
        spec_from_dict(job(V0523, env={FLAG: value}), "jobs/x.yaml")
    assert str(err.value) == (f"jobs/x.yaml: env: {FLAG}={value!r} is not a boolean: SGLang would warn and read it as "
                              "false (use one of true, 1, yes, y, false, 0, no, n)")


@pytest.mark.parametrize("value, read", [("TRUE", True), ("Y", True), ("yes", True), ("N", False), ("False", False)])
def test_every_word_sglangs_envbool_takes_is_taken_in_any_case(value, read):
    assert spec_from_dict(job(V0523, env={FLAG: value})).bool_flags == {FLAG: read}


def test_submit_refuses_a_misread_flag_with_exit_2_before_anything_runs(tmp_path, capsys):
    runs = tmp_path / "runs"
    code, out, err = cli_main(capsys, "submit", "jobs/sglang-0523-paged.yaml", "--set", f"env.{FLAG}=maybe",
                              "--runs-root", str(runs))
    assert code == 2 and f"{FLAG}='maybe' is not a boolean: SGLang would warn and read it as false" in one_line(err)
    assert f"--set env.{FLAG}=maybe:" in err and not runs.exists()  # the option that set it is blamed


# -- the rule: which wrapper a prefill runs on, per (version, mode, flag, deterministic)

# (version, mode, flag, det) -> path of a batch without and with a cached prefix
RULE = {
    **{(v, "eager", flag, det): ((PATH_RAGGED, PATH_RAGGED_PREFIX) if not flag and not det else (PATH_PAGED,) * 2)
       for v in (None, "0.5.10", "0.5.23") for flag in (False, True) for det in (False, True)},
    # 0.5.10 and no profile: detrun's own capture of the wrapper the flag picks
    **{(v, "cudagraph", flag, det): ((PATH_PAGED,) * 2 if flag else (PATH_RAGGED, PATH_RAGGED_PREFIX))
       for v in (None, "0.5.10") for flag in (False, True) for det in (False, True)},
    # 0.5.23: the full prefill graph, paged whatever the flag and the switch (FB:820-838)
    **{("0.5.23", "cudagraph", flag, det): (PATH_PAGED,) * 2 for flag in (False, True) for det in (False, True)},
}


def _reference(monkeypatch, version, flag, det):
    monkeypatch.setenv(FLAG, "1" if flag else "0")  # what the task's runtime_env sets; read in __init__
    if version is None:
        spec = spec_from_dict(job(None, deterministic=det))
    else:
        spec = spec_from_dict(job({"version": version, "deterministic_inference": det}))
    return spec, ReferenceBackend(spec, torch.device("cpu"), flags=TaskFlags.parse(os.environ))


@pytest.mark.parametrize("version, mode, flag, det", sorted(RULE, key=str))
def test_the_wrapper_rule_per_version_mode_flag_and_switch(monkeypatch, version, mode, flag, det):
    spec, be = _reference(monkeypatch, version, flag, det)
    paths = tuple(be.path_for(be.prefill_mode(mode, build_batch(spec, case)), build_batch(spec, case))
                  for case in ("alone", "prefix_alone"))
    assert paths == RULE[(version, mode, flag, det)]
    if version == "0.5.23" and mode == "cudagraph" and not flag:
        assert RULE[("0.5.10", mode, flag, det)] != paths  # the 0.5.10 rule would have said ragged


@pytest.mark.parametrize("version, flag, det, path", [
    ("0.5.23", False, False, PATH_RAGGED_PREFIX),  # SGLang runs it eager: the eager rule (full graph: paged)
    ("0.5.23", True, False, PATH_PAGED), ("0.5.23", False, True, PATH_PAGED),
    ("0.5.10", False, True, PATH_RAGGED_PREFIX),  # no full graph: detrun's capture, whatever the batch
])
def test_a_batch_the_full_prefill_graph_does_not_take_runs_eager(monkeypatch, version, flag, det, path):
    spec, be = _reference(monkeypatch, version, flag, det)
    batch = build_batch(spec, "crowd17")
    assert be.prefill_mode("cudagraph", batch) == ("eager" if version == "0.5.23" else "cudagraph")
    assert be.path_for(be.prefill_mode("cudagraph", batch), batch) == path


@pytest.mark.parametrize("qo_lens, takes", [
    ([21], True), ([2], True), ([1], False),  # 1 token pads to the 4-token bucket: over 2x, eager
    ([1] * 16, True), ([1] * 17, False),  # 16 request slots
    ([8192], True), ([8000, 193], False),  # above the largest bucket
    ([300, 8, 16], True), ([4097], True), ([4000, 700], True),
])
def test_which_batches_sglangs_full_prefill_graph_replays(qo_lens, takes):
    assert FULL_PREFILL_GRAPH_0523.takes(qo_lens) is takes


def test_the_full_prefill_graph_is_0523s_alone():
    assert full_prefill_graph(V0523) is FULL_PREFILL_GRAPH_0523 and full_prefill_graph(V0510) is None
    assert full_prefill_graph(None) is None
    g = FULL_PREFILL_GRAPH_0523
    assert g.slots == 16 and max(g.buckets) == 8192 and g.buckets[:9] == (4, 8, 12, 16, 20, 24, 28, 32, 48)
    assert len(g.buckets) == 58 and g.capture_lens() == [8192] + [0] * 15
    # SGLang's _full_cg_prefill_workspace_bytes for Qwen3-8B on an H200 (132 SMs): 1.25 x 32 heads x 271 padded
    # tiles x 128 rows x (128 + 1) floats
    assert g.workspace_bytes(32, 8, 128, 132) == int(32 * 271 * 128 * 4 * 129 * 1.25) == 715_960_320
    assert FullPrefillGraph(2, (16,), 2, "").workspace_bytes(8, 1, 256, 100) == int(8 * 200 * 64 * 4 * 257 * 1.25)


# -- FlashInferBackend under a 0.5.23 profile, against a stand-in flashinfer

class Paged(FakePaged):
    """A paged wrapper that records its workspace and each plan's host arguments and split arguments."""

    def __init__(self, workspace, layout, use_cuda_graph=False, backend="auto", **buffers):
        super().__init__(workspace, layout, use_cuda_graph, backend, **buffers)
        self.workspace, self.buffers, self.calls = workspace, buffers, []

    def plan(self, qo_indptr, kv_indptr, indices, last_page_len, *args, **kwargs):
        super().plan(*args, **kwargs)
        split = {k: kwargs[k] for k in ("fixed_split_size", "disable_split_kv")}
        self.calls.append((qo_indptr.tolist(), kv_indptr.tolist(), last_page_len.tolist(), split))


@pytest.fixture
def flashinfer(monkeypatch):
    fake_flashinfer(monkeypatch, Paged)

    def make(version: str, det: bool, flag: bool = False):
        monkeypatch.setenv(FLAG, "1" if flag else "0")
        from detrun.kernels.backends.flashinfer import FlashInferBackend

        spec = spec_from_dict(job({"version": version, "deterministic_inference": det}, backend="flashinfer",
                                  flashinfer={"workspace_mb": 16, "profile_kernels": False}))
        return spec, FlashInferBackend(spec, torch.device("cpu"), flags=TaskFlags.parse(os.environ))

    return make


def _graphs():
    return [w for w in FakePrefillWrapper.made if w.graph]


def test_0523_graph_prefill_plans_sglangs_full_graph(flashinfer):
    spec, be = flashinfer("0.5.23", det=True)
    batch = build_batch(spec, "mixed")  # short 3, target 21, long 70: page size 1
    for repeat in range(2):
        out = be.forward(batch, "cudagraph", repeat=repeat)
    assert out.path == PATH_PAGED and out.plan["graph_slots"] == 16
    (w,) = _graphs()
    assert isinstance(w, Paged) and w.workspace is not be.workspace  # the graph's own workspace
    assert w.workspace.numel() == FULL_PREFILL_GRAPH_0523.workspace_bytes(8, 2, 32, 1)  # CPU: 1 "SM"
    none = {"fixed_split_size": None, "disable_split_kv": False}  # split-KV left to FlashInfer
    capture = ([0] + [8192] * 16, [0] + [8192] * 16, [1] * 16, none)  # SGLang's first capture: 8192 tokens
    planned = ([0, 3, 24, 94] + [94] * 13, [0, 3, 24, 94] + [94] * 13, [1] * 16, none)  # zero-length sentinels
    assert w.calls == [capture, planned, planned] and FakeGraph.captures == 1
    assert len(w.buffers["qo_indptr_buf"]) == 17 and len(w.buffers["paged_kv_last_page_len_buf"]) == 16


def test_0523_eager_prefill_keeps_the_profiles_split_tile(flashinfer):
    spec, be = flashinfer("0.5.23", det=True)
    out = be.forward(build_batch(spec, "alone"), "eager")
    eager = FakePrefillWrapper.made[0]
    assert out.path == PATH_PAGED and "graph_slots" not in out.plan and not _graphs()
    assert eager.calls == [([0, 21], [0, 21], [1], {"fixed_split_size": 4096, "disable_split_kv": False})]


def test_0523_graph_prefill_is_paged_without_the_flag_where_0510_captures_ragged(flashinfer):
    spec, be = flashinfer("0.5.23", det=False)
    assert be.forward(build_batch(spec, "prefix_alone"), "cudagraph").path == PATH_PAGED
    assert [type(w) for w in _graphs()] == [Paged]
    FakePrefillWrapper.made = []
    spec, be = flashinfer("0.5.10", det=False)
    assert be.forward(build_batch(spec, "prefix_alone"), "cudagraph").path == PATH_RAGGED_PREFIX
    assert sorted(type(w).__name__ for w in _graphs()) == ["FakeRagged", "Paged"]
    assert all(len(c[0]) == 2 for w in _graphs() if isinstance(w, Paged) for c in w.calls)  # no slots under 0.5.10


def test_0523_deterministic_graph_prefill_is_no_known_bug_where_0510s_is(flashinfer):
    spec, be = flashinfer("0.5.10", det=True)
    with pytest.raises(KnownBug, match="fixed_split_size=4096"):  # 0.5.10: detrun's capture with the split tile
        be.forward(build_batch(spec, "alone"), "cudagraph")
    spec, be = flashinfer("0.5.23", det=True)
    assert be.forward(build_batch(spec, "alone"), "cudagraph").plan["graph_slots"] == 16


def test_0523_a_batch_over_the_slots_runs_eager_and_says_so(flashinfer):
    spec, be = flashinfer("0.5.23", det=True)
    out = be.forward(build_batch(spec, "crowd17"), "cudagraph")
    assert out.path == PATH_PAGED and out.plan["graph_slots"] is None and not _graphs() and FakeGraph.captures == 0
    assert FakePrefillWrapper.made[0].calls[0][3] == {"fixed_split_size": 4096, "disable_split_kv": False}


def test_0523_decode_plans_as_0510s(flashinfer):
    """Decode did not change in 0.5.23: eager fixed_split_size = the decode tile, graph fixed_split_size None and
    disable_split_kv = disable_cuda_graph_kv_split (FB:1017-1018, FB:776-777)."""
    _, be = flashinfer("0.5.23", det=True)
    assert be._decode_split(False) == {"fixed_split_size": 2048, "disable_split_kv": False}
    assert be._decode_split(True) == {"fixed_split_size": None, "disable_split_kv": True}
    _, be = flashinfer("0.5.23", det=False)
    assert be._decode_split(True) == {"fixed_split_size": None, "disable_split_kv": False}


# -- the cites point at the lines they name (needs SGLang 0.5.23's source: installed, or DETRUN_SGLANG_SRC)

ANCHORS = {  # a cite (file:line[-line]) -> a text in those lines
    "environ.py:1219": "SGLANG_FLASHINFER_USE_PAGED = EnvBool(False)",
    "environ.py:1221": "SGLANG_FLASHINFER_WORKSPACE_SIZE = EnvInt(384 * 1024 * 1024)",
    "flashinfer_backend.py:453": "self.use_paged = envs.SGLANG_FLASHINFER_USE_PAGED.get()",
    "flashinfer_backend.py:457-464": 'get_buffer(\n"flashinfer_workspace"',
    "flashinfer_backend.py:451": "SGLANG_FLASHINFER_WORKSPACE_SIZE.set(2048 * 1024 * 1024)",
    "flashinfer_backend.py:443": "self.decode_use_tensor_cores = True",
    "flashinfer_backend.py:444-446": '"SGLANG_FLASHINFER_PREFILL_SPLIT_TILE_SIZE", 4096',
    "flashinfer_backend.py:447-449": '"SGLANG_FLASHINFER_DECODE_SPLIT_TILE_SIZE", 2048',
    "flashinfer_backend.py:1058-1062": "not self.enable_deterministic\nand not is_in_tc_piecewise_cuda_graph()\n"
                                       "and not self.use_paged",
    "flashinfer_backend.py:1085": "fixed_split_size=self.prefill_split_tile_size",
    "flashinfer_backend.py:1017": "fixed_split_size=self.decode_split_tile_size",
    "flashinfer_backend.py:776": "fixed_split_size=None",
    "flashinfer_backend.py:777": "disable_split_kv=self.disable_cuda_graph_kv_split",
    "flashinfer_backend.py:802": "use_ragged=not self.use_paged",
    "flashinfer_backend.py:820-838": "prefill_wrappers=self.full_cg_prefill_wrappers,\nuse_ragged=False",
    "flashinfer_backend.py:1205-1247": "def _full_cg_prefill_workspace_bytes",
    "flashinfer_backend.py:2687-2689": 'return env_override.lower() == "true"',
    "serving_hook.py:444-446": "envs.SGLANG_ENABLE_DETERMINISTIC_INFERENCE.set(",
    "memory_hook.py:146-159": "decode_cuda_graph_config.max_bs = 256",
    "cuda_graph_setup.py:581-589": "chunked_prefill_size // 512",
    "prefill_cuda_graph_runner.py:1715": "capture_shapes = list(reversed(self.capture_num_tokens))",
    "prefill_cuda_graph_runner.py:1363-1364": "batch_size > self._capture_req_slots",
}


def _sglang_src():
    tree = os.environ.get("DETRUN_SGLANG_SRC")  # a 0.5.23 `sglang/` directory (e.g. the unpacked wheel)
    if tree:
        return Path(tree)
    found = util.find_spec("sglang")
    if found is None or found.origin is None or metadata.version("sglang") != "0.5.23":
        pytest.skip("SGLang 0.5.23's source is not here (install it, or set DETRUN_SGLANG_SRC)")
    return Path(found.origin).parent


def _cited(text: str):
    return re.findall(r"python/sglang/(srt/[\w/]+\.py):(\d+)(?:-(\d+))?", text)


def test_0523_cites_point_at_the_lines_they_name():
    src = _sglang_src()
    texts = [FULL_PREFILL_GRAPH_0523.cite]
    for det in (True, False):
        p = PROFILES[("0.5.23", det)]
        texts += [k.cite for k in p["knobs"].values()] + list(p["reads"].values()) + list(p["refused"].values())
    cited = {(path, int(a), int(b or a)) for text in texts for path, a, b in _cited(text)}
    assert len(cited) > 40
    lines = {path: (src / path).read_text().splitlines() for path, _, _ in cited}
    for path, a, b in cited:
        assert 1 <= a <= b <= len(lines[path]), (path, a, b)
    names = {f"{Path(p).name}:{a}" + (f"-{b}" if b != a else ""): (p, a, b) for p, a, b in cited}
    for cite, text in ANCHORS.items():
        path, a, b = names[cite]
        got = "\n".join(line.strip() for line in lines[path][a - 1:b])
        assert text in got, (cite, got)
