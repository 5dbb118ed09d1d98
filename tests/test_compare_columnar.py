"""The columnar compare agrees with a brute-force reference on randomly damaged runs; it reads each Parquet
file a bounded number of times, builds its rows as a plain decode does, and parses each plan once."""

import json
import random
from collections import Counter, defaultdict

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from detrun.judge import columnar
from detrun.judge.columnar import read_columns
from detrun.judge.compare import AXES, compare_runs
from detrun.judge.explain import ENV_FIELDS, PLAN_COLUMNS, plan_fields
from detrun.judge.history import history
from detrun.spec.matrix import expected_keys
from detrun.spec.model import spec_from_dict
from detrun.store.runs import RunStore
from tests.helpers import rewrite_rows, run_inline, small

CROSS = {"backend": ("backend", "run_id"), "version": ("version", "run_id")}  # cross-run axes: columns dropped
SILENT = {"backend": PLAN_COLUMNS + ("plan",), "version": ("torch", "flashinfer", "sglang")}  # explain nothing


def _explains(a, b, axis):
    return any(a[c] != b[c] for c in PLAN_COLUMNS + ("plan",) + ENV_FIELDS if c not in SILENT.get(axis, ()))


def _one_run_each(group, runs):
    """Along a cross-run axis: per value, the rows of the first run (in runs' order) that has it."""
    first = {}
    for r in sorted(group, key=lambda r: runs.index(r["run_id"])):
        first.setdefault(r["axis"], r["run_id"])
    return [r for r in group if first[r["axis"]] == r["run_id"]]


def reference(store, runs):
    """Per (request, axis): (status, groups, rows, differing, explained); missing; duplicates."""
    rows = store.read_rows(runs).to_pylist()
    for r in rows:
        r["version"] = r["version"] or ""
    seen = Counter((r["run_id"], r["key"]) for r in rows)
    missing, dups = [], []
    for run in runs:
        m = store.manifest(run)
        for key in expected_keys(spec_from_dict(m["spec"]), m["gpus"]):
            n = seen[(run, key)]
            missing += [f"{run}:{key}"] if n == 0 else []
            dups += [f"{run}:{key} x{n}"] if n > 1 else []
    ok = [r for r in rows if r["status"] == "ok"]
    sig = lambda r: tuple(r[c] for c in PLAN_COLUMNS + ("plan",) + ENV_FIELDS)  # noqa: E731
    order = lambda r: (runs.index(r["run_id"]), r["slot"], r["case"], r["phase"] != "prefill", r["mode"],  # noqa: E731
                       r["repeat"])
    out = {}
    for request in {r["request"] for r in ok}:
        for axis, col in AXES.items():
            pre = "last_" if axis == "phase" else ""  # phase: prefill's last token vs decode's
            ident = lambda r, pre=pre: (r[f"{pre}out_digest"], r[f"{pre}lse_digest"])  # noqa: E731
            dropped = CROSS.get(axis, (col,))
            groups = defaultdict(list)
            for r in ok:
                if r["request"] == request:
                    groups[tuple(r[c] for c in AXES.values() if c not in dropped)].append(dict(r, axis=r[col]))
            stats = [0, 0, 0, 0]
            for g in groups.values():
                g = sorted(_one_run_each(g, runs) if axis in CROSS else g, key=order)
                if len({r[col] for r in g}) < 2:
                    continue
                firsts = list({sig(r): r for r in reversed(g)}.values())[::-1]  # first of each plan, in order
                bad = any(sig(a) == sig(b) and ident(a) != ident(b) for a in g for b in g) or any(
                    ident(r) != ident(firsts[0]) and not _explains(r, firsts[0], axis) for r in firsts[1:])
                fine = any(ident(a) != ident(b) for a in firsts for b in firsts)
                stats = [stats[0] + 1, stats[1] + len(g), stats[2] + bad, stats[3] + (fine and not bad)]
            status = "n/a" if not stats[0] else "differs" if stats[2] else "explained" if stats[3] else "equal"
            out[(request, axis)] = (status, *stats)
    return out, missing, dups


