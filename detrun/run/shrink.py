"""Shrink a batch-variance failure (detrun shrink): the smallest batch in which a request still differs.

From a run's comparison with `batch: bitwise` the first request whose bits differ between two batch
compositions (or the one --request names) is taken, with its first recorded pair of cases. The larger
composition is then delta-debugged: its other requests dropped (in halves, then smaller pieces, down to one
at a time), copies halved, prefixes dropped, unshared and halved, qo lengths halved; each candidate is a
real detrun run of just the two cases (one mode, one phase, one repeat) on the run's backend and settings,
and is kept when the request still differs. It ends when no reduction still differs (or the cell budget is
spent), with a job spec that reproduces the pair, its two cases renamed for what they hold (target_alone,
target_with_f2).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field, replace
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import pyarrow as pa
import pyarrow.compute as pc
import yaml

from ..errors import DetrunError
from ..judge.compare import compare_runs
from ..judge.explain import explain
from ..judge.findings import judge
from ..judge.verdict import FAIL
from ..record.keys import base_request
from ..record.status import Status
from ..spec.model import JobSpec, spec_from_dict
from ..store.runs import RunStore
from .requests import ShrinkRequest

# A trial: store one complete run of the spec under run_id; returns its failures (none: every row stored).
Trial = Callable[[RunStore, JobSpec, str], List[str]]


def ray_trial(store: RunStore, spec: JobSpec, run_id: str) -> List[str]:
    """The spec's shard as a Ray task on one GPU slot of the connected Ray (runner.connect first)."""
    from . import runner

    return runner.submit(spec, store, 1, run_id=run_id).failures


def inline_trial(store: RunStore, spec: JobSpec, run_id: str) -> List[str]:
    """The spec's shard in this process (no Ray)."""
    from .inline import run_inline

    return run_inline(store, spec, run_id)


@dataclass(frozen=True)
class Pair:
    """A request (a copy: name#i) whose bits differ between case `small` and case `large`."""

    run_id: str
    request: str
    small: str
    large: str
    mode: str
    phase: str = "prefill"
    differing: Tuple[str, ...] = ()  # every request of the run that differs across batches (--request picks one)

    @property
    def target(self) -> str:
        return base_request(self.request)

    @property
    def where(self) -> str:
        """The mode (and the phase, when decode) the pair differs in."""
        return self.mode if self.phase == "prefill" else f"{self.mode}, {self.phase}"


@dataclass(frozen=True)
class _State:
    """A candidate: request definitions (job-file dicts) and the two cases' request lists."""

    requests: Dict[str, dict]
    small: Tuple[str, ...]
    large: Tuple[str, ...]

    def with_requests(self, names: List[str], **change) -> "_State":
        changed = {n: {**self.requests[n], **change} for n in names}
        return replace(self, requests={**self.requests, **changed})


@dataclass
class Step:
    number: int
    tried: str
    outcome: str  # differs | same | not run: <why>
    size: str  # the larger case after the step: requests and tokens
    cells: int  # cells run so far


@dataclass
class Shrunk:
    pair: Pair
    spec: JobSpec  # the minimal pair, ready to submit (it fails: batch claimed bitwise)
    rows: Tuple[dict, dict]  # the request's differing rows in the small and the large case
    steps: List[Step] = field(default_factory=list)
    cells: int = 0
    exhausted: bool = False  # the budget ran out before every reduction was tried

    @property
    def small(self) -> str:
        """The smaller case's name in spec (named for what it holds)."""
        return self.rows[0]["case"]

    @property
    def large(self) -> str:
        return self.rows[1]["case"]

    def explain(self) -> List[str]:
        """The two rows' recorded plan differences (as compare explains a mismatch)."""
        return explain(*self.rows)


