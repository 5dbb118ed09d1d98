"""`detrun bisect` across real SGLang releases on CPU, finding the real change in how SGLang wires prefill under
CUDA graphs: 0.5.15 gave plain EXTEND its full prefill graph, which plans the paged wrapper whatever
SGLANG_FLASHINFER_USE_PAGED says (flashinfer_backend.py:712-726 at 0.5.15); 0.5.14 has no plain-EXTEND graph
(its capture raises "Invalid mode", flashinfer_backend.py:946), so its prefill runs eager, ragged with the flag off.

The job claims `mode: bitwise` (prefill under cudagraph gives eager's bits) with the flag off. Each release is
SGLang's own FlashInferAttnBackend of that release's wheel (unpacked, first on sys.path of a process of its own:
tests/sglang_release_run.py's ReleaseProbe), run through detrun's task path inline with recording fake FlashInfer
wrappers whose outputs depend on the wrapper kind (tests/sglang_fakes.py); the real `detrun bisect` command
searches, judges each run and says what changed (the probe is that subprocess instead of a Ray submit: no CPU
task runs SGLang's backend through Ray without flashinfer). Which releases backend sglang can drive, and why not the
others: docs/sglang-releases.md.

Needs sglang-0.5.14, -0.5.15 and -0.5.23 wheels in .wheelhouse/ (.ci/run downloads them; README, "Run the tests");
without CI=true a machine without them skips this file.
"""

from __future__ import annotations

import json
import os
import zipfile

import pytest
import yaml

from detrun.judge.wiring import wiring_problems
from detrun.store.runs import RunStore
from tests.helpers import ROOT, cli_main
from tests.sglang_release_run import ReleaseProbe

WHEELHOUSE = ROOT / ".wheelhouse"
RELEASES = ["0.5.14", "0.5.15", "0.5.23"]
HAVE = all(any(WHEELHOUSE.glob(f"sglang-{v}-*.whl")) for v in RELEASES)
if not HAVE and not os.environ.get("CI"):
    pytest.skip("python3 -m pip download --no-deps sglang==0.5.14 -d .wheelhouse (and 0.5.15, 0.5.23)",
                allow_module_level=True)

pytestmark = pytest.mark.slow  # one SGLang import per release, in a process of its own (10-40 s each on 2 cores)

JOB = {
    "name": "releases", "backend": "sglang",
    "sglang": {"version": "0.5.23", "deterministic_inference": False, "dllm_block_size": 4},
    "env": {"SGLANG_FLASHINFER_USE_PAGED": "0"}, "phases": ["prefill"], "modes": ["eager", "cudagraph"],
    "dtype": "bf16", "heads": {"qo": 4, "kv": 2}, "head_dim": 16, "page_size": 4, "seed": 0, "repeats": 1,
    "expect": {"mode": "bitwise"}, "flashinfer": {"decode": {"capture_batch_sizes": [1, 2, 4]}},
    "requests": {"a": {"qo_len": 7}, "b": {"qo_len": 6, "prefix_len": 8}, "c": {"qo_len": 5, "prefix_len": 4}},
    "cases": {"noprefix": ["a"], "prefix": ["b", "c"]},
}


@pytest.fixture(scope="module")
def releases(tmp_path_factory):
    """Each release's wheel unpacked (sglang/ and its dist-info; multimodal_gen/ left out): a sys.path entry."""
    assert HAVE, f"no sglang {', '.join(RELEASES)} wheels in {WHEELHOUSE} (see this file's docstring)"
    out = {}
    for version in RELEASES:
        wheel = next(WHEELHOUSE.glob(f"sglang-{version}-*.whl"))
        home = tmp_path_factory.mktemp(f"sglang-{version}")
        with zipfile.ZipFile(wheel) as z:
            z.extractall(home, [n for n in z.namelist() if not n.startswith("sglang/multimodal_gen/")])
        out[version] = home
    return out


def test_bisect_finds_the_release_whose_prefill_graph_ignores_the_flag(releases, tmp_path, capsys, monkeypatch):
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(dict(JOB, versions={"sglang": RELEASES, "wheelhouse": str(WHEELHOUSE)})))
    ReleaseProbe.install(monkeypatch.setattr, releases, fake=True)
    out, root = tmp_path / "bisected.yaml", tmp_path / "runs"
    code, text, err = cli_main(capsys, "bisect", str(job), "--runs-root", str(root), "-o", str(out),
                               "--format", "json")
    assert code == 1, (text, err)
    doc = json.loads(text)
    assert [(p["version"], p["state"]) for p in doc["probes"]] == [
        ("sglang==0.5.14", "held"), ("sglang==0.5.23", "broke"), ("sglang==0.5.15", "broke")]
    assert (doc["last_held"], doc["first_broke"]) == ("sglang==0.5.14", "sglang==0.5.15")
    assert not any("wiring" in b for p in doc["probes"] for b in p["broken"])  # each release's rule held (audit)
    assert any("mode claimed bitwise" in b for b in doc["probes"][2]["broken"]), doc["probes"][2]
    # what changed: each prefill cell under cudagraph, eager in 0.5.14 (no plain-EXTEND graph) and SGLang's full
    # prefill graph in 0.5.15, paged where 0.5.14 ran the ragged wrapper (the flag off); eager cells the same
    changes = doc["changes"]
    assert changes[0] == "3 of 6 cells run at both versions differ in bits", changes
    graph_cells = [c for c in changes if "wiring.graph: None vs full-prefill" in c]
    assert len(graph_cells) == 2 and all("/cudagraph/" in c for c in graph_cells), changes
    noprefix = next(c for c in graph_cells if "noprefix/" in c)
    assert noprefix.startswith("1 cell: bits differ; ") and "path: ragged vs paged" in noprefix, noprefix
    assert "wiring.ran: ['prefill_ragged'] vs ['graph.full_prefill[0]']" in noprefix, noprefix
    prefix = next(c for c in graph_cells if "prefix/" in c and "noprefix/" not in c)
    assert "path: ragged+paged-prefix vs paged" in prefix and prefix.startswith("2 cells: bits differ"), prefix
    assert not any("/eager/" in c for c in changes[1:]), changes
    # each run's rows come from its own release, and follow that release's wiring rule, not the other's
    for p in doc["probes"]:
        release = p["version"].partition("==")[2]
        rows = RunStore(str(root)).read_rows([p["run_id"]]).to_pylist()
        assert {(r["sglang"], json.loads(r["knobs"])["profile"]) for r in rows} == {
            (release, f"sglang-{release}-default")}
        other = "0.5.15" if release == "0.5.14" else "0.5.14"
        audit = {v: [w for r in rows for w in wiring_problems(json.loads(r["wiring"]), False, False, r["mode"],
                                                              r["path"], [], v)] for v in (release, other)}
        assert audit[release] == [], audit
        # 0.5.15 and 0.5.23's graph prefill (paged) breaks 0.5.14's rule (ragged, no graph); 0.5.14's rows ran
        # eager (graph None) and meet any release's eager rule
        assert (audit[other] != []) == (release != "0.5.14"), audit
    written = yaml.safe_load(out.read_text())
    assert written["versions"]["sglang"] == ["0.5.14", "0.5.15"]
    assert out.read_text().startswith("# detrun bisect releases: held at sglang==0.5.14 (run releases-sglang-0.5.14)"
                                      ", broke at sglang==0.5.15 (run releases-sglang-0.5.15).")
