"""The torch attention kernel families (backends sdpa and flex) a recorded kernel or op name belongs to: the
backends record the names that have one (on a CPU), the kernel audit (judge/audit.py) checks them."""

from __future__ import annotations

from typing import Optional

# The torch attention families a name belongs to, tried in this order (cuDNN's SDPA kernels,
# cudnn_generated_fort_native_sdpa_sm90_flash_fprop_..., say flash: cudnn first). CUDA kernels of the fused SDPA
# kernels (flash: pytorch_flash::flash_fwd_kernel, flash_fwd_splitkv_kernel), and on the CPU the aten op that ran.
TORCH_FAMILIES = (
    ("sdpa-cudnn", ("cudnn", "fprop")),
    ("sdpa-efficient", ("fmha_cutlass", "efficient_attention", "memeffattention")),
    ("sdpa-flash", ("flash_fwd", "_flash_attention")),
    ("sdpa-math", ("_attention_math", "softmax")),
    ("flex", ("flex_attention", "triton_tem_")),
)


def torch_family(name: str) -> Optional[str]:
    """The attention family of one recorded kernel or op name (None: not an attention kernel)."""
    low = name.lower()
    return next((family for family, marks in TORCH_FAMILIES if any(m in low for m in marks)), None)
