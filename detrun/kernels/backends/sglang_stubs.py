"""Import stubs for modules SGLang imports at module load but its FlashInfer attention path never calls.

install() appends one finder to the END of sys.meta_path: it is asked only after every real finder failed,
so a stub stands in only where the real package is missing (the GPU machine has torchvision, so its stub
never loads there). A stub's functions raise when called, naming themselves, so "the attention path never
calls it" is checked by every run, not assumed. used() names the stubs that were imported (every result
must say so). docs/sglang-backend.md lists each stub and why.
"""

from __future__ import annotations

import enum
import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any, Callable, Dict, List, Optional

STUB_VERSION = "0.0.0+detrun.stub"


class StubCalled(RuntimeError):
    """SGLang called into a stubbed module: the stub is not enough for this path."""


class _Anything:
    """Any attribute of a stubbed module: attributes of it are stubs too; calling it raises."""

    def __init__(self, path: str):
        self._path = path

    def __getattr__(self, name: str) -> "_Anything":
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything(f"{self._path}.{name}")

    def __call__(self, *args, **kwargs):
        raise StubCalled(f"{self._path} was called, but it is detrun's import stub (sglang_stubs.py)")

    def __repr__(self) -> str:
        return f"<stub {self._path}>"


def _sgl_kernel(module: types.ModuleType) -> None:
    """sglang-kernel (a 373 MB CUDA wheel built for torch 2.14.1): quantization, layernorm, sampling and
    MoE modules import names from it at load; FlashInferAttnBackend calls none of them."""
    module.__dict__.update(__version__=STUB_VERSION, __getattr__=lambda name: _getattr(module.__name__, name))
    if module.__name__ == "sgl_kernel":
        _fake_registrations()


def _fake_registrations() -> None:
    """The real sgl_kernel defines its torch ops (sgl_kernel::*) when it loads; SGLang then registers fake
    (meta) impls for some at module load on CUDA (0.5.14 layers/moe/topk.py:1887, under `if _is_cuda`), which
    raises "operator sgl_kernel::... does not exist" over the stub (the H100, 2026-12-05). With the stub, a fake
    registration for an sgl_kernel op is recorded in FAKE_OPS and returns the function unchanged; every other
    namespace goes to torch as before. Idempotent."""
    import torch.library

    register = torch.library.register_fake
    if getattr(register, "_detrun_stub", False):
        return

    def register_fake(op, func=None, /, *args, **kwargs):
        name = op if isinstance(op, str) else getattr(op, "_name", "")
        if not name.startswith("sgl_kernel::"):
            return register(op, func, *args, **kwargs)
        FAKE_OPS.append(name)
        return func if func is not None else (lambda fn: fn)

    register_fake._detrun_stub = True  # type: ignore[attr-defined]
    torch.library.register_fake = register_fake


def _getattr(modname: str, name: str) -> _Anything:
    if name.startswith("__"):
        raise AttributeError(name)
    return _Anything(f"{modname}.{name}")


def _interpolation_mode() -> Any:
    return enum.Enum("InterpolationMode", {n: n.lower() for n in (
        "NEAREST", "NEAREST_EXACT", "BILINEAR", "BICUBIC", "BOX", "HAMMING", "LANCZOS")})


def _torchvision(module: types.ModuleType) -> None:
    """torchvision (CPU only: PyPI's Linux wheel is a CUDA build that does not load over CPU torch): SGLang's
    multimodal configs import transforms at load, and so does transformers once it sees a torchvision."""
    name = module.__name__
    fill: Dict[str, Any] = {"__getattr__": lambda attr: _getattr(name, attr)}
    if name == "torchvision":
        fill["__version__"] = STUB_VERSION
    elif name == "torchvision.io":
        fill["ImageReadMode"] = enum.Enum("ImageReadMode", "UNCHANGED GRAY GRAY_ALPHA RGB RGB_ALPHA")
    elif name.startswith("torchvision.transforms"):
        parent = sys.modules.get("torchvision.transforms")
        fill["InterpolationMode"] = getattr(parent, "InterpolationMode", None) or _interpolation_mode()
    module.__dict__.update(fill)


# top-level name -> how its modules are filled in
STUBS: Dict[str, Callable[[types.ModuleType], None]] = {"sgl_kernel": _sgl_kernel, "torchvision": _torchvision}
_used: List[str] = []
FAKE_OPS: List[str] = []  # sgl_kernel ops whose fake registration the stub took (_fake_registrations)


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path=None, target=None) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname.partition(".")[0] not in STUBS:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        module.__path__ = []  # a package: submodules come from this finder too
        STUBS[module.__name__.partition(".")[0]](module)
        if module.__name__ not in _used:
            _used.append(module.__name__)


_FINDER = _StubFinder()


def install() -> None:
    """Stand the stubs in for whichever of their packages is missing (idempotent)."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.append(_FINDER)


def used() -> List[str]:
    """Top-level names of the stubs imported in this process, sorted."""
    return sorted({name.partition(".")[0] for name in _used})
