"""Transparent recording around the FlashInfer names SGLang's flashinfer_backend module calls.

SGLang's FlashInferAttnBackend builds its wrappers from its module's globals (BatchPrefillWith*Wrapper,
BatchDecodeWithPagedKVCacheWrapper, fast_decode_plan, _safe_merge_state). install() replaces those globals
with recording versions of the real classes (or of the fakes a CPU test passes): plan() / begin_forward
record that a wrapper was planned, run() records that it ran and keeps the LSE it computed (asked for with
return_lse=True where SGLang did not; SGLang still gets only what it asked for), the merge records the
merged LSE. Everything else is the class's own. Labels name a wrapper by where SGLang keeps it
(prefill_ragged, prefill_paged[0], decode[0], graph.decode[0]@bs4, graph.full_prefill[0], ...).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

# SGLang's module-global names this layer replaces (flashinfer_backend.py:78-113 at 0.5.23)
PAGED, RAGGED, DECODE = ("BatchPrefillWithPagedKVCacheWrapper", "BatchPrefillWithRaggedKVCacheWrapper",
                         "BatchDecodeWithPagedKVCacheWrapper")
FAST_DECODE_PLAN, MERGE = "fast_decode_plan", "_safe_merge_state"


@dataclass
class WrapperAPI:
    """The FlashInfer names SGLang calls; None takes flashinfer's (through SGLang's module)."""

    paged: Optional[type] = None
    ragged: Optional[type] = None
    decode: Optional[type] = None
    fast_decode_plan: Optional[Callable] = None
    merge_state: Optional[Callable] = None  # stands in for SGLang's _safe_merge_state


class Recorder:
    """What the wrappers did since start(): planned and run wrappers (objects, in order), each run's
    (out, lse), and the merged (out, lse) of SGLang's _safe_merge_state."""

    def __init__(self) -> None:
        self.backend: Any = None  # SGLang's FlashInferAttnBackend, whose attributes name the wrappers
        self.start()

    def start(self) -> None:
        self.planned: List[Any] = []
        self.start_runs()

    def start_runs(self) -> None:
        self.ran: List[Any] = []
        self.results: Dict[int, Tuple[Any, Any]] = {}
        self.merged: Optional[Tuple[Any, Any]] = None

    def on_plan(self, wrapper: Any) -> None:
        self.planned.append(wrapper)

    def on_run(self, wrapper: Any, out: Any, lse: Any) -> None:
        self.ran.append(wrapper)
        self.results[id(wrapper)] = (out, lse)

    def on_merge(self, out: Any, lse: Any) -> None:
        self.merged = (out, lse)

    def labels(self, wrappers: List[Any]) -> List[str]:
        """Each wrapper's label, once, in first-seen order."""
        names = self.names()
        out: List[str] = []
        for w in wrappers:
            label = names.get(id(w), f"unlabelled#{id(w):x}")
            if label not in out:
                out.append(label)
        return out

    def names(self) -> Dict[int, str]:
        """id(wrapper) -> label, from where SGLang's backend keeps each wrapper."""
        be, names = self.backend, {}  # type: Any, Dict[int, str]
        if be is None:
            return names
        if getattr(be, "prefill_wrapper_ragged", None) is not None:
            names[id(be.prefill_wrapper_ragged)] = "prefill_ragged"
        for attr, label in (("prefill_wrappers_paged", "prefill_paged"), ("prefill_wrappers_verify", "verify"),
                            ("decode_wrappers", "decode"), ("full_cg_prefill_wrappers", "graph.full_prefill")):
            for i, w in enumerate(getattr(be, attr, None) or []):
                names[id(w)] = f"{label}[{i}]"
        for attr, label in (("decode_cuda_graph_metadata", "graph.decode"),
                            ("prefill_cuda_graph_metadata", "graph.prefill_paged"),
                            ("draft_extend_cuda_graph_metadata", "graph.draft_extend")):
            for bs, ws in (getattr(be, attr, None) or {}).items():
                for i, w in enumerate(ws):
                    names[id(w)] = f"{label}[{i}]@bs{bs}"
        return names


