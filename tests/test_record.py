"""record/: the row's columns are declared once (Row), and the stored schema is read from that declaration;
a manifest takes only its own fields."""

import json

import pyarrow as pa
import pytest

from detrun.errors import DetrunError
from detrun.record.manifest import REQUIRED, Manifest
from detrun.record.rows import SCHEMA, Row, make_row, rows_table
from detrun.record.status import Status


def test_the_schema_is_the_rows_declaration_in_order_with_its_arrow_types():
    assert SCHEMA.names == list(Row.__annotations__)
    types = {name: SCHEMA.field(name).type for name in ("repeat", "slot", "sm_count", "attempt", "pid", "plan_ms",
                                                          "use_paged", "out_shape", "kernels", "last_out_digest")}
    assert types == {"repeat": pa.int32(), "slot": pa.int32(), "sm_count": pa.int32(), "attempt": pa.int32(),
                     "pid": pa.int64(), "plan_ms": pa.float64(), "use_paged": pa.bool_(),
                     "out_shape": pa.list_(pa.int64()), "kernels": pa.list_(pa.string()),
                     "last_out_digest": pa.string()}
    row = make_row(run_id="r", key="k", repeat=2)
    assert list(row) == SCHEMA.names and row["repeat"] == 2 and row["kernels"] == [] and row["phase"] == "prefill"
    row["kernels"].append("k")  # each row has lists of its own: a default is never shared
    assert make_row()["kernels"] == [] and make_row(kernels=["a"])["kernels"] == ["a"]
    given = make_row(key="k", ref_error="{}", last_out_digest="d")  # given fields kept, the order still SCHEMA's
    assert list(given) == SCHEMA.names and (given["ref_error"], given["last_out_digest"]) == ("{}", "d")
    with pytest.raises(KeyError, match="not in the row schema: \\['nosuch'\\]"):
        make_row(nosuch=1)


def test_a_shards_rows_become_the_table_make_rows_rows_make():
    rows = [
        {"run_id": "r", "key": "a", "repeat": 1, "kernels": ["k1"], "status": Status.OK},
        {"run_id": "r", "key": "b", "status": "error", "reason": "boom", "out_shape": [2, 3], "plan_ms": 0.5},
        {"run_id": "r", "key": "c", "last_out_digest": None, "status": Status.KNOWN_BUG, "kernels": None},
        {"key": "d"},  # status unset: ok
    ]
    table = rows_table(rows)
    assert table.equals(pa.Table.from_pylist([make_row(**r) for r in rows], schema=SCHEMA))
    assert table.column("status").to_pylist() == ["ok", "error", "known_bug", "ok"]
    assert table.column("kernels").to_pylist() == [["k1"], [], None, []]
    assert rows_table([]).num_rows == 0 and rows_table([]).schema == SCHEMA
    with pytest.raises(KeyError, match="not in the row schema: \\['nosuch'\\]"):
        rows_table([{"key": "a"}, {"key": "b", "nosuch": 1}])
    for bad in ("", None, "broken"):
        with pytest.raises(ValueError, match="status must be one of"):
            rows_table([{"key": "a", "status": bad}])


def test_a_manifest_holds_its_required_fields_and_takes_only_its_own(store):
    assert set(REQUIRED) <= set(Manifest.__annotations__) and REQUIRED["gpus"] is int and REQUIRED["spec"] is dict
    store.create_run("r", {"name": "x"}, 1, accelerator_type="H200")
    before = store.base + "/r/manifest.json"
    with pytest.raises(KeyError, match="not a manifest field: \\['nosuch'\\]"):
        store.finish_run("r", "complete", nosuch=1)
    manifest = json.loads(open(before).read())
    assert manifest["status"] == "running" and manifest["accelerator_type"] == "H200"  # nothing written
    with open(before, "w") as f:
        json.dump(dict(manifest, gpus="1"), f)
    with pytest.raises(DetrunError, match="manifest field 'gpus' must be a int, got a str"):
        store.manifest("r")
