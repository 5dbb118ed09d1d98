"""detrun bisect: which version of a job's `versions:` first broke a claim, and what changed there.

The job runs pinned to one version at a time (a normal submit of spec.versions.pin(spec, [v]), in that
version's runtime_env) and each run is judged by its claims: exit 0 held, 1 broke; a version that cannot be
installed or run (a DetrunError) stops the bisect, naming it (exit 2), and is never called broken. Where the job
claims the version axis, a run is also judged beside the known-good endpoint's run. The endpoints are run first:
the first must hold and the last must break, else the range does not bracket a break (exit 2; with
expect_break False, a range whose both endpoints hold is exit 0). Then the range is halved until two neighbours
are left: the last version that held and the first that broke. What changed between their runs is said with
compare's own explain (plan fields, path, environment) and the rows' kernel lists, and a job pinned to the two
versions is written to reproduce it. The probe is injectable: search() takes any version -> Probed function.
"""

from __future__ import annotations

import json
import logging
import re
import shlex
from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

import yaml

from ..errors import DetrunError, ExitCode
from ..judge.claims import spec_levels
from ..judge.explain import explain, plan_differences
from ..judge.verdict import FAIL, NOT_VERIFIED, Verdict
from ..paths import write_output
from ..store.manifests import new_run_id
from ..store.runs import RunReader, RunStore
from .requests import BisectRequest
from .submission import claim_flags

log = logging.getLogger(__name__)
VERSION_AXIS = "version"  # the comparison axis of runs in different versions: environments


@dataclass(frozen=True)
class Probed:
    """One version run and judged: its run, its verdict's exit code and headline, the claims it broke."""

    version: str
    run_id: str
    code: ExitCode  # OK: held; MISMATCH: broke
    headline: str
    broken: Tuple[str, ...] = ()  # the failing findings' titles (what broke)
    against: str = ""  # the headline beside the known-good run (jobs that claim the version axis)

    @property
    def held(self) -> bool:
        return self.code == ExitCode.OK

    @property
    def state(self) -> str:
        return "held" if self.held else "broke"

    @staticmethod
    def of(version: str, run_id: str, verdict: Verdict, against: Optional[Verdict] = None) -> "Probed":
        """A probe from its run's verdict (and the verdict beside the known-good run): broke if either fails.
        A verdict that checked nothing (NOT VERIFIED) stops the bisect: it neither held nor broke."""
        for v in (verdict, against):
            if v is not None and v.label == NOT_VERIFIED:
                raise DetrunError(f"run {run_id} is {v.headline} (each version's claims must be checked to say "
                                  "whether it broke)")
        failed = [v for v in (verdict, against) if v is not None and v.failed]
        broken = tuple(dict.fromkeys(f.title for v in failed for f in v.findings if f.severity == FAIL))
        return Probed(version, run_id, ExitCode.MISMATCH if failed else ExitCode.OK, verdict.headline, broken,
                      against.headline if against is not None else "")


# probe(version, known_good): the job run pinned to version and judged (known_good: the first endpoint's probe,
# None while it is being run). Raises DetrunError when the version cannot be installed or run.
Probe = Callable[[str, Optional[Probed]], Probed]


@dataclass(frozen=True)
class Search:
    """What the binary search found: every probe in the order run, and the outcome."""

    versions: Tuple[str, ...]
    probes: Tuple[Probed, ...]
    code: ExitCode  # MISMATCH: a break located; USAGE: the range does not bracket one; OK: no break (expected none)
    outcome: str  # one line
    good: Optional[Probed] = None  # the last version that held
    bad: Optional[Probed] = None  # the first version that broke

    def probe_of(self, version: str) -> Optional[Probed]:
        return next((p for p in self.probes if p.version == version), None)


