"""columnar.mixed_radix: the code compare indexes its tables of (case, request, mode, phase) and (slot, repeat) by."""

import numpy as np

from detrun.judge.columnar import combine, mixed_radix


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