def failing_pair(store: RunStore, run_id: str, request: Optional[str] = None) -> Pair:
    """The first request of RUN that differs across batch compositions (judged bitwise), or `request`
    (--request), and its first pair."""
    cmp = compare_runs(store, [run_id], expect={"batch": "bitwise"})
    verdict = judge(cmp)
    found = [f for f in verdict.findings if f.axis == "batch" and f.severity == FAIL
             and f.kind in ("differs", "explained")]
    if not found:
        raise DetrunError(f"nothing to shrink: no request of run {run_id} differs across batch compositions "
                          f"(compared bitwise: {verdict.label.lower()})")
    spec = spec_from_dict(store.manifest(run_id)["spec"], f"{run_id}/manifest.json")
    differing = tuple(dict.fromkeys(base_request(f.request) for f in found))  # copies folded, in order
    if request is not None and request not in spec.requests:
        raise DetrunError(f"--request {request}: run {run_id} has no request {request!r} "
                          f"(its requests: {_names(spec.requests, 12)})")
    if request is not None and request not in differing:
        raise DetrunError(f"--request {request}: {request} does not differ across batch compositions in run "
                          f"{run_id}; these do: {_names(differing, 12)}")
    base = request or differing[0]
    m = next(m for m in cmp.mismatches if m.axis == "batch" and base_request(m.request) == base)
    keys = [m.a.partition(":")[2], m.b.partition(":")[2]]
    table = store.read_rows([run_id])
    rows = {r["key"]: r for r in table.filter(pc.is_in(table["key"], value_set=pa.array(keys))).to_pylist()}
    a, b = rows[keys[0]], rows[keys[1]]
    small, large = sorted((a["case"], b["case"]), key=lambda c: (len(spec.members(c)), spec.case_tokens(c)))
    return Pair(run_id, m.request, small, large, a["mode"], a["phase"], differing)


def case_name(members: Sequence[str], target: str) -> str:
    """A case named for what it holds: target_alone, target_with_a_b, target_with_a_and_3_more."""
    others = [n for n in members if n != target]
    if not others:
        return f"{target}_alone"
    shown = others if len(others) <= 2 else [others[0], f"and_{len(others) - 1}_more"]
    return f"{target}_with_{'_'.join(shown)}"


def case_names(pair: Pair, state: "_State") -> Tuple[str, str]:
    """The names the shrunk pair's cases get: named for what they hold (distinct when they hold the same
    requests in another order)."""
    small, large = case_name(state.small, pair.target), case_name(state.large, pair.target)
    return small, large if large != small else f"{large}_reordered"


def _spec(base: dict, pair: Pair, state: _State, trial: bool) -> JobSpec:
    """A job of just the pair of cases, one mode, one phase and one repeat, on the run's backend and settings.
    A trial keeps the cases' names as they ran; the job written names them for what they hold."""
    small, large = (pair.small, pair.large) if trial else case_names(pair, state)
    cases = {small: list(state.small), large: list(state.large)}
    used = set(state.small) | set(state.large)
    used |= {state.requests[n]["prefix"] for n in used if state.requests[n].get("prefix")}
    data = {k: v for k, v in base.items() if k not in ("sweep", "swept")}
    reference = dict(base.get("reference") or {})
    renamed = {pair.small: small, pair.large: large}
    reference["faults"] = {renamed[c]: f for c, f in (reference.get("faults") or {}).items() if c in renamed}
    data.update(name=f"{base['name']}-found", modes=[pair.mode], phases=[pair.phase], repeats=1, repeats_per_task=None,
                requests={n: state.requests[n] for n in state.requests if n in used}, cases=cases,
                expect={**(base.get("expect") or {}), "batch": "bitwise"}, reference=reference)
    if trial:
        data["store_tensors"] = False
    return spec_from_dict(data, "shrink candidate")


def _names(names, shown: int = 4) -> str:
    names = list(names)
    return ", ".join(names[:shown]) + (f", +{len(names) - shown} more" if len(names) > shown else "")


def _drops(state: _State, target: str) -> Iterator[Tuple[str, _State]]:
    """The larger case without a piece of its other requests: all of them, halves, quarters, ... one."""
    others = [n for n in state.large if n != target]
    size = len(others)
    while size >= 1:
        for start in range(0, len(others), size):
            piece = others[start:start + size]
            what = f"drop {len(piece)} request{'s' * (len(piece) > 1)} ({_names(piece)})"
            yield what, replace(state, large=tuple(n for n in state.large if n not in piece))
        size = size // 2 if size > 1 else 0


def _prefix_key(state: _State, name: str) -> str:
    return state.requests[name].get("prefix") or name