def _endpoints(versions: Sequence[str], first: Probed, last: Probed, expect_break: bool) -> Optional[Search]:
    """The outcome when the endpoints do not bracket a break (None when they do)."""
    if first.held and not last.held:
        return None
    probes, names = (first, last), tuple(versions)
    if first.held and not expect_break:
        return Search(names, probes, ExitCode.OK, f"no break: the first ({first.version}) and the last "
                      f"({last.version}) version both held (the versions between were not run)")
    if first.held:
        why = f"both held: nothing broke by {last.version}"
    elif last.held:
        why = (f"{first.version} broke and {last.version} held: a fix lies between, not a break "
               "(bisect needs a first version that holds and a last that breaks)")
    else:
        why = f"both broke: nothing in the range is known good ({first.version} already broke)"
    return Search(names, probes, ExitCode.USAGE, f"the range does not bracket a break: {why}")


def search(versions: Sequence[str], probe: Probe, expect_break: bool = True,
           on_probe: Optional[Callable[[Probed], None]] = None) -> Search:
    """Binary search over versions (oldest first) for the first that breaks after the last that held."""
    if len(versions) < 2:
        raise DetrunError(f"bisect needs at least two versions (an ordered range), got {len(versions)}: "
                          f"{', '.join(versions) or 'none'}")
    if len(set(versions)) != len(versions):
        twice = sorted(v for v, n in Counter(versions).items() if n > 1)
        raise DetrunError(f"bisect: versions named twice: {', '.join(twice)}")
    probes: List[Probed] = []

    def run(i: int, good: Optional[Probed]) -> Probed:
        try:
            found = probe(versions[i], good)
        except DetrunError as exc:  # cannot be installed or run: an error naming it, never "broke"
            raise DetrunError(f"bisect stopped at {versions[i]}: {exc}") from None
        probes.append(found)
        log.debug("bisect: %s %s (run %s)", found.version, found.state, found.run_id)
        if on_probe:
            on_probe(found)
        return found

    first = run(0, None)
    last = run(len(versions) - 1, first)
    stop = _endpoints(versions, first, last, expect_break)
    if stop:
        return stop
    lo, hi, good, bad = 0, len(versions) - 1, first, last
    while hi - lo > 1:
        mid = (lo + hi) // 2
        found = run(mid, first)
        if found.held:
            lo, good = mid, found
        else:
            hi, bad = mid, found
    return Search(tuple(versions), tuple(probes), ExitCode.MISMATCH,
                  f"first broke at {bad.version} (run {bad.run_id}); last held at {good.version} (run {good.run_id})",
                  good, bad)


# ---- what changed between the last good run and the first bad one


def _ok_rows(store: RunReader, run: str) -> Dict[str, dict]:
    return {r["key"]: r for r in store.read_rows([run]).to_pylist() if r["status"] == "ok"}


def _kernels(rows: Dict[str, dict]) -> Dict[str, Set[str]]:
    """path -> the kernel names recorded on it (profiled rows only)."""
    out: Dict[str, Set[str]] = defaultdict(set)
    for r in rows.values():
        out[r["path"]] |= set(r["kernels"] or ())
    return out


def _wiring(a: dict, b: dict) -> List[str]:
    """What SGLang's own backend read and wired differently (backend sglang rows): the flag as it read it, and
    each field of the recorded wiring (planned, ran, use_ragged, ...)."""
    read = [] if a["use_paged"] == b["use_paged"] else [
        f"use_paged (as SGLang read it): {a['use_paged']} vs {b['use_paged']}"]
    wa, wb = json.loads(a["wiring"] or "{}"), json.loads(b["wiring"] or "{}")
    return read + [f"wiring.{k}: {wa.get(k)} vs {wb.get(k)}" for k in sorted(set(wa) | set(wb))
                   if wa.get(k) != wb.get(k)]


def _cells(n: int) -> str:
    return f"{n} cell{'s' * (n != 1)}"


