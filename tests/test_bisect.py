"""detrun bisect's search with an injected probe (no Ray): endpoints first, then halving; a range that does not
bracket a break, a version that cannot be installed, a verdict that checked nothing."""

from __future__ import annotations

import json

import pytest
import yaml

from detrun.errors import DetrunError, ExitCode
from detrun.run.bisect import Probed, resolve, search

VERSIONS = [f"sglang==0.5.{n}" for n in range(10, 24)]  # 14 versions, oldest first


class FakeProbe:
    """Holds up to (not including) index `breaks`; `fixed` from which it holds again; `fails`: DetrunError."""

    def __init__(self, breaks, fixed=None, fails=None):
        self.breaks, self.fixed, self.fails, self.calls = breaks, fixed, fails, []

    def __call__(self, version, good):
        self.calls.append((version, good.version if good else None))
        i = VERSIONS.index(version)
        if version == self.fails:
            raise DetrunError(f"version {version} cannot be installed: no wheel in the wheelhouse")
        broke = i >= self.breaks and (self.fixed is None or i < self.fixed)
        code = ExitCode.MISMATCH if broke else ExitCode.OK
        return Probed(version, f"run-{i}", code, f"verdict of {version}", ("batch claimed bitwise",) if broke else ())


@pytest.mark.parametrize("breaks", range(1, len(VERSIONS)))
def test_finds_the_first_version_that_breaks(breaks):
    probe = FakeProbe(breaks)
    found = search(VERSIONS, probe)
    assert found.code == ExitCode.MISMATCH
    assert (found.good.version, found.bad.version) == (VERSIONS[breaks - 1], VERSIONS[breaks])
    assert (found.good.run_id, found.bad.run_id) == (f"run-{breaks - 1}", f"run-{breaks}")
    tried = [v for v, _ in probe.calls]
    assert tried[:2] == [VERSIONS[0], VERSIONS[-1]]  # the endpoints first
    assert len(tried) == len(set(tried)) <= 2 + 4  # ceil(log2(13)) halvings
    assert [g for _, g in probe.calls] == [None] + [VERSIONS[0]] * (len(tried) - 1)  # beside the known good
    assert [p.version for p in found.probes] == tried


def test_a_range_whose_first_version_breaks_does_not_bracket():
    found = search(VERSIONS, FakeProbe(0))
    assert found.code == ExitCode.USAGE and found.good is None and found.bad is None
    assert [p.state for p in found.probes] == ["broke", "broke"]  # both verdicts, to show
    assert "does not bracket a break: both broke" in found.outcome


def test_a_range_that_holds_throughout_is_exit_2_unless_no_break_is_expected():
    found = search(VERSIONS, FakeProbe(len(VERSIONS)))
    assert found.code == ExitCode.USAGE and "both held" in found.outcome
    assert [p.state for p in found.probes] == ["held", "held"]
    assert search(VERSIONS, FakeProbe(len(VERSIONS)), expect_break=False).code == ExitCode.OK
    # without --expect-break a break is still a break
    assert search(VERSIONS, FakeProbe(5), expect_break=False).code == ExitCode.MISMATCH


def test_a_fix_is_not_a_break():
    found = search(VERSIONS, FakeProbe(0, fixed=6))
    assert found.code == ExitCode.USAGE and "a fix lies between" in found.outcome


def test_a_version_that_cannot_be_installed_stops_the_bisect_naming_it():
    seen = []
    with pytest.raises(DetrunError, match="sglang==0.5.16 cannot be installed"):
        search(VERSIONS, FakeProbe(9, fails=VERSIONS[6]), on_probe=seen.append)
    assert [p.version for p in seen] == [VERSIONS[0], VERSIONS[-1]]  # shown as they ran, before the error


def test_a_break_then_fix_inside_the_range_still_yields_neighbours():
    # held 0-3, broke 4-7, held 8-12, broke 13: binary search finds an adjacent (held, broke) pair
    probe = FakeProbe(4, fixed=8)
    probe_last = lambda v, g: probe(v, g) if v != VERSIONS[-1] else Probed(v, "run-13", ExitCode.MISMATCH, "x")  # noqa: E731
    found = search(VERSIONS, probe_last)
    good, bad = VERSIONS.index(found.good.version), VERSIONS.index(found.bad.version)
    assert bad == good + 1 and found.good.held and not found.bad.held


