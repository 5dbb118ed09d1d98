"""The wrapper paths a row says it took (its `path` column): the backends record them, the judge's kernel
audit checks them."""

from typing import Iterable

PATH_PAGED = "paged"
PATH_RAGGED = "ragged"
PATH_RAGGED_PREFIX = "ragged+paged-prefix"  # ragged over new tokens + paged over the cached prefix, merged
PATH_DECODE = "decode"  # one new token per request over its whole paged cache (forward_decode)


# backend sglang names each FlashInfer wrapper by where SGLang keeps it (sglang_record.py): prefill_ragged,
# prefill_paged[0], decode[0], graph.decode[0]@bs4, graph.full_prefill[0], graph.prefill_paged[0]@bs4, ...
def family(label: str) -> str:
    """ragged, paged or decode: which FlashInfer wrapper class a label names."""
    name = label.rpartition(".")[2] if label.startswith("graph.") else label
    if name.startswith("prefill_ragged"):
        return "ragged"
    if name.startswith("decode"):
        return "decode"
    return "paged"


def path_of(ran: Iterable[str]) -> str:
    """The path the run wrappers make: ragged and paged together are ragged + paged prefix (merged)."""
    kinds = {family(label) for label in ran}
    if kinds == {"decode"}:
        return PATH_DECODE
    if kinds == {"ragged", "paged"}:
        return PATH_RAGGED_PREFIX
    if kinds == {"ragged"}:
        return PATH_RAGGED
    if kinds == {"paged"}:
        return PATH_PAGED
    return "+".join(sorted(kinds)) or "none"
