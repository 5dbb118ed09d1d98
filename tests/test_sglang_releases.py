"""Every SGLang release 0.5.11 .. 0.5.23: a profile and a wiring rule each (releases that share code share the
rule), the rule differing where the code does (plain EXTEND gets its full prefill graph in 0.5.15), and the
lines cited per release checked against every released wheel at hand (.wheelhouse/, DETRUN_SGLANG_WHEELS)."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest

from detrun.judge.wiring import sglang_rule
from detrun.spec.sglang import PROFILES, full_prefill_graph
from detrun.spec.sglang_releases import CHANGES, FB, LINES, RELEASES, lines, release_key, wiring_of
from tests.helpers import ROOT
from tests.sglang_release_lines import release_lines, version_of

ON_PYPI = ["0.5.11", "0.5.12", "0.5.12.post1", "0.5.13", "0.5.13.post1", "0.5.14", "0.5.15", "0.5.15.post1",
           "0.5.16", "0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23"]  # pip index, 2026-12-05
MODES = [(fm, mode) for fm in ("EXTEND", "DLLM_EXTEND", "DECODE") for mode in ("eager", "cudagraph")]


def table(version):
    """The whole rule of a release: (forward mode, mode, flag, deterministic) -> use_ragged."""
    return {(fm, mode, f, d): sglang_rule(version, fm, mode, f, d)
            for fm, mode in MODES for f in (False, True) for d in (False, True)}


def test_every_release_has_a_profile_and_a_rule():
    assert list(RELEASES) == ON_PYPI
    for version in RELEASES:
        assert (version, True) in PROFILES and (version, False) in PROFILES
        assert table(version)  # no release raises
    with pytest.raises(ValueError, match="no wiring rule read for SGLang 0.5.10"):
        sglang_rule("0.5.10", "EXTEND", "eager", False, False)  # 0.5.10 does not read the flag


def test_the_full_prefill_graph_of_0_5_15_changes_the_rule_and_nothing_else():
    old, new = table("0.5.14"), table("0.5.15")
    changed = {k for k in old if old[k] != new[k]}
    # plain EXTEND under CUDA graph, wherever eager would be ragged: flag off, deterministic off
    assert changed == {("EXTEND", "cudagraph", False, False)}
    assert old[("EXTEND", "cudagraph", False, False)] is True  # 0.5.14: no EXTEND graph, the eager ragged prefill
    assert new[("EXTEND", "cudagraph", False, False)] is False  # 0.5.15: the full prefill graph, paged
    assert table("0.5.11") == table("0.5.14")  # 0.5.13's API rewrite and 0.5.14's piecewise rename: same rule
    assert all(table(v) == new for v in RELEASES if release_key(v) >= release_key("0.5.15"))
    # the profile's cudagraph prefill follows: SGLang's full prefill graph from 0.5.15 on, none before
    assert full_prefill_graph({"version": "0.5.14", "deterministic_inference": False}) is None
    graph = full_prefill_graph({"version": "0.5.15", "deterministic_inference": False})
    assert graph is not None and graph.max_padding is None and "flashinfer_backend.py:712-726" in graph.cite
    assert full_prefill_graph({"version": "0.5.16", "deterministic_inference": True}).max_padding == 2


def test_the_rule_groups_are_the_code_read_per_release():
    """CHANGES agrees with LINES: a swapped or misplaced group fails here (each release's own lines say which
    graph API it has, whether plain EXTEND has a graph branch, and which piecewise test its eager rule makes)."""
    assert [w.since for w in CHANGES] == ["0.5.11", "0.5.13", "0.5.14", "0.5.15"]
    for version in RELEASES:
        w, at = wiring_of(version), LINES[version]
        assert (at["capture"] is not None) == (w.graph_api == "capture/replay"), version
        assert (at["out_graph"] is not None) == (w.graph_api == "out_graph"), version
        assert (at["graph_extend"] is not None) == w.extend_graph, version
        assert len(lines(version, "graph_dllm")) == (2 if w.graph_api == "capture/replay" else 1), version
    assert wiring_of("0.5.12.post1") == wiring_of("0.5.11") and wiring_of("0.5.15.post1") == wiring_of("0.5.23")


def wheels():
    """Every SGLang wheel at hand: .wheelhouse/ (CI downloads a few) and DETRUN_SGLANG_WHEELS (a folder of all)."""
    folders = [ROOT / ".wheelhouse"] + [Path(p) for p in os.environ.get("DETRUN_SGLANG_WHEELS", "").split(":") if p]
    found = {version_of(w): w for folder in folders for w in sorted(folder.glob("sglang-*.whl"))}
    return [found[v] for v in RELEASES if v in found]


@pytest.mark.skipif(not wheels(), reason="no SGLang wheel in .wheelhouse/ (.ci/run downloads them)")
@pytest.mark.parametrize("wheel", wheels(), ids=version_of)
def test_the_lines_cited_are_the_release_s_own(wheel):
    version = version_of(wheel)
    assert release_lines(wheel) == LINES[version]
    with zipfile.ZipFile(wheel) as z:
        fb = z.read(FB.removeprefix("python/")).decode().splitlines()
    at = lambda n, k=0: fb[n - 1 + k]  # noqa: E731
    w = wiring_of(version)
    rule = lines(version, "eager_rule")[0]
    assert [at(rule, k).strip() for k in range(1, 4)] == [
        "not self.enable_deterministic", f"and not {w.piecewise}()", "and not self.use_paged"]
    assert "4096" in at(lines(version, "prefill_tile")[0], 1) and "2048" in at(lines(version, "decode_tile")[0], 1)
    for n in lines(version, "graph_dllm"):
        assert at(n).strip() == "use_ragged=not self.use_paged,"
    if w.extend_graph:
        branch, ragged = lines(version, "graph_extend")
        assert at(branch).strip() == "elif forward_mode.is_extend():" and at(ragged).strip() == "use_ragged=False,"
    else:  # no plain-EXTEND graph: the capture path raises for it
        assert 'raise ValueError(f"Invalid mode: {forward_mode=}")' in at(lines(version, "no_graph_mode")[0])