def test_two_versions_need_no_halving_and_fewer_are_refused():
    probe = FakeProbe(1)
    found = search(VERSIONS[:2], probe)
    assert found.code == ExitCode.MISMATCH and len(probe.calls) == 2
    with pytest.raises(DetrunError, match="at least two versions"):
        search(VERSIONS[:1], probe)
    with pytest.raises(DetrunError, match="named twice: sglang==0.5.10"):
        search([VERSIONS[0], VERSIONS[0]], probe)


def test_versions_resolve_against_the_jobs_names():
    assert resolve([], VERSIONS[:3]) == VERSIONS[:3]
    assert resolve(["0.5.12", "sglang==0.5.10"], VERSIONS) == [VERSIONS[2], VERSIONS[0]]
    with pytest.raises(DetrunError, match="--versions 0.4.0: the job's versions are sglang==0.5.10"):
        resolve(["0.4.0"], VERSIONS)
    both = ["flashinfer==0.5.11", "sglang==0.5.11"]
    with pytest.raises(DetrunError, match="ambiguous"):
        resolve(["0.5.11"], both)


def test_changes_name_the_cells_plans_environment_and_kernels_that_differ(store):
    from detrun.run.bisect import changes
    from tests.helpers import TINY, flip_one_ulp, is_alone_target, rewrite_rows, run_inline, small

    run_inline(store, small(**TINY), "good")
    run_inline(store, small(**TINY), "bad")
    assert changes(store, "good", "bad") == ["0 of 11 cells run at both versions differ in bits"]
    ragged, paged = json.dumps({"use_ragged": True, "ran": ["R"]}), json.dumps({"use_ragged": False, "ran": ["P"]})

    def older(r):  # a kernel recorded for one cell; SGLang's wiring of case prefix_shared (as backend sglang records)
        r.update(kernels=["ref_kernel"] if is_alone_target(r) else r["kernels"])
        if r["case"] == "prefix_shared":
            r.update(wiring=ragged, use_paged=False)  # as SGLang 0.5.10, which does not read the flag
    rewrite_rows(store, "good", older)

    def newer(r):  # the newer version: another flashinfer everywhere, another path and kernel for one case,
        r.update(flashinfer="0.7.2.post1")  # SGLang reads the flag and wires prefix_shared paged
        if r["case"] == "mixed":
            r.update(path="other_path", kernels=["new_kernel"])
        if r["case"] == "prefix_shared":
            r.update(wiring=paged, use_paged=True)
        if r["case"] == "prefix_alone":
            return False  # a cell the newer version did not run
    rewrite_rows(store, "bad", newer)
    key = flip_one_ulp(store, "bad", is_alone_target)["key"]
    assert changes(store, "good", "bad") == [
        "1 of 10 cells run at both versions differ in bits",
        "3 cells: same bits; path: paged vs other_path; flashinfer:  vs 0.7.2.post1 (e.g. mixed/long/eager/r0/g0, "
        "mixed/short/eager/r0/g0, mixed/target/eager/r0/g0)",
        "2 cells: same bits; flashinfer:  vs 0.7.2.post1; use_paged (as SGLang read it): False vs True; wiring.ran: "
        "['R'] vs ['P']; wiring.use_ragged: True vs False (e.g. prefix_shared/sibling/eager/r0/g0, "
        "prefix_shared/target_p/eager/r0/g0)",
        f"1 cell: bits differ; flashinfer:  vs 0.7.2.post1 (e.g. {key})",
        "1 cell ran only in good (e.g. prefix_alone/target_p/eager/r0/g0)",
        "kernels on path other_path: only after: new_kernel",
        "kernels on path paged: only before: ref_kernel"]


FI = ["0.6.7", "0.7.0", "0.7.1", "0.7.2", "0.7.3"]  # the job's flashinfer versions; 0.7.2 breaks batch


def _job(tmp_path, **extra) -> str:
    from tests.helpers import TINY, small

    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(small(**TINY, versions={"flashinfer": FI}, **extra)))
    return str(path)


