"""The cross-run axes: `backend` (two runs of one job on different backends) and `version` (one run per `versions:`
environment). Their rows meet only there, never on `run`; of each backend (version) one run's rows are compared;
along backend the backend itself explains nothing, along version a package version alone explains nothing."""

import gc
import json

import pyarrow.parquet as pq

from detrun.judge.columnar import DETAIL, _read, read_columns
from detrun.judge.compare import compare_runs
from detrun.judge.findings import judge
from detrun.present.jsondoc import verdict_doc
from detrun.present.junit import junit_xml
from detrun.present.report import build_report
from detrun.record.fingerprint import fingerprint_of
from tests.helpers import cli_main, flip_one_ulp, rewrite_rows, run_inline, small, terminal_text

JOB = dict(modes=["eager"], repeats=1)


def _set(**fields):
    """A rewrite_rows change: these fields on every row, its fingerprint recomputed."""
    def change(r):
        r.update(fields)
        r["fingerprint"] = fingerprint_of(r)
    return change


def _runs(store, *named):
    """(run, {field: value}) pairs: one small run each, its rows rewritten with the fields."""
    for run, fields in named:
        run_inline(store, small(**JOB), run)
        rewrite_rows(store, run, _set(**fields))


def _flip_target(store, run):
    """One ULP flipped in every row of request target (so the run still agrees with itself along batch)."""
    keys = [r["key"] for r in store.read_rows([run]).to_pylist() if r["request"] == "target"]
    for key in keys:
        flip_one_ulp(store, run, lambda r, key=key: r["key"] == key)
    assert len(keys) == 3  # cases alone, mixed, mixed_decode


def _groups(cmp, axis):
    return sum(v.groups for v in cmp.verdicts if v.axis == axis)


def test_two_backends_meet_on_backend_not_on_run_and_a_flip_breaks_only_a_backend_claim(store, capsys):
    _runs(store, ("fi", {"backend": "flashinfer"}), ("ref", {}))
    _flip_target(store, "ref")
    cmp = compare_runs(store, ["fi", "ref"])
    verdict = judge(cmp)
    # default backend: ignore: the difference is shown, never counted
    assert verdict.exit_code == 0 and verdict.level("backend") == "ignore"
    assert _groups(cmp, "run") == 0 and not [m for m in cmp.mismatches if m.axis == "run"]
    found = [m for m in cmp.mismatches if m.axis == "backend"]
    assert len(found) == 3 and {m.request for m in found} == {"target"}  # one group per case
    assert {(m.out.max_ulp, m.label) for m in found} == {(1, "unexplained: backend explains nothing across backend")}
    [shown] = [f for f in verdict.findings if f.axis == "backend" and f.request == "target"]
    assert shown.severity == "info" and shown.title.endswith("[backend claimed ignore]")
    claim = next(c for c in verdict.claims if c.axis == "backend")
    assert (claim.status, claim.differing) == ("ignored", ("target",))
    # claimed bitwise (or explained: the backend's name, path and plan explain nothing along backend) it breaks
    for level in ("bitwise", "explained"):
        broken = judge(compare_runs(store, ["fi", "ref"], expect={"backend": level}))
        assert broken.exit_code == 1 and [f.axis for f in broken.of("broken_claim")] == ["backend"]
    code, out, _ = cli_main(capsys, "compare", "fi", "ref", "--runs-root", store.root, "--expect", "backend=bitwise")
    assert code == 1 and "backend claimed bitwise, 1 request (target) differs" in out
    # a run claim between two backends checks nothing: their rows never meet on run
    [unchecked] = judge(compare_runs(store, ["fi", "ref"], expect={"run": "bitwise"})).of("unverified_claim")
    assert unchecked.title.endswith("no request has two rows that differ only in run (the runs differ in backend: "
                                    "compared along it)")


def test_equal_backends_hold_a_bitwise_claim_and_an_environment_difference_explains(store):
    _runs(store, ("fi", {"backend": "flashinfer"}), ("ref", {}))
    held = judge(compare_runs(store, ["fi", "ref"], expect={"backend": "bitwise"}))
    claim = next(c for c in held.claims if c.axis == "backend")
    assert held.exit_code == 0 and claim.status == "held" and claim.groups == 11  # one per request and case
    rewrite_rows(store, "ref", _set(torch="2.99.0"))
    _flip_target(store, "ref")
    cmp = compare_runs(store, ["fi", "ref"], expect={"backend": "explained"})
    assert judge(cmp).exit_code == 0
    assert {m.label for m in cmp.mismatches if m.axis == "backend"} == {"explained by environment: torch"}


def test_same_backend_rows_of_two_runs_meet_on_run_and_once_on_backend(store):
    _runs(store, ("fi1", {"backend": "flashinfer"}), ("fi2", {"backend": "flashinfer"}), ("ref", {}))
    both = compare_runs(store, ["fi1", "fi2", "ref"], expect={"backend": "bitwise"})
    alone = compare_runs(store, ["fi1", "ref"], expect={"backend": "bitwise"})
    rows = {v.request: v.rows for v in both.verdicts if v.axis == "backend"}
    assert rows == {v.request: v.rows for v in alone.verdicts if v.axis == "backend"} and rows["target"] == 6
    assert _groups(both, "run") == 11 and _groups(alone, "run") == 0  # fi1 vs fi2 on run; ref meets no run
    # fi2's rows are not the ones compared along backend: a flip there is a run difference only
    _flip_target(store, "fi2")
    cmp = compare_runs(store, ["fi1", "fi2", "ref"], expect={"backend": "bitwise"})
    assert {m.axis for m in cmp.mismatches} == {"run"}
    assert [f.axis for f in judge(cmp).of("broken_claim")] == ["run"]


