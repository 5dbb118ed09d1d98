"""An s3:// runs root on a local S3 server (moto, tests/s3server.py): submit and resume through the CLI,
the endpoint in the URI or in AWS_ENDPOINT_URL, and wrong credentials or a missing bucket in one line."""

import logging
import re

import pytest
import yaml
from typer.testing import CliRunner

from detrun.cli import app
from detrun.errors import DetrunError
from detrun.store.runs import RunStore
from tests.helpers import TINY, cli_main, one_line, run_inline, small


def _bucket(root: str) -> str:
    return root.split("/")[2]


def _in_place(keys):
    """Every object was uploaded once where it lies: no folder markers (create_dir) and no temporary
    objects (a rename is a copy and a delete on S3; pyarrow's delete leaves a folder marker too)."""
    return keys and not [k for k in keys if k.endswith("/") or ".tmp-" in k]


def test_the_endpoint_in_the_uri_or_the_environment(s3, monkeypatch):
    bucket = s3.bucket()
    store = RunStore(s3.uri(bucket))
    assert store.object_store and store.base == f"{bucket}/runs"
    run_inline(store, small(**TINY), "r1")
    keys = s3.keys(bucket)
    assert "runs/r1/manifest.json" in keys and "runs/r1/rows/part-g0-r0-0.parquet" in keys and _in_place(keys)
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)  # the AWS SDKs' variable: a plain s3:// root
    plain = RunStore(f"s3://{bucket}/runs")
    assert plain.list_runs() == ["r1"] and plain.manifest("r1")["status"] == "complete"


def test_each_object_is_one_put(s3, s3_root, caplog):
    store = RunStore(s3_root)
    caplog.set_level(logging.INFO, logger="werkzeug")  # moto's server logs each request it serves
    store.write_json("r1/manifest.json", {"run_id": "r1"})
    store.write_blobs({"ab" * 16: b"x" * (1 << 20)})
    store.write_blobs({"ab" * 16: b"x" * (1 << 20)})  # there already: not written again
    bucket = _bucket(s3_root)
    writes = [m.group(1, 2) for r in caplog.records
              if (m := re.search(r'"(PUT|POST|DELETE) (\S+) HTTP', r.getMessage()))]
    assert writes == [("PUT", f"/{bucket}/runs/r1/manifest.json"), ("PUT", f"/{bucket}/runs/blobs/ab/{'ab' * 16}.bin")]


@pytest.mark.slow
def test_submit_compare_and_resume_on_s3(ray_2gpu, s3, s3_root, tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(small(**TINY)))
    cli, rr = CliRunner(), ["--runs-root", s3_root]
    out = cli.invoke(app, ["submit", str(job), "--gpus", "2", "--run-id", "r1", *rr])
    assert out.exit_code == 0 and "REPRODUCIBLE" in out.output, out.output
    assert f"stored under s3://{_bucket(s3_root)}/runs/r1?endpoint_override=" in out.output
    keys = s3.keys(_bucket(s3_root))
    parts = [k for k in keys if "/rows/" in k]
    assert parts == ["runs/r1/rows/part-g0-r0-0.parquet", "runs/r1/rows/part-g1-r0-0.parquet"]
    assert _in_place(keys)
    assert cli.invoke(app, ["compare", "r1", *rr]).exit_code == 0

    s3.delete(_bucket(s3_root), parts[1])
    status = cli.invoke(app, ["status", "r1", *rr])
    assert "shards missing: 1 (g1-r0-0)" in status.output
    assert cli.invoke(app, ["compare", "r1", *rr]).exit_code == 1  # a missing cell
    resumed = cli.invoke(app, ["submit", "--resume", "r1", *rr])
    assert resumed.exit_code == 0 and "resumed: 1 shard(s) run" in resumed.output, resumed.output
    keys = s3.keys(_bucket(s3_root))
    assert [k for k in keys if "/rows/" in k] == parts and _in_place(keys)
    blobs = {k.rsplit("/", 1)[1][:-len(".bin")] for k in keys if k.startswith("runs/blobs/")}
    assert blobs == RunStore(s3_root).blob_refs("r1")  # one per digest the run names, shared by its shards
    assert RunStore(s3_root).manifest("r1")["status"] == "complete"
    assert "shards missing: 0" in cli.invoke(app, ["status", "r1", *rr]).output


def test_a_missing_bucket_is_one_line(s3, capsys):
    root = s3.uri("no-such-bucket")
    code, out, err = cli_main(capsys, "list", "--runs-root", root)
    assert code == 2 and out == ""
    assert one_line(err) == f"detrun: error: runs root {root}: bucket 'no-such-bucket' does not exist"
    code, _, err = cli_main(capsys, "compare", "r1", "--runs-root", root)
    assert code == 2 and "bucket 'no-such-bucket' does not exist" in one_line(err)
    assert cli_main(capsys, "list", "--runs-root", s3.uri(s3.bucket()))[0] == 0  # an empty bucket is no error


def test_a_uri_pyarrow_cannot_read_is_one_line(capsys):
    code, _, err = cli_main(capsys, "list", "--runs-root", "foo://x/runs")
    assert code == 2
    assert one_line(err) == "detrun: error: runs root foo://x/runs: Unrecognized filesystem type in URI: foo://x/runs"


def test_submit_to_a_missing_bucket_fails_before_ray(s3, capsys, monkeypatch, tmp_path):
    monkeypatch.setattr("detrun.run.runner.connect", lambda *a, **k: pytest.fail("Ray was started"))
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(small(**TINY)))
    code, _, err = cli_main(capsys, "submit", str(job), "--runs-root", s3.uri("no-such-bucket"))
    assert code == 2 and "bucket 'no-such-bucket' does not exist" in one_line(err)


def test_wrong_credentials_are_one_line_naming_the_root(s3, s3_root, capsys, monkeypatch):
    store = RunStore(s3_root)
    run_inline(store, small(**TINY), "r1")
    assert cli_main(capsys, "compare", "r1", "--runs-root", s3_root)[0] == 0
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAWRONGWRONGWRONG1")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    with s3.auth():
        for command in (["compare", "r1"], ["list"], ["history"], ["baseline", "set", "r1"]):
            code, out, err = cli_main(capsys, *command, "--runs-root", s3_root)
            line = one_line(err)
            assert code == 2 and out == "", command
            assert line.startswith(f"detrun: error: runs root {s3_root}: ") and "AWS Error ACCESS_DENIED" in line
            assert line.endswith("check the credentials (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE)")
            assert "Request ID" not in line
        # a store opened before the credentials went wrong: each method says the same
        denied = r"^runs root s3://.*: When getting information .* AWS Error ACCESS_DENIED"
        with pytest.raises(DetrunError, match=denied):
            store.list_runs()
        with pytest.raises(DetrunError, match=r"^runs root .*AWS Error"):
            store.write_json("r2/manifest.json", {})
    assert "r2" not in store.list_runs()