class StoredProbe:
    """Each version a real run in the store (inline, rows marked with the version), judged by the real judge;
    from `breaks` on, one output flipped by one ULP (batch breaks)."""

    def __init__(self, store, breaks="flashinfer==0.7.2", prefix="job"):
        self.store, self.breaks, self.runs, self.prefix = store, breaks, [], prefix

    def __call__(self, version, good):
        from detrun.judge.baseline import verdict_of
        from tests.helpers import TINY, flip_one_ulp, is_alone_target, rewrite_rows, run_inline, small

        run_id = f"{self.prefix}-{version.replace('==', '-')}"
        run_inline(self.store, small(**TINY), run_id)
        rewrite_rows(self.store, run_id, lambda r: r.update(version=version, flashinfer=version.partition("==")[2]))
        if FI.index(version.partition("==")[2]) >= FI.index(self.breaks.partition("==")[2]):
            flip_one_ulp(self.store, run_id, is_alone_target)
        self.runs.append(run_id)
        return Probed.of(version, run_id, verdict_of(self.store, [run_id]))


def test_bisect_job_writes_the_job_pinned_to_the_two_versions(store, tmp_path):
    from detrun.run.bisect import bisect_job
    from detrun.run.requests import BisectRequest
    from detrun.spec.model import load_spec
    from detrun.spec.versions import environments

    out = tmp_path / "found" / "bisected.yaml"
    req = BisectRequest(_job(tmp_path), output=str(out), runs_root=str(tmp_path / "runs"))
    probe = StoredProbe(store)
    found = bisect_job(req, probe)
    assert found.code == ExitCode.MISMATCH
    assert (found.search.good.version, found.search.bad.version) == ("flashinfer==0.7.1", "flashinfer==0.7.2")
    assert probe.runs[:2] == ["job-flashinfer-0.6.7", "job-flashinfer-0.7.3"]
    assert found.search.bad.broken and "batch claimed explained" in found.search.bad.broken[0]
    assert found.changes[0] == "1 of 11 cells run at both versions differ in bits"
    assert found.changes[1].startswith("1 cell: bits differ; flashinfer: 0.7.1 vs 0.7.2 (e.g. alone/target/")
    pinned = load_spec(out)
    assert [e.name for e in environments(pinned)] == ["flashinfer==0.7.1", "flashinfer==0.7.2"]
    header = out.read_text().splitlines()[:2]
    assert header[0] == ("# detrun bisect small: held at flashinfer==0.7.1 (run job-flashinfer-0.7.1), broke at "
                         "flashinfer==0.7.2 (run job-flashinfer-0.7.2).")
    assert found.command == f"detrun submit {out} --runs-root {tmp_path / 'runs'}"


def test_bisect_command_prints_each_version_and_the_break(capsys, store, tmp_path, monkeypatch):
    from detrun.run import bisect
    from tests.helpers import cli_main

    monkeypatch.setattr(bisect, "_submit_probe", lambda req, data, store_, axis: StoredProbe(store))
    out = tmp_path / "b.yaml"
    rr = ["--runs-root", str(tmp_path / "runs"), "-o", str(out)]
    code, text, err = cli_main(capsys, "bisect", _job(tmp_path), *rr, "--versions", "0.7.0,0.7.1", "--versions",
                               "0.7.2")
    assert code == 1, err
    lines = text.splitlines()
    assert lines[0].startswith("flashinfer==0.7.0: held (run job-flashinfer-0.7.0): REPRODUCIBLE (exit 0)")
    assert lines[1].startswith("flashinfer==0.7.2: broke (run job-flashinfer-0.7.2): DETERMINISM FAILURE (exit 1)")
    assert lines[2].startswith("flashinfer==0.7.1: held")
    assert lines[3] == ("bisect small over 3 versions, 3 runs: first broke at flashinfer==0.7.2 (run "
                        "job-flashinfer-0.7.2); last held at flashinfer==0.7.1 (run job-flashinfer-0.7.1)")
    assert f"wrote {out}: the job pinned to the two versions; reproduce it with: detrun submit {out}" in text
    # the range does not bracket a break: exit 2, both verdicts shown
    monkeypatch.setattr(bisect, "_submit_probe", lambda req, data, store_, axis: StoredProbe(store, prefix="again"))
    code, text, _ = cli_main(capsys, "bisect", _job(tmp_path), *rr, "--versions", "0.7.2,0.7.3", "--format", "json")
    doc = json.loads(text)
    assert code == 2 and doc["exit_code"] == 2 and "does not bracket a break: both broke" in doc["outcome"]
    assert [(p["version"], p["state"]) for p in doc["probes"]] == [("flashinfer==0.7.2", "broke"),
                                                                   ("flashinfer==0.7.3", "broke")]
    assert doc["written"] is None and doc["last_held"] is None


