"""History per job: a case is compared only with earlier runs of the same job, and the first run where it
differs is named; damaged runs are listed and the rest still shown."""

import json

from typer.testing import CliRunner

from detrun.cli import app
from detrun.judge.history import history, job_of
from tests.helpers import TINY, flip_one_ulp, is_alone_target, rewrite_rows, run_inline, small

# two jobs that share case `alone` and request `target`, with different lengths
OTHER = dict(name="other", requests={"target": {"qo_len": 33}}, cases={"alone": ["target"]}, repeats=2,
             modes=["eager"])


def test_runs_of_other_jobs_are_not_compared(store):
    run_inline(store, small(**TINY), "small-1")
    run_inline(store, small(**OTHER), "other-1")
    run_inline(store, small(**TINY), "small-2")
    run_inline(store, small(**OTHER), "other-2")
    hist = history(store)
    assert [r.verdict for r in hist.runs] == ["pass"] * 4 and hist.drifts == []
    assert len({r.job for r in hist.runs}) == 2
    flip_one_ulp(store, "other-2", lambda r: r["request"] == "target")
    (drift,) = history(store).drifts
    assert (drift.job, drift.run_id, drift.since) == (job_of(store.manifest("other-2")["spec"]), "other-2", "other-1")


def test_job_ignores_repeats_and_claims_but_not_what_a_cell_computes():
    base = small(**TINY)
    assert job_of(base) == job_of(dict(base, repeats=5, expect={"batch": "bitwise"}, isolation={"samples": 3}))
    assert job_of(base) != job_of(dict(base, seed=8))
    assert job_of(base) != job_of(small(name="other", **TINY))
    one, other = ({"sglang": [v], "wheelhouse": "/w"} for v in ("0.5.11", "0.5.23"))  # pinned to one version each
    assert job_of(dict(base, versions=one)) == job_of(dict(base, versions=other)) == job_of(base)


