"""diff_stats: max ULP is counted on one side of zero; values straddling zero are counted apart."""

import math

import numpy as np
import pytest
import torch

from detrun.judge.diffstats import diff_stats

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
_INT = {2: torch.int16, 4: torch.int32}


def raw(values, dtype: str) -> bytes:
    t = torch.tensor(values, dtype=DTYPES[dtype])
    return t.view(_INT[t.element_size()]).numpy().tobytes()


def bumped(values, dtype: str, ulps: dict) -> bytes:
    """The values' bytes with element i's bit pattern moved by ulps[i] (away from zero when positive)."""
    t = torch.tensor(values, dtype=DTYPES[dtype])
    bits = t.view(_INT[t.element_size()]).clone()
    for i, n in ulps.items():
        bits[i] += n
    return bits.numpy().tobytes()


def value(values, dtype: str, i: int) -> float:
    return float(torch.tensor(values, dtype=DTYPES[dtype])[i])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("x", [1.5, -1.5])
def test_one_ulp_on_either_side_of_zero(dtype, x):
    values = [0.25, x, 3.0]
    s = diff_stats(raw(values, dtype), bumped(values, dtype, {1: 1}), dtype, (3,))
    assert (s.count, s.max_ulp, s.straddle, s.straddle_max_abs, s.first_index) == (1, 1, 0, 0.0, (1,))
    assert str(s) == f"1/3 differ, max abs {s.max_abs:.3g}, max ULP 1, first at [1]"


@pytest.mark.parametrize("dtype", DTYPES)
def test_tiny_values_of_opposite_signs_straddle_zero(dtype):
    a, b = raw([1e-4], dtype), raw([-1e-4], dtype)
    s = diff_stats(a, b, dtype, (1,))
    assert (s.count, s.max_ulp, s.straddle) == (1, 0, 1)
    assert s.straddle_max_abs == s.max_abs == pytest.approx(2 * value([1e-4], dtype, 0))
    width = 8 * len(a)  # the old distance, across zero, counted every float between them
    assert 2 * (int.from_bytes(a, "little") & ((1 << (width - 1)) - 1)) > 1000
    assert str(s) == f"1/1 differ, max abs {s.max_abs:.3g}, max ULP - (all straddle zero), first at [0]; " \
                     f"1 straddle zero (max abs {s.max_abs:.3g})"


def test_a_mix_reports_same_side_ulp_and_straddles_apart():
    dtype = "bfloat16"
    a = [1.0, 1e-4, 2.0, 3.0, -5e-3]
    b = raw([1.0 + 2 ** -7, -1e-4, 2.0 + 3 * 2 ** -6, 3.0, 7e-3], dtype)  # +1 ULP, straddle, +3 ULP, =, straddle
    s = diff_stats(raw(a, dtype), b, dtype, (5,))
    assert (s.count, s.max_ulp, s.straddle, s.first_index) == (4, 3, 2, (0,))
    assert s.max_abs == pytest.approx(3 * 2 ** -6)  # the largest of all, straddles included
    assert s.straddle_max_abs == pytest.approx(value([7e-3], dtype, 0) - value(a, dtype, 4))
    assert str(s) == "4/5 differ, max abs 0.0469, max ULP 3, first at [0]; 2 straddle zero (max abs 0.012)"


@pytest.mark.parametrize("dtype", DTYPES)
def test_plus_and_minus_zero_differ_in_bits_by_zero_ulp(dtype):
    s = diff_stats(raw([1.0, 0.0], dtype), raw([1.0, -0.0], dtype), dtype, (2,))
    assert (s.count, s.max_ulp, s.straddle, s.max_abs, s.first_index) == (1, 0, 0, 0.0, (1,))
    assert str(s) == "1/2 differ, max abs 0, max ULP 0, first at [1]"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("zero", [0.0, -0.0])
def test_a_zero_is_on_the_side_of_the_value_it_is_compared_with(dtype, zero):
    info = torch.finfo(DTYPES[dtype])
    tiniest = info.smallest_normal * info.eps  # the smallest subnormal: 1 ULP from zero
    for x in (tiniest, -tiniest):
        s = diff_stats(raw([zero], dtype), raw([x], dtype), dtype, (1,))
        assert (s.count, s.max_ulp, s.straddle) == (1, 1, 0)


def test_nan_against_a_number_counts_with_an_infinite_abs_difference():
    s = diff_stats(raw([1.0, 2.0], "bfloat16"), raw([1.0, math.nan], "bfloat16"), "bfloat16", (2,))
    assert (s.count, s.straddle, s.first_index) == (1, 0, (1,)) and s.max_abs == np.inf


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_diff_stats_one_ulp(dtype):
    t = torch.randn(4, 6).to(dtype)
    bits = {2: torch.int16, 4: torch.int32}[t.element_size()]
    other = t.clone()
    other.view(bits)[2, 3] += 1
    raw = lambda x: x.view(bits).numpy().tobytes()  # noqa: E731
    name = str(dtype).removeprefix("torch.")
    stats = diff_stats(raw(t), raw(other), name, (4, 6))
    assert (stats.count, stats.max_ulp, stats.first_index) == (1, 1, (2, 3))
    assert stats.max_abs == pytest.approx(abs(float(other[2, 3]) - float(t[2, 3])))
    assert diff_stats(raw(t), raw(t), name, (4, 6)).count == 0


def test_histogram_rel_and_the_distance_across_zero():
    dtype = "bfloat16"
    a = [1.0, 2.0, 3.0, 4.0, 1e-4, 8.0]
    b = bumped(a, dtype, {0: 1, 1: 2, 2: 3, 3: 9})  # 1, 2, 3 and 9 ULP; element 4 straddles zero below
    b = bytearray(b)
    b[8:10] = raw([-1e-4], dtype)
    s = diff_stats(raw(a, dtype), bytes(b), dtype, (6,))
    assert s.histogram == (("1", 1), ("2-3", 2), ("8-15", 1)) and s.straddle == 1 and s.max_ulp == 9
    assert s.max_ulp_across == 2 * (int.from_bytes(raw([1e-4], dtype), "little"))  # every float between them
    assert s.max_rel == pytest.approx(2.0)  # the straddle: |a - b| / max(|a|, |b|)
    assert s.measured("ulp") == s.max_ulp_across and s.measured("abs") == s.max_abs
    assert s.text().startswith("5/6 differ, max abs ") and "; by ULP 1: 1, 2-3: 2, 8-15: 1; first at [0]" in s.text()


def test_the_first_position_is_named_as_token_head_and_column():
    t = torch.ones(3, 2, 4, dtype=torch.bfloat16)
    other = t.clone()
    other.view(torch.int16)[2, 1, 3] += 1
    raw_ = lambda x: x.view(torch.int16).numpy().tobytes()  # noqa: E731
    s = diff_stats(raw_(t), raw_(other), "bfloat16", (3, 2, 4))
    assert s.first_index == (2, 1, 3) and s.text().endswith("first at token 2, head 1, col 3")
    assert s.max_rel == pytest.approx(2 ** -7 / (1 + 2 ** -7))
    lse = diff_stats(raw_(t[:, :, 0].contiguous()), raw_(other[:, :, 3].contiguous()), "bfloat16", (3, 2))
    assert lse.text().endswith("first at token 2, head 1")