def test_bisect_refuses_bad_input_before_running_anything(capsys, tmp_path):
    from tests.helpers import TINY, cli_error, small

    rr = ["--runs-root", str(tmp_path / "runs")]
    code, line = cli_error(capsys, "bisect", _job(tmp_path), *rr, "--versions", "0.9.9,0.7.0")
    assert code == 2 and line.startswith("detrun: error: --versions 0.9.9: the job's versions are flashinfer==0.6.7")
    plain = tmp_path / "plain.yaml"
    plain.write_text(yaml.safe_dump(small(**TINY)))
    code, line = cli_error(capsys, "bisect", str(plain), *rr)
    assert code == 2 and "the job has no versions: to bisect" in line
    code, line = cli_error(capsys, "bisect", _job(tmp_path), *rr, "--address", "http://head:8265")
    assert code == 2 and "bisect waits for each run" in line
    assert not (tmp_path / "runs").exists()


def test_the_submit_probe_pins_each_version_and_judges_it_beside_the_known_good(store, tmp_path, monkeypatch):
    """The real probe without Ray: submit replaced by an inline run whose rows say its version; from 0.7.2 on
    every output's bits differ from 0.6.7's, the same way in every cell (each run's own claims hold): only the
    version claim, judged beside the known-good run, breaks."""
    from detrun.judge.requests import ClaimOptions
    from detrun.run import inline, submission
    from detrun.run.bisect import bisect_job, output_path
    from detrun.run.requests import BisectRequest
    from detrun.spec.model import load_spec, spec_from_dict
    from detrun.spec.versions import environments
    from tests.helpers import rewrite_rows

    submitted = []

    def submit(req, progress=None):
        spec = load_spec(req.spec_path)
        (env,) = environments(spec)
        submitted.append((env.name, req.run_id))
        plain = {k: v for k, v in spec.model_dump(mode="json").items() if k != "versions"}  # no runtime_env here
        assert not inline.run_inline(store, spec_from_dict(plain), req.run_id)
        newer = FI.index(env.version) >= FI.index("0.7.2")
        rewrite_rows(store, req.run_id, lambda r: r.update(
            version=env.name, out_digest=r["out_digest"] + ("-072" if newer else "")))
        return submission.Ran(req.run_id, False, 1, 1, [], 0.1, "here")

    monkeypatch.setattr(submission, "submit", submit)
    out = tmp_path / "bisected.yaml"
    claims = ClaimOptions(expect=("version=bitwise",))
    found = bisect_job(BisectRequest(_job(tmp_path), output=str(out), runs_root=str(tmp_path / "runs"),
                                     claims=claims))
    s = found.search
    assert found.code == ExitCode.MISMATCH and (s.good.version, s.bad.version) == ("flashinfer==0.7.1",
                                                                                   "flashinfer==0.7.2")
    assert [name for name, _ in submitted] == ["flashinfer==0.6.7", "flashinfer==0.7.3", "flashinfer==0.7.1",
                                               "flashinfer==0.7.2"]
    assert all(run.startswith("small-bisect-") for _, run in submitted)
    assert all(p.headline.startswith("REPRODUCIBLE (exit 0)") for p in s.probes)  # each run alone holds
    assert s.probes[0].against == ""  # the known good itself
    assert s.bad.against.startswith("DETERMINISM FAILURE (exit 1)") and s.good.against.startswith("REPRODUCIBLE")
    assert s.bad.broken[0] == ("version claimed bitwise, 6 requests (decode#*, long, short, sibling, +2 more) "
                               "differ (unexplained)")
    for name, _ in submitted:  # each probe's job: the job pinned to its version, beside the output
        assert [e.name for e in environments(load_spec(output_path(str(out), name)))] == [name]
    assert found.command == f"detrun submit {out} --runs-root {tmp_path / 'runs'} --expect version=bitwise"


def test_a_run_that_checked_nothing_stops_the_bisect(store):
    from detrun.judge.baseline import verdict_of
    from tests.helpers import TINY, run_inline, small

    run_inline(store, small(**TINY, expect={"repeat": "bitwise"}), "one-repeat")  # repeat claimed, one repeat run

    def probe(version, good):
        return Probed.of(version, "one-repeat", verdict_of(store, ["one-repeat"]))

    with pytest.raises(DetrunError, match=r"^bisect stopped at sglang==0.5.10: run one-repeat is NOT VERIFIED "
                                          r"\(exit 1\); repeat claimed bitwise, but nothing was compared"):
        search(VERSIONS[:3], probe)
