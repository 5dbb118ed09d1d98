"""record/status.py: the members are the stored strings; a row's status reads back equal to its member."""

import json
import pickle

import pytest

from detrun.record.rows import STATUSES, make_row
from detrun.record.status import RunStatus, Status
from detrun.store.rows import read_part
from detrun.store.runs import RunStore


def test_statuses_are_their_strings_everywhere(tmp_path):
    assert STATUSES == ("ok", "skipped", "known_bug", "error")
    assert f"{Status.KNOWN_BUG}" == str(Status.KNOWN_BUG) == "known_bug" == Status.KNOWN_BUG
    assert json.dumps({"status": RunStatus.COMPLETE}) == '{"status": "complete"}'
    assert pickle.loads(pickle.dumps(Status.ERROR)) is Status.ERROR
    assert make_row()["status"] == Status.OK
    with pytest.raises(ValueError, match=r"one of \('ok', 'skipped', 'known_bug', 'error'\)"):
        make_row(status="fine")
    store = RunStore(str(tmp_path))
    store.write_rows("r", "0", [make_row(run_id="r", key="k", status=Status.SKIPPED)])
    table = read_part(store.fs, store.row_files("r")[0], columns=["status"])
    assert table.column("status").to_pylist() == ["skipped"]

