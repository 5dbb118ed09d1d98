"""The plain lines the CLI prints for submit, status, shrink, bisect, list and baseline (the rich output of
compare, history and timings is render.py's). Each takes what the library returned; none reads or runs."""

from __future__ import annotations

from typing import List

from ..judge.explain import plan_fields


def submitted(plan, runs_root: str) -> List[str]:
    """A Jobs API submission made (run.submission.JobPlan)."""
    return [f"submitted job {plan.submission_id} for run {plan.run_id} to {plan.address}",
            f"follow it with: detrun status {plan.run_id} --runs-root {runs_root}; "
            f"detrun logs {plan.run_id} --runs-root {runs_root}"]


def slots(count: int, devices) -> str:
    """A run's slots and what its tasks ran on (rows' gpu_name): "1 GPU", "2 CPU slots", "3 slots" (mixed)."""
    kinds = {"CPU slot" if d.startswith("cpu") else "GPU" for d in devices}
    kind = kinds.pop() if len(kinds) == 1 else "slot"
    return f"{count} {kind}{'s' * (count != 1)}"


def ran(done) -> str:
    """A run driven from here (run.submission.Ran)."""
    verb = f"resumed: {done.shards_run} shard(s) run" if done.resumed else slots(done.slots, done.devices)
    return f"run {done.run_id}: {verb}, {done.seconds:.1f} s, stored under {done.where}"


def status(st) -> List[str]:
    """detrun status without the job's line (run.submission.RunStatus)."""
    if st.state is None:
        return [f"run {st.run}: no manifest yet under {st.runs_root}"]
    out = [f"run {st.run}: {st.state}, gpus={st.gpus}, shards missing: {len(st.missing)}"
           + (f" ({', '.join(st.missing)})" if st.missing else "")]
    out += [f"  failed: {failure}" for failure in st.failures]
    if st.resumable:
        out.append(f"  finish it with: detrun submit --resume {st.run} --runs-root {st.runs_root}")
    return out


def plan_line(row: dict) -> str:
    """A row's recorded plan: path, attn and each plan field."""
    plan = plan_fields(row["plan"])
    return f"path {row['path']}, attn {row['attn']}; " + ", ".join(f"{k}={v}" for k, v in sorted(plan.items()))


def shrink_step(step, budget_cells: int) -> str:
    """One trial of detrun shrink (run.shrink.Step)."""
    return (f"[{step.cells}/{budget_cells} cells] step {step.number}: {step.tried}: {step.outcome}"
            + (f"; now {step.size}" if step.outcome == "differs" else ""))


def shrunk(found, output) -> List[str]:
    """What detrun shrink found (run.shrink.Shrunk), written to output."""
    p, spec, names = found.pair, found.spec, ", ".join
    state = "budget spent: smaller, not shown minimal" if found.exhausted else "minimal: no smaller batch differs"
    out = [f"{state} ({len(found.steps)} trials, {found.cells} cells): {p.request} differs between "
           f"{found.small} ({names(spec.cases[found.small])}) and {found.large} ({names(spec.cases[found.large])}) "
           f"({p.where}; as run: {p.small} vs {p.large})"]
    out += [f"  plan in {row['case']}: {plan_line(row)}" for row in found.rows]
    out.append(f"  differs in: {'; '.join(found.explain())}")
    others = [n for n in p.differing if n != p.target]
    if others:
        more = f", +{len(others) - 8} more" if len(others) > 8 else ""
        out.append(f"  also differ across batches: {names(others[:8])}{more} (shrink one with --request NAME)")
    return out + [f"wrote {output}: `detrun submit {output}` reproduces it (exit 1)"]


def bisect_probe(probe) -> str:
    """One version run by detrun bisect (run.bisect.Probed): held or broke, its run and verdict."""
    out = f"{probe.version}: {probe.state} (run {probe.run_id}): {probe.headline}"
    return out + (f"\n  beside the known-good run: {probe.against}" if probe.against else "")


def bisected(found) -> List[str]:
    """What detrun bisect found (run.bisect.Bisected): the outcome, the two versions, what changed, the job."""
    s = found.search
    out = [f"bisect {found.job} over {len(s.versions)} versions, {len(s.probes)} runs: {s.outcome}"]
    if s.good is None or s.bad is None:
        return out
    out += [f"  last held:   {s.good.version} (run {s.good.run_id})",
            f"  first broke: {s.bad.version} (run {s.bad.run_id})"]
    out += [f"  broke: {line}" for line in s.bad.broken]
    out += [f"  changed: {line}" for line in found.changes]
    return out + [f"wrote {found.written}: the job pinned to the two versions; reproduce it with: {found.command}"]


def listed(run_id: str, manifest) -> str:
    """One run of detrun list: its manifest, or the error that reading it raised."""
    if isinstance(manifest, Exception):
        return f"{run_id}  damaged: {manifest}"
    m = manifest
    return f"{run_id}  {m.get('status')}  gpus={m.get('gpus')}  spec={m.get('spec_path')}"


def baselines(docs: List[dict], runs_root: str) -> List[str]:
    """detrun baseline show."""
    if not docs:
        return [f"no baselines under {runs_root} (set one with: detrun baseline set RUN)"]
    return [f"{d['spec']}  {d['fingerprint']}  {d['run_id']}  set {d['set'][:19]}  "
            + " ".join(f"{k}={v}" for k, v in sorted(d["fields"].items())) for d in docs]
