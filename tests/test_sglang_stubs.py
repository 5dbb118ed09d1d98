"""The sgl_kernel stub takes SGLang's fake registrations of sgl_kernel ops (0.5.14 registers them at load on CUDA),
and only those: in a process of its own, since the stand-in patches torch.library for the process."""

import json
import subprocess
import sys

import pytest

PROBE = r"""
import json, sys, torch
from detrun.kernels.backends import sglang_stubs as st

def attempt(name):
    try:
        fn = lambda *a: None
        return "kept" if torch.library.register_fake(name)(fn) is fn else "other"
    except RuntimeError as e:
        return "raised: " + str(e)

st.install()
before = attempt("sgl_kernel::moe_fused_gate")
import sgl_kernel
after = attempt("sgl_kernel::moe_fused_gate")
other = attempt("detrun_test::no_such_op")
import sgl_kernel.elementwise  # a submodule: no second wrapping
direct = torch.library.register_fake("sgl_kernel::kimi_gate", lambda *a: None)
print(json.dumps({"before": before, "after": after, "other": other, "ops": st.FAKE_OPS,
                  "stub": sgl_kernel.__version__, "direct": direct is not None}))
"""


def test_sgl_kernel_stub_takes_only_sgl_kernel_fake_registrations():
    pytest.importorskip("torch")
    try:
        import sgl_kernel  # noqa: F401
        pytest.skip("the real sgl_kernel is installed: the stub never loads")
    except ImportError:
        pass
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout
    got = json.loads(out.strip().splitlines()[-1])
    assert got["before"].startswith("raised:") and "does not exist" in got["before"]  # torch, without the stub
    assert got["after"] == "kept"
    assert got["other"].startswith("raised:") and "detrun_test::no_such_op" in got["other"]
    assert got["ops"] == ["sgl_kernel::moe_fused_gate", "sgl_kernel::kimi_gate"]
    assert got["stub"].endswith("detrun.stub") and got["direct"]
