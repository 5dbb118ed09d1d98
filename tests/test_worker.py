"""One shard in-process: cells that fail become error rows; the shard still returns every row."""

from detrun.backends.reference import ReferenceBackend
from detrun.matrix import Shard, expected_keys
from detrun.runner import failure_line
from detrun.spec import spec_from_dict
from detrun.worker import run_shard
from tests.helpers import small


def test_a_failing_cell_is_an_error_row_and_the_rest_runs(monkeypatch):
    real = ReferenceBackend.forward

    def flaky(self, batch, mode, repeat=0):
        if batch.case == "mixed":
            raise RuntimeError("boom in plan\nsecond line")
        return real(self, batch, mode, repeat)

    monkeypatch.setattr(ReferenceBackend, "forward", flaky)
    data = small(modes=["eager"], repeats=1)
    out = run_shard(data, Shard(0, (0,)), "w1")
    keys = [r["key"] for r in out["rows"]]
    assert sorted(keys) == sorted(expected_keys(spec_from_dict(data), 1))
    errors = [r for r in out["rows"] if r["status"] == "error"]
    assert {r["case"] for r in errors} == {"mixed"} and len(errors) == 3
    assert errors[0]["reason"] == "RuntimeError: boom in plan"
    assert all(r["out_digest"] for r in out["rows"] if r["status"] == "ok")


def test_failure_line_takes_the_cause():
    exc = RuntimeError("ray::shard_task() (pid=1)\n  File x\nValueError: bad plan")
    assert failure_line(exc) == "ValueError: bad plan"
