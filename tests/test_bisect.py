"""detrun bisect's search with an injected probe (no Ray): endpoints first, then halving; a range that does not
bracket a break, a version that cannot be installed, a verdict that checked nothing."""

from __future__ import annotations

import pytest

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
    rewrite_rows(store, "good", lambda r: r.update(kernels=["ref_kernel"]) if is_alone_target(r) else None)

    def newer(r):  # the newer version: another flashinfer everywhere, another path and kernel for one cell
        r.update(flashinfer="0.7.2.post1")
        if r["case"] == "mixed":
            r.update(path="other_path", kernels=["new_kernel"])
        if r["case"] == "prefix_alone":
            return False  # a cell the newer version did not run
    rewrite_rows(store, "bad", newer)
    key = flip_one_ulp(store, "bad", is_alone_target)["key"]
    assert changes(store, "good", "bad") == [
        "1 of 10 cells run at both versions differ in bits",
        "3 cells: same bits; path: paged vs other_path; flashinfer:  vs 0.7.2.post1 (e.g. mixed/long/eager/r0/g0, "
        "mixed/short/eager/r0/g0, mixed/target/eager/r0/g0)",
        f"1 cell: bits differ; flashinfer:  vs 0.7.2.post1 (e.g. {key})",
        "1 cell ran only in good (e.g. prefix_alone/target_p/eager/r0/g0)",
        "kernels on path other_path: only after: new_kernel",
        "kernels on path paged: only before: ref_kernel"]
