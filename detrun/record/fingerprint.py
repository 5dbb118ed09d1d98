"""Environment fingerprints without torch: the fields that decide whether runs compare bitwise."""

from __future__ import annotations

import hashlib
import json
from typing import Dict, List, Tuple

# The fields that decide whether two runs may be compared bitwise (not host, node or UUID).
FINGERPRINT_FIELDS = ("gpu_name", "sm_count", "driver", "cuda", "torch", "flashinfer", "flags", "sglang")
OPTIONAL = ("sglang",)  # in the key only when set: rows without SGLang keep the fingerprints they always had


def fingerprint_of(fields: Dict[str, object]) -> str:
    key = json.dumps({k: fields.get(k, "") for k in FINGERPRINT_FIELDS if k not in OPTIONAL or fields.get(k)},
                     sort_keys=True)
    return hashlib.blake2b(key.encode(), digest_size=8).hexdigest()


def fingerprint_fields(row: Dict[str, object]) -> Dict[str, object]:
    """The fingerprint fields of one row, as recorded."""
    return {k: row.get(k, "") for k in FINGERPRINT_FIELDS}


def field_differences(a: Dict[str, object], b: Dict[str, object]) -> List[Tuple[str, object, object]]:
    """(field, a's value, b's value) for each fingerprint field that differs."""
    return [(k, a.get(k), b.get(k)) for k in FINGERPRINT_FIELDS if a.get(k) != b.get(k)]