class WrapperRunError(RuntimeError):
    """A wrapper SGLang ran raised: which one, and whether it was planned for this batch."""

    def __init__(self, rec: Recorder, wrapper: Any, exc: BaseException):
        label = rec.labels([wrapper])[0]
        planned = "" if any(w is wrapper for w in rec.planned) else " without a plan for this batch"
        lines = str(exc).strip().splitlines()
        super().__init__(f"SGLang ran {label}{planned}: {type(exc).__name__}: {lines[0] if lines else ''}")


def recording_class(base: Any, rec: Recorder) -> type:
    """A subclass of a FlashInfer wrapper class that records plan() and run() (all else is base's)."""

    def plan(self, *args, **kwargs):
        rec.on_plan(self)
        return base.plan(self, *args, **kwargs)

    def run(self, q, *args, return_lse: bool = False, **kwargs):
        try:
            out, lse = base.run(self, q, *args, return_lse=True, **kwargs)
        except Exception as exc:  # the row's reason says which of SGLang's wrappers failed, and if it was planned
            raise WrapperRunError(rec, self, exc) from exc
        rec.on_run(self, out, lse)
        return (out, lse) if return_lse else out

    def run_return_lse(self, *args, **kwargs):
        return run(self, *args, return_lse=True, **kwargs)

    # begin_forward is plan under another name (flashinfer: `begin_forward = plan`, bound to base's plan)
    body = dict(plan=plan, begin_forward=plan, run=run, run_return_lse=run_return_lse,
                __module__=__name__, __qualname__=f"Recording{base.__name__}")
    return type(base.__name__, (base,), body)


def recording_function(fn: Callable, on_call: Callable[[tuple, Any], None]) -> Callable:
    """fn, calling on_call(args, result) after each call."""

    def wrapped(*args, **kwargs):
        result = fn(*args, **kwargs)
        on_call(args, result)
        return result

    wrapped.__name__ = getattr(fn, "__name__", "recorded")
    wrapped.__wrapped__ = fn  # type: ignore[attr-defined]
    return wrapped


_ORIGINALS: Dict[str, Any] = {}  # SGLang's module globals before the first install (flashinfer's, when present)


def install(fb_module: Any, api: WrapperAPI, rec: Recorder) -> Dict[str, Any]:
    """Point SGLang's flashinfer_backend globals at recording versions of api's names (or flashinfer's);
    returns them (activate() points the module at them again, for a backend built after another).
    Raises LookupError naming what is missing (no flashinfer and no fake given)."""
    for name in (PAGED, RAGGED, DECODE, FAST_DECODE_PLAN, MERGE):
        if name not in _ORIGINALS and hasattr(fb_module, name):
            _ORIGINALS[name] = getattr(fb_module, name)
    given = {PAGED: api.paged, RAGGED: api.ragged, DECODE: api.decode, FAST_DECODE_PLAN: api.fast_decode_plan,
             MERGE: api.merge_state}
    chosen: Dict[str, Any] = {name: given[name] if given[name] is not None else _ORIGINALS.get(name) for name in given}
    missing = sorted(name for name, value in chosen.items() if value is None)
    if missing:
        raise LookupError(f"flashinfer is not importable and no stand-in was given for {', '.join(missing)}")
    names: Dict[str, Any] = {name: recording_class(chosen[name], rec) for name in (PAGED, RAGGED, DECODE)}

    fdp = chosen[FAST_DECODE_PLAN]

    def fast_decode_plan(self, *args, **kwargs):  # SGLang's decode replay plan, installed after capture
        rec.on_plan(self)
        return fdp(self, *args, **kwargs)

    names[FAST_DECODE_PLAN] = fast_decode_plan
    names[MERGE] = recording_function(chosen[MERGE], lambda _args, res: rec.on_merge(*res))
    activate(fb_module, names)
    return names


def activate(fb_module: Any, names: Dict[str, Any]) -> None:
    """SGLang's module globals are process-wide: the backend about to run points them at its own."""
    for name, value in names.items():
        setattr(fb_module, name, value)
