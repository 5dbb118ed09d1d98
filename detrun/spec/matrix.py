"""JobSpec -> cells (case x phase x mode x repeat) and the shards each GPU slot runs."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Iterator, List, Optional, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import DetrunError
from ..record.keys import key_mode, key_parts, row_key
from .model import JobSpec, Mode, Phase


@dataclass(frozen=True)
class Cell:
    case: str
    mode: str
    repeat: int
    phase: str = "prefill"

    @property
    def label(self) -> str:
        """case/mode/rN (prefill) or case/mode+decode/rN, as in its rows' keys."""
        return f"{self.case}/{key_mode(self.mode, self.phase)}/r{self.repeat}"


@dataclass(frozen=True)
class Shard:
    """What one Ray task runs: every case, phase and mode for some repeats, on one GPU slot."""

    slot: int
    repeats: Tuple[int, ...]

    @property
    def shard_id(self) -> str:
        return f"g{self.slot}-r{self.repeats[0]}-{self.repeats[-1]}"


def cells_for(spec: JobSpec, repeats: Tuple[int, ...]) -> Iterator[Cell]:
    """Repeat-major order (repeat, case, phase, mode), so state left by one case can show up in the next."""
    for repeat in repeats:
        for case in spec.cases:
            for phase in spec.phases:
                for mode in spec.modes:
                    yield Cell(case, mode, repeat, phase)


def shards(spec: JobSpec, gpus: int) -> List[Shard]:
    per_task = spec.repeats_per_task or spec.repeats
    chunks = [
        tuple(range(start, min(start + per_task, spec.repeats)))
        for start in range(0, spec.repeats, per_task)
    ]
    return [Shard(slot, chunk) for slot in range(gpus) for chunk in chunks]


def slot_tasks(spec: JobSpec) -> List[Tuple[int, ...]]:
    """The repeats of each task (shard) one GPU slot runs, in order."""
    return [s.repeats for s in shards(spec, 1)]


def profile_share(spec: JobSpec, shard: Shard) -> Tuple[int, int]:
    """(the shard's place among its GPU slot's shards, their number): each profiles its share of the plans."""
    chunks = slot_tasks(spec)
    return (chunks.index(shard.repeats), len(chunks)) if shard.repeats in chunks else (0, 1)


def share_of(key: Tuple[str, str], shares: int) -> int:
    """Which of `shares` tasks profiles this (path, plan JSON): a hash every process computes alike."""
    return int.from_bytes(hashlib.blake2b("\0".join(key).encode(), digest_size=8).digest(), "little") % shares


def profiled_by(spec: JobSpec, path: str, plan: str) -> Optional[Tuple[int, ...]]:
    """The repeats of the task of a slot that profiles this (path, plan JSON) when the slot's tasks share the
    profiling (several tasks, profile_repeats set); None when each task profiles every plan it meets."""
    chunks = slot_tasks(spec)
    if len(chunks) < 2 or spec.flashinfer.profile_repeats is None:
        return None
    return chunks[share_of((path, plan), len(chunks))]


def workers_note(spec: JobSpec, workers: int) -> str:
    """'' or why fewer than `workers` tasks (DETRUN_WORKERS_PER_GPU) can run at once on a GPU: a GPU runs its
    job's shards, one per repeats_per_task repeats; with what would let them."""
    tasks = len(slot_tasks(spec))
    if workers <= tasks:
        return ""
    per = -(-spec.repeats // workers)
    note = (f"DETRUN_WORKERS_PER_GPU={workers}, but this job has {tasks} task(s) per GPU (repeats {spec.repeats}, "
            f"repeats_per_task {spec.repeats_per_task or spec.repeats}): at most {tasks} run at once on a GPU")
    more = -(-spec.repeats // per)
    return note + (f"; --set repeats_per_task={per} makes {more}" if more > tasks else "")


def shard_rows(spec: JobSpec, shard: Shard) -> Iterator[Tuple[str, Cell, str]]:
    """(key, cell, request) of every row one shard must write."""
    for cell in cells_for(spec, shard.repeats):
        for request in spec.members(cell.case):
            yield row_key(cell.case, request, cell.mode, cell.repeat, shard.slot, cell.phase), cell, request


def shard_keys(spec: JobSpec, shard: Shard) -> List[str]:
    """Every row one shard must write."""
    return [key for key, _, _ in shard_rows(spec, shard)]


def row_count(spec: JobSpec, gpus: int) -> int:
    """Rows of a complete run: requests (copies counted) over the cases x phases x modes x repeats x GPU slots."""
    members = sum(spec.requests[name].copies for names in spec.cases.values() for name in names)
    return members * len(spec.phases) * len(spec.modes) * spec.repeats * gpus


def check_size(spec: JobSpec, gpus: int, source: str = "") -> None:
    """Raise DetrunError naming limits.max_rows when a run on `gpus` slots would write more rows."""
    rows, limit = row_count(spec, gpus), spec.limits.max_rows
    if rows > limit:
        where = f"{source}: " if source else ""
        raise DetrunError(f"{where}{rows} rows on {gpus} GPU slot(s) exceed limits.max_rows ({limit}); "
                          "fewer repeats, or --set limits.max_rows=N")


def expected_keys(spec: JobSpec, gpus: int) -> List[str]:
    """Every row a complete run of this spec on this many GPU slots must have."""
    return [key for shard in shards(spec, gpus) for key in shard_keys(spec, shard)]


def key_layout(spec: JobSpec, gpus: int) -> Tuple[List[Tuple[str, str, Mode, Phase]], List[Tuple[int, int]]]:
    """expected_keys is blocks x cells: (case, request, mode, phase) cells, inner (case, phase, mode, request
    order); (slot, repeat) blocks, outer."""
    cells = [(case, request, mode, phase) for case in spec.cases for phase in spec.phases for mode in spec.modes
             for request in spec.members(case)]
    return cells, [(shard.slot, repeat) for shard in shards(spec, gpus) for repeat in shard.repeats]


def expected_key_array(spec: JobSpec, gpus: int) -> pa.Array:
    """expected_keys as an Arrow string array, built without a Python string per row."""
    cells, blocks = key_layout(spec, gpus)
    heads, tails = key_parts(cells, blocks)
    take_cells = np.tile(np.arange(len(cells), dtype=np.int64), len(blocks))
    take_tails = np.repeat(np.arange(len(blocks), dtype=np.int64), len(cells))
    return pc.binary_join_element_wise(heads.take(take_cells), tails.take(take_tails), "")
