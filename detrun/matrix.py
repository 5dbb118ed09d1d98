"""JobSpec -> cells (case x mode x repeat) and the shards each GPU slot runs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, List, Tuple

from .spec import JobSpec


@dataclass(frozen=True)
class Cell:
    case: str
    mode: str
    repeat: int


@dataclass(frozen=True)
class Shard:
    """What one Ray task runs: every case and mode for some repeats, on one GPU slot."""

    slot: int
    repeats: Tuple[int, ...]

    @property
    def shard_id(self) -> str:
        return f"g{self.slot}-r{self.repeats[0]}-{self.repeats[-1]}"


def cells_for(spec: JobSpec, repeats: Tuple[int, ...]) -> Iterator[Cell]:
    """Repeat-major order, so state left by one case can show up in the next."""
    for repeat in repeats:
        for case in spec.cases:
            for mode in spec.modes:
                yield Cell(case, mode, repeat)


def shards(spec: JobSpec, gpus: int) -> List[Shard]:
    per_task = spec.repeats_per_task or spec.repeats
    chunks = [
        tuple(range(start, min(start + per_task, spec.repeats)))
        for start in range(0, spec.repeats, per_task)
    ]
    return [Shard(slot, chunk) for slot in range(gpus) for chunk in chunks]


def row_key(case: str, request: str, mode: str, repeat: int, slot: int) -> str:
    return f"{case}/{request}/{mode}/r{repeat}/g{slot}"


def shard_keys(spec: JobSpec, shard: Shard) -> List[str]:
    """Every row one shard must write."""
    return [
        row_key(cell.case, request, cell.mode, cell.repeat, shard.slot)
        for cell in cells_for(spec, shard.repeats)
        for request in spec.members(cell.case)
    ]


def expected_keys(spec: JobSpec, gpus: int) -> List[str]:
    """Every row a complete run of this spec on this many GPU slots must have."""
    return [key for shard in shards(spec, gpus) for key in shard_keys(spec, shard)]