def _prefix_cuts(state: _State, page_size: int) -> Iterator[Tuple[str, _State]]:
    """Per prefix of the larger case: drop it, unshare it, halve it (in whole pages where it is shared)."""
    members = list(dict.fromkeys(state.large + state.small))
    keys = list(dict.fromkeys(_prefix_key(state, n) for n in state.large if state.requests[n].get("prefix_len")))
    for key in keys:
        users = [n for n in members if _prefix_key(state, n) == key]
        plen = state.requests[users[0]]["prefix_len"]
        yield f"drop the prefix of {_names(users)} ({plen} -> 0)", state.with_requests(users, prefix_len=0, prefix=None)
        sharing = [n for n in users if state.requests[n].get("prefix")]
        if sharing:
            yield f"unshare the prefix of {_names(sharing)}", state.with_requests(sharing, prefix=None)
        shared = any(sum(_prefix_key(state, n) == key for n in case) > 1 for case in (state.small, state.large))
        half = plen // 2 // page_size * page_size if shared else plen // 2
        if 0 < half < plen:
            yield f"halve the prefix of {_names(users)} ({plen} -> {half})", state.with_requests(users, prefix_len=half)


def _candidates(state: _State, pair: Pair, page_size: int) -> Iterator[Tuple[str, _State]]:
    """Smaller versions of the larger case, the biggest cuts first."""
    yield from _drops(state, pair.target)
    for name in dict.fromkeys(state.large):
        copies = state.requests[name].get("copies", 1)
        if copies > 1:
            half = copies // 2
            yield f"halve the copies of {name} ({copies} -> {half})", state.with_requests([name], copies=half)
    yield from _prefix_cuts(state, page_size)
    for name in dict.fromkeys(state.large):
        qo = state.requests[name]["qo_len"]
        if qo > 1:
            yield f"halve qo_len of {name} ({qo} -> {qo // 2})", state.with_requests([name], qo_len=qo // 2)


def _outcome(rows: List[dict], pair: Pair, failures: List[str]) -> Tuple[str, Optional[Tuple[dict, dict]]]:
    """(differs | same | not run: why, the differing rows) of the request's rows in the two cases."""
    mine = [r for r in rows if base_request(r["request"]) == pair.target]
    bad = next((r for r in mine if r["status"] != Status.OK), None)
    if bad is not None:
        return f"not run: {bad['case']} {bad['status']}: {bad['reason']}", None
    by = {(r["case"], r["request"]): r for r in mine}
    members = sorted({r["request"] for r in mine})
    if not members or failures:
        return f"not run: {'; '.join(failures) or 'no rows'}", None
    for member in members:
        a, b = by.get((pair.small, member)), by.get((pair.large, member))
        if a and b and (a["out_digest"], a["lse_digest"]) != (b["out_digest"], b["lse_digest"]):
            return "differs", (a, b)
    return "same", None


class _Trials:
    """Runs candidates as detrun runs in a scratch runs root, counting cells against the budget."""

    def __init__(self, pair: Pair, trial: Trial, budget: int, root: str):
        self.pair, self.trial, self.budget = pair, trial, budget
        self.store, self.cells, self.runs = RunStore(root), 0, 0

    @staticmethod
    def cells_of(spec: JobSpec) -> int:
        return len(spec.cases) * len(spec.modes) * len(spec.phases) * spec.repeats

    def fits(self, spec: JobSpec) -> bool:
        return self.cells + self.cells_of(spec) <= self.budget

    def __call__(self, spec: JobSpec) -> Tuple[str, Optional[Tuple[dict, dict]]]:
        self.runs += 1
        run_id = f"trial-{self.runs:04d}"
        failures = self.trial(self.store, spec, run_id)
        self.cells += self.cells_of(spec)
        return _outcome(self.store.read_rows([run_id]).to_pylist(), self.pair, failures)


def _size(spec: JobSpec, case: str, name: str) -> str:
    """The larger case of a trial, under the name it would have in the job written."""
    n = len(spec.members(case))
    return f"{name}: {n} request{'s' * (n > 1)}, {spec.case_tokens(case)} tokens"


def shrink(store: RunStore, run_id: str, trial: Trial = ray_trial, budget: int = 200,
           on_step: Optional[Callable[[Step], None]] = None, request: Optional[str] = None,
           pair: Optional[Pair] = None) -> Shrunk:
    """Delta-debug the larger composition of RUN's first batch difference (of `request`, when named; pair:
    failing_pair's answer, when already asked); see the module docstring."""
    if budget < 2:
        raise DetrunError(f"--budget-cells {budget}: a trial runs 2 cells (the pair), so at least 2")
    pair = pair or failing_pair(store, run_id, request)
    base = store.manifest(run_id)["spec"]
    spec = spec_from_dict(base, f"{run_id}/manifest.json")
    requests = {n: r.model_dump(exclude_defaults=True) for n, r in spec.requests.items()}
    state = _State(requests, tuple(spec.cases[pair.small]), tuple(spec.cases[pair.large]))
    steps: List[Step] = []
    with tempfile.TemporaryDirectory(prefix="detrun-shrink-") as root:
        trials = _Trials(pair, trial, budget, root)

        def attempt(what: str, candidate: _State) -> Optional[Tuple[dict, dict]]:
            job = _spec(base, pair, candidate, trial=True)
            outcome, rows = trials(job)
            name = case_names(pair, candidate)[1]
            steps.append(Step(len(steps) + 1, what, outcome, _size(job, pair.large, name), trials.cells))
            if on_step:
                on_step(steps[-1])
            return rows

        rows = attempt(f"the pair as it ran: {pair.request} in {pair.small} vs {pair.large} ({pair.where})", state)
        if rows is None:
            raise DetrunError(f"cannot shrink: {pair.request} did not differ between {pair.small} and {pair.large} "
                              f"when run again ({pair.where}, one repeat: {steps[0].outcome})")
        exhausted = False
        while not exhausted:
            for what, candidate in _candidates(state, pair, spec.page_size):
                if candidate.large == candidate.small:
                    continue  # the same batch twice cannot differ
                try:
                    job = _spec(base, pair, candidate, trial=True)
                except DetrunError:
                    continue  # not a valid job (a shared prefix off a page boundary, say)
                if not trials.fits(job):
                    exhausted = True
                    break
                found = attempt(what, candidate)
                if found:
                    state, rows = candidate, found
                    break
            else:
                break  # no cut still differs: minimal
    names = dict(zip((pair.small, pair.large), case_names(pair, state)))
    rows = (dict(rows[0], case=names[rows[0]["case"]]), dict(rows[1], case=names[rows[1]["case"]]))
    return Shrunk(pair, _spec(base, pair, state, trial=False), rows, steps, trials.cells, exhausted)


def job_text(shrunk: Shrunk) -> str:
    """The minimal pair as a job file (non-default fields), with a header saying where it came from."""
    p = shrunk.pair
    header = [f"# detrun shrink {p.run_id}: {p.request} differs between {p.small} and {p.large} ({p.where}),",
              f"# here {shrunk.small} and {shrunk.large};",
              f"# {'; '.join(shrunk.explain())}.",
              "# `detrun submit` this file: batch is claimed bitwise, so it fails (exit 1) while the difference stays."]
    body = yaml.safe_dump(shrunk.spec.model_dump(mode="json", exclude_defaults=True), sort_keys=False)
    return "\n".join(header) + "\n" + body


def shrink_run(req: ShrinkRequest, on_step: Optional[Callable[[Step], None]] = None) -> Shrunk:
    """detrun shrink: shrink req.run's first batch difference (or req.request's) and write the minimal pair
    as a job spec to req.output. The trials run in this process, or on Ray with req.address; every check
    is made before Ray starts."""
    from ..paths import write_output

    if req.inline and req.address:
        raise DetrunError(f"--inline runs the trials in this process, --address {req.address} on Ray: pass one")
    store = RunStore(req.runs_root)
    pair = failing_pair(store, req.run, req.request)  # a missing run, nothing to shrink: exit 2 before Ray
    trial = inline_trial
    if req.address:
        from . import runner

        runner.connect(req.address, 1, verbose=req.verbose)
        trial = ray_trial
    found = shrink(store, req.run, trial, req.budget_cells, on_step, pair=pair)
    write_output(req.output, job_text(found), "-o/--output")
    return found
