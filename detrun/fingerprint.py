"""Environment fingerprints without torch: the fields that decide whether runs compare bitwise."""

from __future__ import annotations

import hashlib
import json
from typing import Dict

# The fields that decide whether two runs may be compared bitwise (not host, node or UUID).
FINGERPRINT_FIELDS = ("gpu_name", "sm_count", "driver", "cuda", "torch", "flashinfer", "flags")


def fingerprint_of(fields: Dict[str, object]) -> str:
    key = json.dumps({k: fields.get(k, "") for k in FINGERPRINT_FIELDS}, sort_keys=True)
    return hashlib.blake2b(key.encode(), digest_size=8).hexdigest()


def fingerprint_fields(row: Dict[str, object]) -> Dict[str, object]:
    """The fingerprint fields of one row, as recorded."""
    return {k: row.get(k, "") for k in FINGERPRINT_FIELDS}