def damage(store, run_id, rng):
    for path in store.row_files(run_id):
        rows = pq.read_table(path).to_pylist()
        for r in rows:
            x = rng.random()
            if x < 0.08:
                r["out_digest"] = f"{rng.randrange(3):032x}"
            elif x < 0.11:
                r["last_out_digest"] = f"{rng.randrange(3):032x}"
            elif x < 0.14:
                r["plan"] = '{"kv_chunk_size": %d}' % rng.randrange(2)
            elif x < 0.17:
                r["lse_digest"], r["torch"] = "e" * 32, "other"
        keep = [r for r in rows if rng.random() > 0.05] + [r for r in rows if rng.random() < 0.03]
        store.write_rows(run_id, path.rsplit("part-", 1)[1].removesuffix(".parquet"), keep)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_columnar_compare_matches_brute_force(store, seed):
    rng = random.Random(seed)
    phases = ["prefill", "decode"] if seed > 1 else ["prefill"]
    run_inline(store, small(modes=["eager"], phases=phases, repeats=3), "a", gpus=2)
    run_inline(store, small(modes=["eager"], phases=phases, repeats=3), "b", gpus=2)
    damage(store, "b", rng)
    cmp = compare_runs(store, ["a", "b"], max_details=1000)
    want, missing, dups = reference(store, ["a", "b"])
    got = {(v.request, v.axis): (v.status, v.groups, v.rows, v.differing_groups, v.explained_groups)
           for v in cmp.verdicts}
    assert got == want and any(v[0] == "differs" for v in want.values())
    assert any(v[0] != "n/a" for (_, axis), v in want.items() if axis == "phase") == (seed > 1)
    assert cmp.missing == missing and cmp.duplicates == dups and missing and dups
    assert all(m.label == "unexplained" for m in cmp.mismatches if m.why[0].startswith("unexplained"))
    # history judges each run on its own: a is clean, b differs where the brute force finds b alone differ
    # (one finding per request and axis, a request's copies name#i counted once, as name#*)
    b_alone = reference(store, ["b"])[0]
    alone = {(req.partition("#")[0], axis) for (req, axis), v in b_alone.items() if v[0] == "differs"}
    assert [r.differs for r in history(store).runs] == [0, len(alone)] and alone


@pytest.mark.parametrize("seed", [4, 5])
def test_cross_run_axes_match_brute_force(store, seed):
    """Four runs: a, b (same backend and version), c on another backend, d in another version; each damaged."""
    rng = random.Random(seed)
    job = small(modes=["eager"], repeats=2)
    for run, change in (("a", {}), ("b", {}), ("c", {"backend": "flashinfer"}), ("d", {"version": "v2"})):
        run_inline(store, job, run, gpus=2)
        rewrite_rows(store, run, lambda r, change=change: r.update(change))
        if run != "a":
            damage(store, run, rng)
    runs = ["a", "b", "c", "d"]
    cmp = compare_runs(store, runs, max_details=1000)
    want, missing, dups = reference(store, runs)
    got = {(v.request, v.axis): (v.status, v.groups, v.rows, v.differing_groups, v.explained_groups)
           for v in cmp.verdicts}
    assert got == want
    for axis in ("run", "backend", "version"):  # each met, some requests equal and some differing
        assert {v[0] for (_, a), v in want.items() if a == axis} >= {"differs", "equal"}, axis


@pytest.fixture(scope="module")
def explained(tmp_path_factory):
    """A run of 2 GPU slots x 3 repeats whose every repeat and slot ran another plan with another output:
    explained along repeat and gpu, with many example rows to read whole (their output shape)."""
    store = RunStore(str(tmp_path_factory.mktemp("explained") / "runs"))
    run_inline(store, small(repeats=3, repeats_per_task=2), "a", gpus=2)

    def change(r):
        r["plan"] = json.dumps({"kv_chunk_size": 16 << r["repeat"], "split_kv": bool(r["slot"])})
        r["out_digest"] = f"{r['repeat']}{r['slot']}{r['out_digest'][2:]}"

    rewrite_rows(store, "a", change)
    return store