def changes(store: RunReader, good: str, bad: str, examples: int = 3) -> List[str]:
    """What differs between the two runs' rows of the same cell (key): bits, plan fields, path, environment
    (explain.explain's words, grouped, with a count and the first cells), SGLang's wiring (backend sglang), cells
    only one run has, and the kernel names recorded per path."""
    a, b = _ok_rows(store, good), _ok_rows(store, bad)
    groups: Dict[str, List[str]] = defaultdict(list)
    bits = 0
    for key in sorted(set(a) & set(b)):
        x, y = a[key], b[key]
        differs = (x["out_digest"], x["lse_digest"]) != (y["out_digest"], y["lse_digest"])
        bits += differs
        wiring = _wiring(x, y)
        if differs or wiring or plan_differences(x, y):
            said = [w for w in explain(x, y) if not w.startswith("unexplained") or not wiring] + wiring
            groups[("bits differ; " if differs else "same bits; ") + "; ".join(said)].append(key)
    out = [f"{bits} of {len(set(a) & set(b))} cells run at both versions differ in bits"]
    for why, keys in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        shown = ", ".join(keys[:examples]) + (f", +{len(keys) - examples} more" if len(keys) > examples else "")
        out.append(f"{_cells(len(keys))}: {why} (e.g. {shown})")
    for name, only in ((good, set(a) - set(b)), (bad, set(b) - set(a))):
        if only:
            out.append(f"{_cells(len(only))} ran only in {name} (e.g. {', '.join(sorted(only)[:examples])})")
    ka, kb = _kernels(a), _kernels(b)
    for path in sorted(set(ka) | set(kb)):
        gone, new = sorted(ka[path] - kb[path]), sorted(kb[path] - ka[path])
        if gone or new:
            out.append(f"kernels on path {path}: " + "; ".join(
                part for part in (f"only before: {', '.join(gone)}" if gone else "",
                                  f"only after: {', '.join(new)}" if new else "") if part))
    return out


# ---- the versions to bisect and the job that reproduces the break


def file_safe(version: str) -> str:
    """A version's name as part of a run id or file name: sglang==0.5.11 -> sglang-0.5.11."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", version).strip("-.") or "version"


def resolve(names: Sequence[str], known: Sequence[str], option: str = "--versions") -> List[str]:
    """The versions asked (environment names, or a bare version such as 0.5.11), as the job names them; all of
    the job's, in its order, when none are asked. One the job does not have is a DetrunError naming it."""
    if not names:
        return list(known)
    out = []
    for name in names:
        match = [k for k in known if k == name or k.rpartition("==")[2] == name]
        if len(match) != 1:
            raise DetrunError(f"{option} {name}: the job's versions are {', '.join(known) or 'none'}"
                              + (" (the name is ambiguous: write package==version)" if match else ""))
        out.append(match[0])
    return out


def repro_text(spec_text: str, job: str, found: Search, changed: Sequence[str]) -> str:
    """The pinned job (YAML) with a header saying what it reproduces."""
    good, bad = found.good, found.bad
    assert good is not None and bad is not None
    header = [f"# detrun bisect {job}: held at {good.version} (run {good.run_id}), broke at {bad.version} "
              f"(run {bad.run_id}).",
              *(f"# broke: {line}" for line in bad.broken[:5]),
              *(f"# changed: {line}" for line in changed[:10]),
              "# `detrun submit` this file: one run per version; the second breaks (exit 1) while the break stays."]
    return "\n".join(header) + "\n" + spec_text


@dataclass(frozen=True)
class Bisected:
    """detrun bisect's answer: the search, what changed at the break, the job written and how to run it."""

    job: str
    search: Search
    changes: Tuple[str, ...] = ()
    written: Optional[str] = None  # the job pinned to the two versions
    command: str = ""  # the command that runs it

    @property
    def code(self) -> ExitCode:
        return self.search.code


def output_path(output: str, version: str) -> Path:
    """Where a probe's pinned job is written: beside the output, named for the version."""
    out = Path(output)
    return out.with_name(f"{out.stem}.{file_safe(version)}{out.suffix or '.yaml'}")


