"""backend auto never falls back silently: a task with CUDA must import flashinfer, or say why it did not."""

import sys

import pytest

from detrun.kernels import envinfo
from detrun.kernels.backends.base import BackendUnavailable
from detrun.run import worker
from detrun.run.worker import resolve_backend, run_shard
from detrun.spec.matrix import Shard, expected_keys
from detrun.spec.model import spec_from_dict
from tests.helpers import small

BROKEN = 'raise ImportError("libcudart.so.13: cannot open shared object file\\nsecond line")\n'
REASON = ("backend auto: the task has a CUDA device but flashinfer failed to import: "
          "ImportError: libcudart.so.13: cannot open shared object file")


@pytest.fixture
def fake_flashinfer(tmp_path, monkeypatch):
    """Put a flashinfer package whose __init__ is `body` first on sys.path (none imported before)."""

    def put(body: str) -> None:
        (tmp_path / "flashinfer").mkdir()
        (tmp_path / "flashinfer" / "__init__.py").write_text(body)
        monkeypatch.syspath_prepend(str(tmp_path))
        monkeypatch.delitem(sys.modules, "flashinfer", raising=False)

    return put


def _spec(backend):
    return spec_from_dict(small(backend=backend))


def test_auto_with_cuda_and_a_broken_flashinfer_raises_naming_the_error(fake_flashinfer):
    fake_flashinfer(BROKEN)
    with pytest.raises(BackendUnavailable) as err:
        resolve_backend(_spec("auto"), has_cuda=True)
    assert str(err.value) == REASON


def test_explicit_flashinfer_with_a_broken_import_raises_too(fake_flashinfer):
    fake_flashinfer(BROKEN)
    with pytest.raises(BackendUnavailable, match=r"^backend flashinfer: .* failed to import: ImportError: libcudart"):
        resolve_backend(_spec("flashinfer"), has_cuda=True)


def test_auto_without_cuda_is_the_reference_and_says_why(fake_flashinfer):
    fake_flashinfer(BROKEN)  # never imported: no CUDA decides it
    assert resolve_backend(_spec("auto"), has_cuda=False) == (
        "reference", "backend auto -> reference (no CUDA device in the task)")


def test_explicit_flashinfer_without_cuda_raises():
    with pytest.raises(BackendUnavailable, match="^backend flashinfer: the task has no CUDA device$"):
        resolve_backend(_spec("flashinfer"), has_cuda=False)


def test_auto_with_cuda_and_a_working_flashinfer_is_flashinfer(fake_flashinfer):
    fake_flashinfer("__version__ = '0.6.7.post3'\n")
    assert resolve_backend(_spec("auto"), has_cuda=True) == ("flashinfer", "backend auto -> flashinfer")
    assert "flashinfer" in sys.modules  # it was really imported, not only found


def test_explicit_reference_is_never_resolved_away():
    def load():
        raise AssertionError("the reference needs no flashinfer")

    assert resolve_backend(_spec("reference"), has_cuda=True, load=load) == ("reference", "")


def test_a_shard_whose_backend_is_unavailable_is_all_error_rows(fake_flashinfer, monkeypatch):
    """The task does not crash: every cell is an error row naming the import failure, backend flashinfer."""
    fake_flashinfer(BROKEN)
    monkeypatch.setattr(worker, "cuda_present", lambda device: True)  # the device stays the CPU
    monkeypatch.setenv("SGLANG_FLASHINFER_USE_PAGED", "1")  # as runtime_env sets the spec's env
    data = small(backend="auto", modes=["eager"], repeats=1)
    out = run_shard(data, Shard(0, (0,)), "b1")
    rows = out["rows"]
    assert sorted(r["key"] for r in rows) == sorted(expected_keys(spec_from_dict(data), 1))
    assert {r["status"] for r in rows} == {"error"}
    assert {r["reason"] for r in rows} == {f"not run: {REASON}"}
    assert {r["backend"] for r in rows} == {"flashinfer"}
    assert {r["use_paged"] for r in rows} == {True}  # read from the env, with no backend built
    assert out["note"] == REASON


def _sglang_spec(version="0.5.23"):
    return spec_from_dict(small(backend="sglang", sglang={"version": version}, env={}))


@pytest.mark.parametrize("installed, found", [("0.5.22", "SGLang 0.5.22 is installed"),
                                              ("", "no SGLang is installed")])
def test_backend_sglang_with_another_or_no_sglang_is_an_environment_mismatch(monkeypatch, installed, found):
    monkeypatch.setattr(envinfo, "installed_sglang", lambda: installed)
    from detrun.kernels.backends.base import EnvironmentMismatch

    with pytest.raises(EnvironmentMismatch) as err:
        resolve_backend(_sglang_spec(), has_cuda=True)
    assert str(err.value) == (f"backend sglang: the job names SGLang 0.5.23 but {found} in the task's environment")


def test_backend_sglang_with_its_sglang_but_no_cuda_is_unavailable(monkeypatch):
    monkeypatch.setattr(envinfo, "installed_sglang", lambda: "0.5.23")
    with pytest.raises(BackendUnavailable, match="^backend sglang: the task has no CUDA device$"):
        resolve_backend(_sglang_spec(), has_cuda=False)


def test_backend_sglang_needs_a_release_that_reads_the_flag():
    from detrun.errors import DetrunError

    with pytest.raises(DetrunError, match=r"backend: sglang runs SGLang's own FlashInferAttnBackend; .* 0\.5\.11 or"):
        _sglang_spec("0.5.10")


def test_another_sglang_in_the_task_stops_the_run_with_exit_2_and_no_rows(monkeypatch, store, capsys):
    """The driver (here the in-process runner) stops on the task's environment error: no rows are written,
    the run is not complete, and it is a DetrunError (the CLI's exit 2)."""
    from detrun.errors import DetrunError
    from tests.helpers import run_inline

    monkeypatch.setattr(envinfo, "installed_sglang", lambda: "0.5.22")
    with pytest.raises(DetrunError, match="SGLang 0.5.22 is installed") as err:
        run_inline(store, small(backend="sglang", sglang={"version": "0.5.23"}), "wrong-sglang")
    assert type(err.value) is DetrunError
    assert store.read_rows(["wrong-sglang"]).num_rows == 0
    assert store.manifest("wrong-sglang")["status"] != "complete"
