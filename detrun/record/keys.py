"""A row's key and the request names in it: `case/request/mode[+phase]/rN/gS`, copies as `name#i`.

The key is what a run's rows are matched on (its cells, missing and duplicate rows); a request with
`copies: n` has rows `name#0` .. `name#n-1` in a case, shown folded as one row `name#*`.
"""

from __future__ import annotations

from typing import List, Sequence, Tuple

import pyarrow as pa

COPY = "#"  # a request's copies in a case are name#0, name#1, ... (JobSpec.members); no request name has it


def copy_name(name: str, i: int) -> str:
    """The name of copy i of a request."""
    return f"{name}{COPY}{i}"


def base_request(name: str) -> str:
    """The request a copy (name#i) or a folded row (name#*) is of; a plain name is its own."""
    return name.partition(COPY)[0]


def folded_request(name: str) -> str:
    """The one row a request's copies are shown as: name#i -> name#*, a plain name unchanged."""
    base, _, copy = name.partition(COPY)
    return f"{base}{COPY}*" if copy else base


def key_mode(mode: str, phase: str) -> str:
    """A key's mode part: the mode for prefill (the keys rows always had), mode+decode for decode."""
    return mode if phase == "prefill" else f"{mode}+{phase}"


def _head(case: str, request: str, mode: str, phase: str = "prefill") -> str:
    return f"{case}/{request}/{key_mode(mode, phase)}"


def _tail(repeat: int, slot: int) -> str:
    return f"/r{repeat}/g{slot}"


def row_key(case: str, request: str, mode: str, repeat: int, slot: int, phase: str = "prefill") -> str:
    return _head(case, request, mode, phase) + _tail(repeat, slot)


def key_parts(cells: Sequence[Tuple[str, str, str, str]], blocks: List[Tuple[int, int]]) -> Tuple[pa.Array, pa.Array]:
    """row_key in two Arrow arrays: the head of each (case, request, mode, phase) cell, the tail of each
    (slot, repeat) block."""
    heads = pa.array([_head(*cell) for cell in cells] or [""], pa.string())
    tails = pa.array([_tail(repeat, slot) for slot, repeat in blocks] or [""], pa.string())
    return heads, tails
