"""--format json on compare, list, status and history: one JSON document on stdout that carries what the text
output shows (the verdict, the exit code, the findings; each run's status; each drift)."""

import json

import pytest
from typer.testing import CliRunner

from detrun.cli import app
from detrun.judge.compare import compare_runs
from detrun.judge.findings import judge
from detrun.present.jsondoc import verdict_doc
from tests.helpers import flip_one_ulp, run_inline, small, terminal_text

TWO = dict(repeats=2, modes=["eager"])


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """A runs root with a reproducible run 'pass', one with a flipped bit 'fail', and a damaged one."""
    from detrun.store.runs import RunStore

    path = tmp_path_factory.mktemp("runs")
    store = RunStore(str(path))
    for run in ("pass", "fail", "torn"):
        run_inline(store, small(**TWO), run)
    flip_one_ulp(store, "fail", lambda r: r["case"] == "alone" and r["repeat"] == 1)
    part = store.row_files("torn")[0]
    data = open(part, "rb").read()
    open(part, "wb").write(data[: len(data) // 2])  # a truncated Parquet file
    return str(path)


def _cli(root, *args):
    out = CliRunner().invoke(app, [*args, "--runs-root", root])
    return out.exit_code, out.stdout, out.stderr


def _json(root, *args):
    code, out, err = _cli(root, *args, "--format", "json")
    return code, json.loads(out), err  # the whole of stdout is one document


def test_a_passing_compare_as_json_carries_the_verdict_the_text_shows(root):
    code, text, _ = _cli(root, "compare", "pass")
    jcode, doc, _ = _json(root, "compare", "pass")
    assert code == jcode == doc["exit_code"] == 0 and doc["verdict"] == "REPRODUCIBLE" and not doc["failed"]
    assert f"verdict: {doc['headline']}" in text and doc["headline"].startswith("REPRODUCIBLE (exit 0); held: repeat")
    assert doc["headline"] == "; ".join(["REPRODUCIBLE (exit 0)", *doc["summary"]])
    assert {c["axis"]: c["status"] for c in doc["claims"]} == {
        "repeat": "held", "gpu": "not compared", "mode": "not compared", "batch": "held", "phase": "not compared",
        "run": "not compared", "backend": "ignored", "version": "not compared"}
    assert not [f for f in doc["findings"] if f["severity"] == "fail"]
    target = doc["table"]["target"]
    assert target["repeat"]["text"] == "equal (6)" and target["repeat"]["rows"] == 6  # 3 cases x 2 repeats
    row = next(ln for ln in text.splitlines() if ln.startswith("│ target "))
    assert all(cell["text"] in row for cell in target.values()) and doc["runs"] == ["pass"]


def test_a_failing_compare_as_json_has_exit_1_and_its_failing_findings(root, tmp_path):
    junit = tmp_path / "junit.xml"
    code, text, _ = _cli(root, "compare", "fail")
    jcode, doc, err = _json(root, "compare", "fail", "--junit", str(junit))
    assert code == jcode == doc["exit_code"] == 1 and doc["verdict"] == "DETERMINISM FAILURE" and doc["failed"]
    failing = [f for f in doc["findings"] if f["severity"] == "fail"]
    assert {(f["kind"], f["axis"]) for f in failing} == {
        ("broken_claim", "repeat"), ("broken_claim", "batch"), ("differs", "repeat"), ("differs", "batch")}
    for f in failing:
        assert f["title"] in text and f["tag"] == "a failure"
    (repeat,) = [f for f in failing if f["kind"] == "differs" and f["axis"] == "repeat"]
    assert repeat["request"] == "target" and "max ULP 1" in "\n".join(repeat["examples"])
    assert doc["table"]["target"]["repeat"]["state"] == "breaks" and doc["max_ulp"]["target"] == 1
    assert junit.exists() and err.strip() == f"JUnit XML written to {junit}"  # stdout stays one document


def test_the_json_of_a_verdict_is_the_verdict_the_presenters_show(root):
    from detrun.store.runs import RunStore

    verdict = judge(compare_runs(RunStore(root), ["fail"]))
    doc = verdict_doc(verdict)
    assert doc["headline"] == verdict.headline and doc["exit_code"] == int(verdict.exit_code) == 1
    assert [f["title"] for f in doc["findings"]] == [f.title for f in verdict.findings]
    text = terminal_text(verdict)
    assert all(f["title"] in text for f in doc["findings"])
    assert json.loads(json.dumps(doc)) == doc  # plain JSON values only


def test_list_as_json_says_what_the_text_says(root):
    code, text, _ = _cli(root, "list")
    jcode, doc, _ = _json(root, "list")
    assert code == jcode == 0
    runs = {r["run_id"]: r for r in doc["runs"]}
    lines = {ln.split()[0]: ln for ln in text.splitlines()}
    assert set(runs) == set(lines) == {"pass", "fail", "torn"}
    assert runs["pass"]["status"] == "complete" and runs["pass"]["damaged"] is None and "complete" in lines["pass"]
    assert runs["torn"]["status"] == "damaged" and lines["torn"] == f"torn  damaged: {runs['torn']['damaged']}"
    assert "corrupt or truncated Parquet" in runs["torn"]["damaged"]


def test_status_as_json_says_what_the_text_says(root):
    code, text, _ = _cli(root, "status", "fail")
    jcode, doc, _ = _json(root, "status", "fail")
    assert code == jcode == 0
    assert (doc["run"], doc["state"], doc["gpus"], doc["missing"], doc["resumable"], doc["job"]) == (
        "fail", "complete", 1, [], False, None)
    assert text.splitlines()[0] == f"run fail: {doc['state']}, gpus={doc['gpus']}, shards missing: 0"
    code, _, err = _cli(root, "status", "nope", "--format", "json")
    assert code == 2 and err.startswith("detrun: error: no run 'nope'")


def test_history_as_json_says_what_the_text_says(root):
    code, text, _ = _cli(root, "history")
    jcode, doc, _ = _json(root, "history")
    assert code == jcode == 0
    verdicts = {r["run_id"]: r["verdict"] for r in doc["runs"]}
    assert verdicts == {"pass": "pass", "fail": "FAIL", "torn": "damaged"}
    (fail,) = [r for r in doc["runs"] if r["run_id"] == "fail"]
    assert fail["counts"] == {"broken_claim": 2, "differs": 2} and fail["differs"] == 2
    line = next(ln for ln in text.splitlines() if " fail " in ln)
    assert "FAIL" in line and "broken_claim=2 differs=2" in line
    assert (fail["backends"], fail["versions"]) == (["reference"], []) and "  reference  FAIL" in line
    (drift,) = doc["drifts"]
    assert drift["run_id"] == "fail" and drift["since"] == "pass" and drift["text"] in text.replace("\n", " ")