def _submit_probe(req: BisectRequest, data: dict, store: RunStore, version_axis: bool) -> Probe:
    """The real probe: the job pinned to the version (written beside the output) submitted as any job is, in
    that version's runtime_env, and judged by its claims (and beside the known-good run with version_axis)."""
    from ..judge.baseline import verdict_of
    from ..spec.versions import pin
    from . import submission
    from .requests import SubmitRequest

    checks = req.claims.checks()
    # a run alone meets no other version: its own verdict leaves the version claim to the one beside the known good
    alone = replace(checks, expect={**checks.expect, VERSION_AXIS: "ignore"}) if version_axis else checks

    def probe(version: str, good: Optional[Probed]) -> Probed:
        path = output_path(req.output, version)
        write_output(path, yaml.safe_dump(pin(data, [version]), sort_keys=False), "-o/--output")
        run_id = new_run_id(f"{data['name']}-bisect")  # submit adds the environment: <id>-<package>-<version>
        done = submission.submit(SubmitRequest(str(path), req.gpus, req.address, runs_root=req.runs_root,
                                               run_id=run_id, claims=req.claims, jit_cache=req.jit_cache,
                                               verbose=req.verbose))
        runs = getattr(done, "runs", (done,))  # a job with versions: one run per environment (here one)
        if len(runs) != 1 or not isinstance(runs[0], submission.Ran):  # a Jobs API address is refused before
            raise DetrunError(f"run {run_id}: expected one run driven from here, got {done!r}")
        done = runs[0]
        run_id = done.run_id
        if done.failures:
            raise DetrunError(f"run {run_id}: {len(done.failures)} task(s) failed ({done.failures[0]}): a version "
                              "whose tasks fail is not judged")
        verdict = verdict_of(store, [run_id], alone)
        against = verdict_of(store, [good.run_id, run_id], checks) if good is not None and version_axis else None
        return Probed.of(version, run_id, verdict, against)

    return probe


def bisect_job(req: BisectRequest, probe: Optional[Probe] = None,
               on_probe: Optional[Callable[[Probed], None]] = None) -> Bisected:
    """detrun bisect: every check before the first run; then the search (probe: the real one unless given),
    and at a located break what changed and the job pinned to the two versions, written to req.output."""
    from ..spec.model import load_spec
    from ..spec.versions import environments, pin
    from .jobs import is_jobs_address

    if is_jobs_address(req.address):
        raise DetrunError(f"--address {req.address}: bisect waits for each run; give the Ray itself (ray://..., "
                          "host:port or auto), not its Jobs API")
    spec = load_spec(req.spec_path, list(req.overrides))
    known = [env.name for env in environments(spec)]
    if not known:
        raise DetrunError(f"{req.spec_path}: the job has no versions: to bisect (e.g. versions: {{sglang: "
                          "[0.5.11, 0.5.12, 0.5.23]}, or a wheelhouse directory)")
    versions = resolve(req.versions, known)
    checks = req.claims.checks()  # a bad --expect before the first run
    store = RunStore(req.runs_root)
    store.check_writable("--runs-root")
    data = spec.model_dump(mode="json", exclude_defaults=True)
    version_axis = VERSION_AXIS in {**spec_levels(data), **checks.expect} or checks.strict
    found = search(versions, probe or _submit_probe(req, data, store, version_axis), req.expect_break, on_probe)
    if found.good is None or found.bad is None:
        return Bisected(spec.name, found)
    changed = tuple(changes(store, found.good.run_id, found.bad.run_id))
    text = yaml.safe_dump(pin(data, [found.good.version, found.bad.version]), sort_keys=False)
    write_output(req.output, repro_text(text, spec.name, found, changed), "-o/--output")
    command = " ".join(["detrun submit", shlex.quote(req.output), "--runs-root", shlex.quote(req.runs_root),
                        *(shlex.quote(a) for a in claim_flags(req.claims))])
    return Bisected(spec.name, found, changed, req.output, command)