def test_damaged_runs_are_listed_and_the_rest_still_shown(store, tmp_path):
    for name in ("n1", "n2", "n3", "n4"):
        run_inline(store, small(**TINY), name)
    part = store.row_files("n2")[0]
    data = open(part, "rb").read()
    open(part, "wb").write(data[: len(data) // 2])  # a truncated Parquet file
    (tmp_path / "runs" / "n3" / "manifest.json").write_text("{not json")
    flip_one_ulp(store, "n4", lambda r: r["case"] == "alone" and r["request"] == "target")
    hist = history(store)
    assert [(r.run_id, r.verdict) for r in hist.runs] == [
        ("n1", "pass"), ("n2", "damaged"), ("n4", "FAIL"), ("n3", "damaged")]
    damaged = {r.run_id: r.headline for r in hist.runs if r.verdict == "damaged"}
    assert "corrupt or truncated Parquet" in damaged["n2"] and "unreadable manifest" in damaged["n3"]
    assert [d.run_id for d in hist.drifts] == ["n4"]
    cli, rr = CliRunner(), ["--runs-root", str(tmp_path / "runs")]
    out = cli.invoke(app, ["history", *rr])
    assert out.exit_code == 0 and "n2" in out.output and "damaged" in out.output
    assert "first differs at run" in out.output
    listed = cli.invoke(app, ["list", *rr])
    assert listed.exit_code == 0
    lines = {ln.split()[0]: ln for ln in listed.output.splitlines()}
    assert set(lines) == {"n1", "n2", "n3", "n4"} and "complete" in lines["n4"]
    for run in ("n2", "n3"):  # list says what history says: damaged, and why
        assert lines[run] == f"{run}  damaged: {damaged[run]}"


def test_history_names_first_differing_run(store):
    ids = [run_inline(store, small(**TINY), f"night-{i}") for i in range(1, 6)]
    flip_one_ulp(store, ids[2], is_alone_target)
    hist = history(store)
    assert [r.run_id for r in hist.runs] == ids
    assert [r.verdict for r in hist.runs] == ["pass", "pass", "FAIL", "pass", "pass"]
    assert hist.runs[2].differs == 1 and hist.runs[0].rows == hist.runs[0].ok == 11
    assert [str(d) for d in hist.drifts] == [
        f"{hist.runs[0].job} alone/target/eager [{hist.runs[0].fingerprints[0]}]: first differs at run 3 "
        "(night-3), against run 1 (night-1)"]


def _versioned(store, run_id: str, version: str, broken: bool = False, **row) -> str:
    """A run of small(**TINY) whose rows say they ran in the versions: environment `version` (and row's fields);
    broken: one output flipped by one ULP (its batch claim breaks)."""
    run_inline(store, small(**TINY), run_id)  # here, without the version's runtime_env; stored as submit stores it:
    if version:  # the job pinned to its version, the rows marked with it
        package, _, release = version.partition("==")
        manifest = store.manifest(run_id)
        manifest["spec"]["versions"] = {package: [release]}
        store.write_manifest(manifest)
    rewrite_rows(store, run_id, lambda r: r.update(version=version, **row))
    if broken:
        flip_one_ulp(store, run_id, is_alone_target)
    return run_id


def test_known_good_broken_fixed_in_version_order_not_time(store, tmp_path):
    # run in this order (time), each a version: 0.5.13 holds, 0.5.10 holds, 0.5.12 and 0.5.11 break, 0.5.14 holds
    for run, version, broken in (("r1", "0.5.13", False), ("r2", "0.5.10", False), ("r3", "0.5.12", True),
                                 ("r4", "0.5.11", True), ("r5", "0.5.14", False)):
        _versioned(store, run, f"sglang=={version}", broken)
    hist = history(store)
    assert [r.version for r in hist.runs] == ["sglang==0.5.13", "sglang==0.5.10", "sglang==0.5.12",
                                              "sglang==0.5.11", "sglang==0.5.14"]
    assert [r.broken for r in hist.runs] == [[], [], ["batch"], ["batch"], []]
    (story,) = hist.stories
    assert [(t.state, t.run_id) for t in story.turns] == [("known good", "r2"), ("broken", "r4"), ("fixed", "r1")]
    assert str(story) == (f"{story.job} (by version): known good sglang==0.5.10 (run r2) -> broken sglang==0.5.11 "
                          "(run r4; batch broke) -> fixed sglang==0.5.13 (run r1)")
    rr = ["--runs-root", str(tmp_path / "runs")]
    out = CliRunner().invoke(app, ["history", *rr])
    assert out.exit_code == 0 and "known good -> broken -> fixed, per job: 1" in out.output
    assert str(story) in out.output
    doc = json.loads(CliRunner().invoke(app, ["history", *rr, "--format", "json"]).output)
    assert [s["text"] for s in doc["stories"]] == [str(story)]
    assert [t["run_id"] for t in doc["stories"][0]["turns"]] == ["r2", "r4", "r1"]
    assert [r["versions"] for r in doc["runs"]][:2] == [["sglang==0.5.13"], ["sglang==0.5.10"]]


def test_without_versions_the_story_is_in_time_named_by_the_packages_that_changed(store):
    _versioned(store, "a", "", flashinfer="0.6.7.post3")
    _versioned(store, "b", "", True, flashinfer="0.7.2.post1")
    _versioned(store, "c", "", True, flashinfer="0.7.2.post1")
    _versioned(store, "d", "", False, flashinfer="0.7.3")
    _versioned(store, "e", "", True, flashinfer="0.7.4")
    (story,) = history(store).stories
    assert story.by == "time"
    assert [(t.state, t.label, t.run_id) for t in story.turns] == [
        ("known good", "flashinfer 0.6.7.post3", "a"), ("broken", "flashinfer 0.7.2.post1", "b"),
        ("fixed", "flashinfer 0.7.3", "d"), ("broken again", "flashinfer 0.7.4", "e")]


def test_a_job_that_always_held_has_no_story_and_one_version_unknown_orders_by_time(store):
    _versioned(store, "a", "sglang==0.5.12")
    _versioned(store, "b", "sglang==0.5.11")
    assert history(store).stories == []
    _versioned(store, "c", "", True)  # no version: the job's runs are told in time
    (story,) = history(store).stories
    assert story.by == "time" and [(t.state, t.run_id) for t in story.turns] == [("known good", "b"), ("broken", "c")]


def test_runs_of_other_versions_are_listed_with_them_and_never_drift_against_each_other(store, tmp_path):
    for run, version in (("v-a1", "a"), ("v-b1", "b"), ("v-a2", "a")):
        run_inline(store, small(**TINY), run)
        rewrite_rows(store, run, lambda r, version=version: r.update(version=version))
    flip_one_ulp(store, "v-b1", lambda r: r["request"] == "target")  # b differs from a: not a drift
    flip_one_ulp(store, "v-a2", is_alone_target)
    hist = history(store)
    assert [(r.run_id, r.backends, r.versions) for r in hist.runs] == [
        ("v-a1", ["reference"], ["a"]), ("v-b1", ["reference"], ["b"]), ("v-a2", ["reference"], ["a"])]
    (drift,) = hist.drifts  # v-a2 against v-a1 (version a); v-b1 is compared with no run of version a
    assert (drift.run_id, drift.since, drift.version) == ("v-a2", "v-a1", "a")
    assert str(drift).startswith(f"{drift.job} alone/target/eager [{drift.fingerprint}, a]: first differs at run 3")
    out = CliRunner().invoke(app, ["history", "--runs-root", str(tmp_path / "runs")])
    assert out.exit_code == 0 and "reference versions=b" in out.output