def test_a_compare_reads_each_file_at_most_twice(explained, monkeypatch):
    """Once for the columns compare groups on, once for the rows it explains: not once per row explained."""
    reads = Counter()
    real = columnar.read_part

    def counted(fs, path, **kwargs):
        reads[path] += 1
        return real(fs, path, **kwargs)

    monkeypatch.setattr(columnar, "read_part", counted)
    cmp = compare_runs(explained, ["a"], max_details=1000)
    shown = {name for m in cmp.mismatches if m.explained for name in (m.a, m.b)}
    files = explained.row_files("a")
    assert len(shown) > 4 * len(files) and {m.axis for m in cmp.mismatches} >= {"repeat", "gpu"}
    assert set(reads) == set(files) and max(reads.values()) <= 2, reads


def test_rows_in_memory_are_the_rows_decoded_plainly(explained):
    cols = read_columns(explained, ["a"])
    idx = np.random.default_rng(0).choice(cols.n, size=cols.n // 2, replace=False)
    rows = cols.rows_in_memory(idx)
    plain = cols.table.take(pa.array(np.sort(idx))).to_pylist()  # every dictionary value decoded by Arrow
    assert [dict(rows[i]) for i in sorted(rows)] == plain and sorted(rows) == sorted(idx.tolist())
    assert all(list(rows[i]) == cols.table.column_names for i in rows)
    detail = cols.rows_at(idx[:5])
    assert all(rows[i]["out_shape"] == detail[i]["out_shape"] for i in idx[:5].tolist())  # read on first use


def test_plan_fields_are_parsed_once_and_read_only():
    one, same, spaced = plan_fields('{"a": 1, "b": [2]}'), plan_fields('{"a": 1, "b": [2]}'), plan_fields(
        '{ "b": [2],  "a": 1 }')
    assert one is same and one == spaced == {"a": 1, "b": [2]} and plan_fields("") == {}
    with pytest.raises(TypeError):
        one["a"] = 2
    with pytest.raises(AttributeError):
        one.pop("a")
    assert plan_fields('{"a": 1, "b": [2]}') == {"a": 1, "b": [2]}


def test_a_compare_without_room_for_kept_files_is_the_same(explained, monkeypatch):
    """Past DETAIL_BYTES the kept files are let go and read again: slower, never another result."""
    kept = compare_runs(explained, ["a"], max_details=1000)
    monkeypatch.setattr(columnar, "DETAIL_BYTES", 0)
    assert compare_runs(explained, ["a"], max_details=1000) == kept


def test_pair_words_are_the_plain_answers_for_rows_of_the_same_signatures():
    """The compare works out explain, label and cause once per pair of signatures (plan columns, plan,
    environment): rows that differ elsewhere (case, key, digests) get what the plain functions give them."""
    from detrun.judge.explain import PairWords, cause, explain, label
    from detrun.record.rows import make_row

    def row(key, plan, **more):
        return make_row(run_id="r", key=key, case=key, backend="flashinfer", attn="fa2", path="paged",
                        plan=json.dumps(plan), gpu_name="H200", flags="{}", out_digest=key, **more)

    a, b = row("a", {"kv_chunk_size": 128}), row("b", {"kv_chunk_size": 256})
    twins = [row("c", {"kv_chunk_size": 128}), row("d", {"kv_chunk_size": 256}, sm_count=0)]
    other_env = row("e", {"kv_chunk_size": 128}, torch="2.11")  # another signature: worked out anew
    words = PairWords()
    for x, y in [(a, b), *zip(twins, [b, a]), (other_env, b), (a, other_env)]:
        for axis in ("batch", "version", "backend", "phase"):
            assert words.label(x, y, axis) == label(x, y, axis)
            assert words.cause(x, y, axis) == cause(x, y, axis)
        assert words.explain(x, y) == explain(x, y)
    assert "torch: 2.11 vs " in " ".join(words.explain(other_env, b))
