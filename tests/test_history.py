"""History per job: a case is compared only with earlier runs of the same job, and the first run where it
differs is named; damaged runs are listed and the rest still shown."""

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