def test_a_backend_claim_on_one_backend_is_not_verified(store, capsys):
    run_inline(store, small(**JOB), "ref")
    verdict = judge(compare_runs(store, ["ref"], expect={"backend": "bitwise"}))
    [unchecked] = verdict.of("unverified_claim")
    assert verdict.label == "NOT VERIFIED" and verdict.exit_code == 1
    assert unchecked.title == ("backend claimed bitwise, but nothing was compared along backend: all rows have one "
                               "backend: reference")
    default = judge(compare_runs(store, ["ref"]))
    assert default.exit_code == 0 and not default.of("unverified_claim")
    # the terminal table leaves out a cross-run axis nothing met along; the claims line still names it
    text = terminal_text(default)
    assert "backend ignore ignored" in text and "┃ backend" not in text and "┃ version" not in text


def test_a_package_version_alone_explains_nothing_along_version(store, capsys):
    _runs(store, ("a", {"version": "a", "flashinfer": "0.6.7.post3"}),
          ("b", {"version": "b", "flashinfer": "0.7.2.post1"}))
    equal = judge(compare_runs(store, ["a", "b"]))
    claim = next(c for c in equal.claims if c.axis == "version")
    assert equal.exit_code == 0 and (claim.level, claim.status, claim.groups) == ("explained", "held", 11)
    assert _groups(compare_runs(store, ["a", "b"]), "run") == 0
    _flip_target(store, "b")
    cmp = compare_runs(store, ["a", "b"])
    verdict = judge(cmp)
    assert verdict.exit_code == 1 and [f.axis for f in verdict.of("broken_claim")] == ["version"]
    found = [m for m in cmp.mismatches if m.axis == "version"]
    assert {(m.label, m.out.max_ulp) for m in found} == {("unexplained: flashinfer explains nothing across version", 1)}
    assert all("flashinfer: 0.6.7.post3 vs 0.7.2.post1" in m.why for m in found) and len(found) == 3
    assert judge(compare_runs(store, ["a", "b"], expect={"version": "ignore"})).exit_code == 0
    code, out, _ = cli_main(capsys, "compare", "a", "b", "--runs-root", store.root)
    assert code == 1 and "version claimed explained, 1 request (target) differs" in out


def _tile(r):
    if r["request"] == "target":
        r["plan"] = json.dumps(dict(json.loads(r["plan"] or "{}"), cta_tile_q=64))


def test_a_plan_field_that_changed_with_the_version_explains(store):
    _runs(store, ("a", {"version": "a", "flashinfer": "0.6.7.post3"}),
          ("b", {"version": "b", "flashinfer": "0.7.2.post1"}))
    rewrite_rows(store, "b", _tile)
    _flip_target(store, "b")
    cmp = compare_runs(store, ["a", "b"])
    verdict = judge(cmp)
    claim = next(c for c in verdict.claims if c.axis == "version")
    assert verdict.exit_code == 0 and (claim.status, claim.explained) == ("held", ("target",))
    assert claim.causes == {"cta_tile_q": "None vs 64"}
    assert {m.label for m in cmp.mismatches if m.axis == "version"} == {"explained by plan: cta_tile_q"}
    assert judge(compare_runs(store, ["a", "b"], expect={"version": "bitwise"})).exit_code == 1


def test_runs_of_one_version_meet_on_run_and_runs_of_two_on_version(store):
    _runs(store, ("a1", {"version": "a"}), ("a2", {"version": "a"}), ("b1", {"version": "b"}))
    _flip_target(store, "a2")
    cmp = compare_runs(store, ["a1", "a2", "b1"], expect={"run": "bitwise", "version": "bitwise"})
    verdict = judge(cmp)
    assert verdict.exit_code == 1 and [f.axis for f in verdict.of("broken_claim")] == ["run"]
    found = {(m.a.split(":")[0], m.b.split(":")[0], m.out.max_ulp) for m in cmp.mismatches if m.axis == "run"}
    assert found == {("a1", "a2", 1)}
    assert _groups(cmp, "version") == 11 and not [m for m in cmp.mismatches if m.axis == "version"]


def test_every_presenter_shows_the_cross_run_axes(store):
    _runs(store, ("fi", {"backend": "flashinfer"}), ("ref", {}))
    _flip_target(store, "ref")
    verdict = judge(compare_runs(store, ["fi", "ref"], expect={"backend": "bitwise"}))
    row = next(line for line in terminal_text(verdict).splitlines() if line.startswith("│ target "))
    assert "breaks bitwise 3/3" in row
    doc = verdict_doc(verdict)
    assert doc["table"]["target"]["backend"]["text"] == "breaks bitwise 3/3"
    assert {c["axis"]: c["status"] for c in doc["claims"]}["backend"] == "broken"
    xml = junit_xml(verdict)
    assert 'classname="detrun.backend" name="target"' in xml and 'name="backend bitwise"' in xml
    assert 'classname="detrun.version"' in xml
    html = build_report(verdict)
    assert "target / backend: breaks bitwise 3/3" in html and "target / version: n/a (0 groups" in html


def test_rows_stored_before_the_version_column_have_none_and_meet_new_rows_on_run(store):
    _runs(store, ("old", {}), ("new", {}))
    for path in store.row_files("old"):
        pq.write_table(pq.read_table(path).drop_columns(["version"]), path)
    assert read_columns(store, ["old"]).dictionary("version") == [""]
    cmp = compare_runs(store, ["old", "new"], expect={"run": "bitwise"})
    assert judge(cmp).exit_code == 0 and _groups(cmp, "run") == 11 and _groups(cmp, "version") == 0
    # reading an old file leaves no reference cycle behind (it held the file's table until a collection)
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        _read(store, store.row_files("old")[0], DETAIL)
        assert gc.collect() == 0
    finally:
        if enabled:
            gc.enable()
