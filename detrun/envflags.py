"""Environment flags: SGLang's EnvBool parsing, strict (a bad value is an error)."""

from __future__ import annotations

import os

TRUE_WORDS = ("true", "1", "yes", "y")
FALSE_WORDS = ("false", "0", "no", "n")

# Flags whose value SGLang parses as EnvBool; detrun validates them up front.
BOOL_FLAGS = frozenset(
    {
        "SGLANG_FLASHINFER_USE_PAGED",
        "SGLANG_ENABLE_DETERMINISTIC_INFERENCE",
        "SGLANG_FLASHINFER_USE_TENSOR_CORE",
    }
)
# Ray owns these: a spec that sets them would break one-task-one-GPU.
FORBIDDEN_FLAGS = frozenset({"CUDA_VISIBLE_DEVICES", "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"})


def parse_bool(name: str, value: str) -> bool:
    """Parse as SGLang's EnvBool does (environ.py: value.lower(), no stripping, in true/1/yes/y or false/0/no/n),
    but raise where SGLang would warn and read the default (False), so no value means one thing here and another
    in SGLang."""
    low = str(value).lower()
    if low in TRUE_WORDS:
        return True
    if low in FALSE_WORDS:
        return False
    raise ValueError(
        f"{name}={value!r} is not a boolean: SGLang would warn and read it as false "
        f"(use one of {', '.join(TRUE_WORDS + FALSE_WORDS)})"
    )


def env_bool(name: str, default: bool = False) -> bool:
    """Read a boolean flag from this process's environment (once, at backend construction)."""
    raw = os.environ.get(name)
    return default if raw is None else parse_bool(name, raw)


DIGEST_DEPTH = "DETRUN_DIGEST_DEPTH"
DIGEST_STREAM = "DETRUN_DIGEST_STREAM"
DEFAULT_DIGEST_DEPTH, DEFAULT_DIGEST_STREAM = "4", "low"  # docs/performance.md, "Steady overhead"


def digest_depth(value: str) -> int:
    """DETRUN_DIGEST_DEPTH: how many launched cells a task keeps in flight before writing the oldest one's
    rows (a whole number >= 1). ValueError naming it otherwise."""
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{DIGEST_DEPTH}={value!r}: expected a whole number >= 1")
    return int(value)


def digest_stream(value: str) -> bool:
    """DETRUN_DIGEST_STREAM: "low" (digests on a low-priority stream of their own, beside the next kernels)
    or "same" (on the kernels' stream, after each). True for "low"; ValueError naming it otherwise."""
    if value not in ("low", "same"):
        raise ValueError(f"{DIGEST_STREAM}={value!r}: expected low or same")
    return value == "low"

