"""columnar.mixed_radix: the code compare indexes its tables of (case, request, mode, phase) and (slot, repeat) by,
and groups rows by (compare._groupings)."""

import numpy as np

from detrun.judge.columnar import combine, mixed_radix
from detrun.judge.compare import AXES, _groupings


def test_mixed_radix_is_the_place_in_the_product_of_the_radices():
    rng = np.random.default_rng(0)
    radices = [3, 5, 1, 4]
    parts = [rng.integers(0, r, 200, dtype=np.int32) for r in radices]
    code = mixed_radix(parts, radices)
    assert code.dtype == np.int32
    assert np.array_equal(code, np.ravel_multi_index(parts, radices))


def test_mixed_radix_widens_past_int32_and_groups_like_combine():
    a, b = np.array([0, 1, 1, 0], dtype=np.int32), np.array([7, 7, 3, 7], dtype=np.int32)
    wide = mixed_radix([a, b], [1 << 20, 1 << 12])
    assert wide.dtype == np.int64 and wide.tolist() == [7, (1 << 12) + 7, (1 << 12) + 3, 7]
    _, first = np.unique(wide, return_inverse=True)
    _, again = np.unique(combine([a, b])[0], return_inverse=True)
    assert np.array_equal(first, again)


def _partition(codes):
    """The groups of per-row codes as a set of frozensets of row indices."""
    out = {}
    for i, c in enumerate(codes):
        out.setdefault(c, set()).add(i)
    return {frozenset(g) for g in out.values()}


def test_groupings_drop_the_axis_and_run_id_on_a_cross_run_axis_on_either_path():
    rng = np.random.default_rng(3)
    n = 400
    part = {c: rng.integers(0, 3, n).astype(np.int32) + 5 for c in AXES.values()}
    req = rng.integers(0, 2, n).astype(np.int32)
    for shift in (0, 1 << 62):  # mixed radix; a request code past int64's room: combined per axis instead
        got = dict(_groupings(req + np.int64(shift) if shift else req, part, list(AXES)))
        assert set(got) == set(AXES)
        for axis, col in AXES.items():
            dropped = {col, "run_id"} if axis in ("backend", "version") else {col}
            kept = [req] + [part[c] for c in AXES.values() if c not in dropped]
            want = _partition(zip(*(k.tolist() for k in kept)))
            group, size = got[axis]
            assert _partition(group.tolist()) == want and int(group.max()) < size, (axis, shift)
