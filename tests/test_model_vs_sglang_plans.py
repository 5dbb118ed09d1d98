"""Model vs SGLang's own, at plan(): detrun's model (backend flashinfer under an SGLang 0.5.23 profile) passes
FlashInfer's planner what SGLang 0.5.23's real FlashInferAttnBackend passes it, for every case of
jobs/parity.yaml (page_size 16, SGLANG_FLASHINFER_USE_PAGED=1), eager prefill and decode. Found on an H100:
prefix_mixed's paged prefill had kv_chunk_size 192 in the model and 188 in SGLang's own, the model planning
16-token pages where SGLang plans pages of one token (docs/gpu-results.md). Needs SGLang, as
test_sglang_wiring.py does.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from pathlib import Path

import pytest
import torch

if not os.environ.get("CI") and importlib.util.find_spec("sglang") is None:
    pytest.skip("pip install --no-deps -r requirements/sglang-cpu.txt", allow_module_level=True)

from detrun.envflags import TaskFlags  # noqa: E402
from detrun.kernels.inputs import build_batch  # noqa: E402
from detrun.spec.model import load_spec  # noqa: E402
from tests import sglang_fakes  # noqa: E402
from tests.helpers import FakePaged, FakePrefillWrapper, fake_flashinfer  # noqa: E402

pytestmark = pytest.mark.slow  # one SGLang import per process

PARITY = Path(__file__).resolve().parents[1] / "jobs" / "parity.yaml"
SETS = ["sglang.version=0.5.23", "flashinfer.profile_kernels=false"]


def _planner_inputs(args, page_size: int):
    """What FlashInfer's planner reads of a paged plan's positional arguments (qo_indptr, kv_indptr, indices,
    last_page_len, qo heads, kv heads, head_dim, page size; decode: no qo_indptr), with the indices as detrun's
    slots (SGLang's slot is detrun's plus one padding page, sglang_batch.py) and only those kv_indptr covers."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    ints = [a for a in args if isinstance(a, int)]
    indptr, indices = (tensors[1], tensors[2]) if len(tensors) == 4 else (tensors[0], tensors[1])
    used = indices[: int(indptr[-1])].tolist()
    return dict(indptr=[t.tolist() for t in tensors if t is not indices], indices=used, ints=ints,
                page_size=page_size)


class _Recorded:
    calls: list = []

    def plan(self, *args, **kwargs):
        _Recorded.calls.append((type(self).__name__, args))
        super().plan(*args, **kwargs)  # type: ignore[misc]


class ModelPaged(_Recorded, FakePaged):
    pass


class ModelDecode(_Recorded, FakePrefillWrapper):
    def __init__(self, workspace, layout, use_tensor_cores=False, **kw):
        super().__init__(workspace, layout, **kw)
        self.use_tensor_cores = use_tensor_cores


class OwnPaged(_Recorded, sglang_fakes.FakePaged):
    begin_forward = _Recorded.plan


class OwnDecode(_Recorded, sglang_fakes.FakeDecode):
    begin_forward = _Recorded.plan


def _own_plans(monkeypatch, method: str):
    from detrun.kernels.backends.sglang import SGLangBackend

    spec = load_spec(PARITY, ["backend=sglang", *SETS])
    api = dataclasses.replace(sglang_fakes.fake_api(), paged=OwnPaged, decode=OwnDecode)
    be = SGLangBackend(spec, torch.device("cpu"), wrappers=api)
    try:
        return _each_case(spec, be, method, slot_shift=spec.page_size)
    finally:
        be.close()


def _model_plans(monkeypatch, method: str):
    fake_flashinfer(monkeypatch, paged=ModelPaged)
    import sys

    monkeypatch.setattr(sys.modules["flashinfer"], "BatchDecodeWithPagedKVCacheWrapper", ModelDecode, raising=False)
    from detrun.kernels.backends.flashinfer import FlashInferBackend

    spec = load_spec(PARITY, ["backend=flashinfer", *SETS])
    be = FlashInferBackend(spec, torch.device("cpu"), flags=TaskFlags.parse(os.environ))
    plans = _each_case(spec, be, method, slot_shift=0)
    monkeypatch.undo()  # SGLang's import looks for flashinfer by spec: no stand-in left in sys.modules
    return plans


def _each_case(spec, be, method: str, slot_shift: int):
    """{case: the planner inputs of its paged (prefill) or decode plan}, indices shifted to detrun's slots."""
    out = {}
    for case in spec.cases:
        _Recorded.calls = []
        getattr(be, method)(build_batch(spec, case), "eager")
        want = "Decode" if method == "forward_decode" else "Paged"
        [(_, args)] = [c for c in _Recorded.calls if c[0].endswith(want)]
        plan = _planner_inputs(args, page_size=args[-1])
        plan["indices"] = [i - slot_shift for i in plan["indices"]]
        out[case] = plan
    return out


@pytest.fixture
def flag_on(monkeypatch):
    monkeypatch.setenv("SGLANG_FLASHINFER_USE_PAGED", "1")


@pytest.mark.parametrize("method", ["forward", "forward_decode"])
def test_the_model_plans_what_sglang_0523_plans_for_every_parity_case(monkeypatch, flag_on, method):
    own = _own_plans(monkeypatch, method)
    model = _model_plans(monkeypatch, method)
    assert set(model) == set(own) and "prefix_mixed" in own
    for case in own:
        assert own[case]["page_size"] == 1, case  # SGLang plans pages of one token (FB:2403, FB:1847)
        assert model[case] == own[case], case
