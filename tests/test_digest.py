"""Digests: pinned bits (stored baselines depend on them), split digests, and the Triton kernel agreeing
bit for bit with the torch path (run in Triton's CPU interpreter)."""

import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from detrun.kernels.digest import split_digests, split_lanes, tensor_digest


def test_digest_bits_are_pinned():
    """The digest of a fixed tensor, as detrun has always computed it: a change breaks every baseline."""
    t = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4).to(torch.bfloat16)
    assert tensor_digest(t) == "fec70df349bfc4e43d37ea2a8cbc2850"


def test_digest_sees_one_bit_dtype_and_shape():
    t = torch.randn(64, 8, dtype=torch.float32).to(torch.bfloat16)
    d = tensor_digest(t)
    assert d == tensor_digest(t.clone())
    flipped = t.clone()
    flipped.view(torch.int16)[3, 5] ^= 1
    assert tensor_digest(flipped) != d
    assert tensor_digest(t.reshape(8, 64)) != d
    assert tensor_digest(t.view(torch.float16)) != d


def test_split_digests_are_the_digests_of_the_slices():
    t = torch.randn(10, 3, 4).to(torch.bfloat16)
    bounds = [0, 2, 2, 7, 10]
    outs, lses = split_digests([t, t[:, :, 0].float()], bounds)
    assert outs == [tensor_digest(t[a:b]) for a, b in zip(bounds, bounds[1:])]
    assert lses == [tensor_digest(t[a:b, :, 0].float()) for a, b in zip(bounds, bounds[1:])]


def test_single_rows_ride_along_as_one_row_segments():
    """The last rows a prefill cell digests beside its requests: each the digest of that row alone."""
    t = torch.randn(10, 3, 4).to(torch.bfloat16)
    bounds, rows = [0, 2, 2, 7, 10], [1, 6, 9, 0]
    outs, lses = split_digests([t, t[:, :, 0].float()], bounds, rows)
    assert outs == ([tensor_digest(t[a:b]) for a, b in zip(bounds, bounds[1:])]
                    + [tensor_digest(t[r:r + 1]) for r in rows])
    assert lses[4:] == [tensor_digest(t[r:r + 1, :, 0].float()) for r in rows]
    assert split_digests([t], bounds, [9])[0][:4] == split_digests([t], bounds)[0]  # the ranges' digests unchanged
    assert split_lanes(t, bounds, rows=rows).shape == (len(bounds) - 1 + len(rows), 2)


def test_a_one_bit_flip_changes_only_its_segment_and_both_lanes():
    t = torch.randn(12, 8).to(torch.bfloat16)
    bounds = [0, 4, 9, 12]
    flipped = t.clone()
    flipped.view(torch.int16)[5, 3] ^= 1  # row 5: the second segment
    a, b = split_lanes(t, bounds), split_lanes(flipped, bounds)
    assert torch.equal(a[0], b[0]) and torch.equal(a[2], b[2])
    assert (a[1] != b[1]).all()
    assert split_digests([t], bounds)[0][1] != split_digests([flipped], bounds)[0][1]


_INTERPRET = textwrap.dedent("""
    import torch
    from detrun.kernels.digest import split_lanes
    torch.manual_seed(3)
    checked = 0
    for dtype in (torch.bfloat16, torch.float32, torch.int8, torch.float64):
        for rows, bounds in ((37, [0, 1, 1, 20, 37]), (1100, [0, 1099, 1100])):  # 1100 x 4 > one program
            t = (torch.randn(rows, 4) * 50).to(dtype)
            ref, fused = split_lanes(t, bounds, impl="torch"), split_lanes(t, bounds, impl="triton")
            assert torch.equal(ref, fused), (dtype, rows, ref, fused)
            last = [b - 1 for b in bounds[1:] if b] + [0]  # one-row segments (any order) in the same launch
            both = split_lanes(t, bounds, impl="triton", rows=last)
            assert torch.equal(both, split_lanes(t, bounds, impl="torch", rows=last))
            assert torch.equal(both[:len(ref)], ref)
            flipped = t.clone()
            word = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
            flipped.view(-1).view(word)[-1] ^= 1
            assert not torch.equal(split_lanes(flipped, bounds, impl="triton")[-1], fused[-1])
            checked += 1
    from detrun.kernels import digest
    digest.choice = lambda device_type: "triton"
    for rows, bounds in ((37, [0, 1, 1, 20, 37]), (1100, [0, 1099, 1100])):  # a cell's output and LSE, one launch
        out, lse = (torch.randn(rows, 4, 3) * 50).to(torch.bfloat16), torch.randn(rows, 4)
        last = [b - 1 for b in bounds[1:] if b]
        ref = torch.cat([split_lanes(t, bounds, impl="torch", rows=last) for t in (out, lse)])
        assert torch.equal(digest.cell_lanes([out, lse], bounds, last), ref)
        flipped = lse.clone()
        flipped.view(torch.int32)[3, 2] ^= 1  # LSE row 3: the third range (rows 1:20) and nothing of the output
        changed = (digest.cell_lanes([out, flipped], bounds, last) != ref).any(dim=1).nonzero().flatten().tolist()
        n = len(bounds) - 1 + len(last)
        assert changed == [n + [a <= 3 < b for a, b in zip(bounds, bounds[1:])].index(True)], changed
        checked += 1
    print("checked", checked)
""")


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
def test_triton_kernel_gives_the_torch_bits_in_the_interpreter():
    env = dict(os.environ, TRITON_INTERPRET="1")
    out = subprocess.run([sys.executable, "-c", _INTERPRET], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "checked 10" in out.stdout


def test_the_cpu_takes_the_torch_path_unless_detrun_digest_says_triton(monkeypatch):
    from detrun.kernels import digest

    cpu = torch.zeros(4)
    assert digest.implementation(cpu) == "torch"  # CPU: always torch
    digest.prewarm(cpu.device)  # nothing to load for the torch path
    assert digest._warming is None
    digest.ready()
    monkeypatch.setenv("DETRUN_DIGEST", "triton")
    assert digest.implementation(cpu) == "triton"


def test_a_kernel_that_does_not_load_falls_back_to_the_torch_path(monkeypatch):
    from detrun.kernels import digest

    def broken(*args, **kwargs):
        raise RuntimeError("no compiler for this GPU")

    monkeypatch.delenv("DETRUN_DIGEST", raising=False)
    monkeypatch.setattr(digest, "_triton_ok", lambda: True)
    monkeypatch.setattr(digest, "_failed", None)
    assert digest.choice("cuda") == "triton"
    monkeypatch.setattr(digest, "split_lanes", broken)
    digest._load_kernel(torch.device("cpu"))
    assert "no compiler for this GPU" in digest._failed and digest.choice("cuda") == "torch"


def test_digests_take_the_torch_path_while_the_kernel_loads(monkeypatch):
    import threading

    from detrun.kernels import digest

    monkeypatch.delenv("DETRUN_DIGEST", raising=False)
    monkeypatch.setattr(digest, "_triton_ok", lambda: True)
    monkeypatch.setattr(digest, "_failed", None)
    release = threading.Event()
    loading = threading.Thread(target=release.wait)
    loading.start()
    monkeypatch.setattr(digest, "_warming", loading)
    try:
        assert digest.warming() and digest.choice("cuda") == "torch"  # no wait: same bits either way
    finally:
        release.set()
    digest.ready()
    assert not digest.warming() and digest.choice("cuda") == "triton"
