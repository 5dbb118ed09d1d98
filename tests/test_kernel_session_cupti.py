"""The kernel audit's session recorded by CUPTI's activity API (DETRUN_KERNEL_TRACER=cupti,
kernel_session_cupti.py): kernels only, names demangled as kineto shows them, split per cell by the same markers.
CUPTI itself runs only on a GPU (bench/cupti_start.py, scripts/gpu_perf33.sh's sweep-cupti); here a stand-in
keeps CUPTI's contract: records of enabled kinds only, handed back in buffers at a flush."""

import os
import sys
import types
from types import SimpleNamespace

import pytest
import torch

from detrun.envflags import TaskFlags
from detrun.kernels.backends.kernel_session import MARKER, ProfileError, ProfileSession
from detrun.kernels.backends.kernel_session_cupti import CuptiKernels, cupti_events, demangle
from detrun.spec.model import spec_from_dict
from tests.helpers import fake_flashinfer, small

SPIN_MANGLED = "_ZN2at4cuda12_GLOBAL__N_111spin_kernelEl"  # torch.cuda._sleep's kernel as CUPTI names it
GEMM_MANGLED = "_Z10gemm_tiledIfLi128EEvPKT_S2_PS0_i"


class StandInCupti:
    """cupti-python's activity calls as the tracer uses them; launch() is a kernel (or a copy) on a stream."""

    ActivityKind = SimpleNamespace(CONCURRENT_KERNEL=10, MEMCPY=1)

    def __init__(self):
        self.enabled, self.buffer, self.callbacks, self.clock = set(), [], None, 0

    def activity_register_callbacks(self, requested, completed):
        assert requested()[0] > 0
        self.callbacks = (requested, completed)

    def activity_enable(self, kind):
        self.enabled.add(kind)

    def activity_disable(self, kind):
        self.enabled.discard(kind)

    def activity_flush_all(self, flag):
        buffer, self.buffer = self.buffer, []
        self.callbacks[1](buffer)

    def launch(self, name, stream=7, kind=10):
        self.clock += 1
        if kind in self.enabled:
            self.buffer.append(SimpleNamespace(kind=kind, start=self.clock, stream_id=stream, name=name))


def _session(cupti):
    return ProfileSession(torch.device("cpu"), profiler=lambda: CuptiKernels(cupti), events=cupti_events,
                          marker=lambda: cupti.launch(SPIN_MANGLED))


def test_names_are_demangled_as_kineto_shows_them_and_other_names_kept():
    assert demangle(SPIN_MANGLED) == f"at::cuda::(anonymous namespace)::{MARKER}(long)"
    assert demangle(GEMM_MANGLED) == "void gemm_tiled<float, 128>(float const*, float const*, float*, int)"
    assert demangle("BatchPrefillWithPagedKVCacheKernel") == "BatchPrefillWithPagedKVCacheKernel"


def test_each_cell_gets_the_kernels_cupti_recorded_between_its_markers():
    cupti = StandInCupti()
    cupti.launch(GEMM_MANGLED)  # before the session: not recorded
    session = _session(cupti)
    with session.cell() as first:
        cupti.launch(GEMM_MANGLED)
        cupti.launch("Memcpy HtoD", kind=cupti.ActivityKind.MEMCPY)  # a copy: not a kernel record
        cupti.launch("_lanes_kernel", stream=3)  # another stream (an earlier cell's digest)
    cupti.launch("between the cells")
    with session.cell() as second:
        cupti.launch("MergeStatesKernel")
    assert first == [] and second == []  # filled at close
    session.close()
    assert first == ["void gemm_tiled<float, 128>(float const*, float const*, float*, int)"]
    assert second == ["MergeStatesKernel"]
    assert cupti.enabled == set()  # recording stopped


def test_records_cupti_never_handed_back_are_an_error_not_empty_lists():
    cupti = StandInCupti()
    cupti.activity_flush_all = lambda flag: None  # the buffers never come back
    session = _session(cupti)
    with session.cell() as names:
        cupti.launch(GEMM_MANGLED)
    with pytest.raises(ProfileError, match="0 markers for 1 profiled cells"):
        session.close()
    assert names == [] and cupti.enabled == set()


def _backend(monkeypatch, tracer):
    fake_flashinfer(monkeypatch)
    from detrun.kernels.backends.flashinfer import FlashInferBackend

    monkeypatch.setattr(FlashInferBackend, "_session_here", lambda self: True)
    spec = spec_from_dict(small(flashinfer={"workspace_mb": 16, "profile_kernels": True, "profile_repeats": 1}))
    flags = TaskFlags.parse({**os.environ, "DETRUN_KERNEL_TRACER": tracer})
    return FlashInferBackend(spec, torch.device("cpu"), flags=flags)


def test_the_backend_opens_its_window_with_cupti_when_the_task_says_so(monkeypatch):
    cupti = StandInCupti()
    monkeypatch.setitem(sys.modules, "cupti", types.SimpleNamespace(cupti=cupti))
    be = _backend(monkeypatch, "cupti")
    assert be.profile_window(0) and be.session_open
    assert isinstance(be._session.prof, CuptiKernels) and cupti.enabled == {10}
    be.close_profile()
    assert not be.session_open and cupti.enabled == set() and be.profile_note == ""


class StandInTorchProfile:
    """torch.profiler.profile as ProfileSession starts it (on a CPU machine the real one refuses CUDA activity)."""

    def __init__(self, activities):
        self.activities = activities

    def start(self):
        pass

    def stop(self):
        pass


@pytest.mark.parametrize("tracer, installed, recorder", [
    ("auto", True, CuptiKernels),  # the default: CUPTI's kernel records where cupti-python imports
    ("auto", False, StandInTorchProfile),  # else torch.profiler, with no note
    ("torch", True, StandInTorchProfile),
])
def test_the_window_is_recorded_by_the_tracer_the_task_may_use(monkeypatch, tracer, installed, recorder):
    cupti = StandInCupti()
    monkeypatch.setitem(sys.modules, "cupti", types.SimpleNamespace(cupti=cupti) if installed else None)
    monkeypatch.setattr(torch.profiler, "profile", StandInTorchProfile)
    be = _backend(monkeypatch, tracer)
    assert be.profile_window(0) and be.session_open and be.profile_note == ""
    assert type(be._session.prof) is recorder
    assert cupti.enabled == ({10} if recorder is CuptiKernels else set())


def test_auto_takes_torch_where_cupti_python_fails_to_load(monkeypatch):
    class OtherCuda(types.ModuleType):  # cupti-python for another CUDA: its libcupti does not load
        def __getattr__(self, name):
            raise OSError("libcupti.so.13: cannot open shared object file")

    monkeypatch.setitem(sys.modules, "cupti", OtherCuda("cupti"))
    monkeypatch.setattr(torch.profiler, "profile", StandInTorchProfile)
    be = _backend(monkeypatch, "auto")
    assert be.profile_window(0) and type(be._session.prof) is StandInTorchProfile and be.profile_note == ""


def test_auto_is_the_default():
    assert TaskFlags.parse({}).kernel_tracer == "auto"


def test_without_cupti_python_the_window_says_its_session_did_not_start(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupti", None)  # import cupti raises ImportError
    be = _backend(monkeypatch, "cupti")
    be.profile_window(0)
    assert not be.session_open and "kernel profile session did not start" in be.profile_note
    assert "cupti" in be.profile_note
