"""Generated cases: a job spec's `sweep:` generators, expanded once at validation into plain requests and
cases (spec.JobSpec), so runs, compare, history and reports see an ordinary spec.

Each generator makes requests and cases named from its `name`; the same generator (and seed) always
makes the same ones. Expansion moves the generators to `swept` (a record, never expanded again) and
leaves `sweep: []`, so a stored spec validates to itself.
"""

from __future__ import annotations

import random
from typing import Annotated, Dict, List, Literal, Tuple, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PositiveInt,
    TypeAdapter,
    ValidationError,
    field_validator,
)

MAX_SIZE = 4096  # requests in one generated case, sizes in one list
MAX_COUNT = 4096  # batches one random_mixes generator draws
DEFAULT_MAX_ROWS = 2_000_000  # spec.Limits.max_rows: generated requests must fit it before they are made
NAME = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _ordered(span: Tuple[int, int]) -> Tuple[int, int]:
    if span[0] > span[1]:
        raise ValueError(f"[{span[0]}, {span[1]}]: the low end exceeds the high end")
    return span


Span = Annotated[Tuple[Annotated[int, Field(ge=0)], Annotated[int, Field(ge=0)]], AfterValidator(_ordered)]
PositiveSpan = Annotated[Tuple[PositiveInt, PositiveInt], AfterValidator(_ordered)]
Size = Annotated[int, Field(ge=1, le=MAX_SIZE)]


class Shape(_Model):
    """A request's lengths (a generator names it)."""

    qo_len: int = Field(ge=1)
    prefix_len: int = Field(default=0, ge=0)

    def request(self, **extra) -> dict:
        return {"qo_len": self.qo_len, "prefix_len": self.prefix_len, **extra}


Made = Tuple[Dict[str, dict], Dict[str, List[str]]]  # requests (as job-file dicts), cases


class BatchSizes(_Model):
    """One target beside size-1 fillers for each size: cases <name><size> = [<name>_target, <name>_f1, ...]."""

    kind: Literal["batch_sizes"]
    name: str = Field(default="bs", pattern=NAME)
    target: Shape
    filler: Shape
    sizes: List[Size] = Field(min_length=1)  # or N: 1..N

    @field_validator("sizes", mode="before")
    @classmethod
    def _up_to(cls, sizes: object) -> object:
        if isinstance(sizes, int) and not isinstance(sizes, bool):
            if not 1 <= sizes <= MAX_SIZE:
                raise ValueError(f"{sizes}: N must be 1..{MAX_SIZE} (batch sizes 1..N)")
            return list(range(1, sizes + 1))
        return sizes

    @field_validator("sizes")
    @classmethod
    def _unique(cls, sizes: List[int]) -> List[int]:
        if len(set(sizes)) != len(sizes):
            raise ValueError("sizes must not repeat")
        return sizes

    def members(self) -> int:
        return sum(self.sizes) + max(self.sizes) - 1  # case members, plus the requests made

    def make(self, page_size: int) -> Made:
        fillers = [f"{self.name}_f{j}" for j in range(1, max(self.sizes))]
        requests = {f"{self.name}_target": self.target.request()}
        requests.update({f: self.filler.request() for f in fillers})
        cases = {f"{self.name}{n}": [f"{self.name}_target", *fillers[: n - 1]] for n in self.sizes}
        return requests, cases


class RandomMixes(_Model):
    """`count` seeded random batches around one target (cases <name>0, <name>1, ...; <name>_alone)."""

    kind: Literal["random_mixes"]
    name: str = Field(default="mix", pattern=NAME)
    seed: int = 0
    count: int = Field(ge=1, le=MAX_COUNT)
    target: Shape
    size: PositiveSpan = (2, 8)  # requests per batch, the target included
    qo_len: PositiveSpan = (1, 256)
    prefix_len: Span = (0, 512)
    shared_prefix: bool = False  # a batch's prefixed requests share one prefix (its length in whole pages)
    decode: float = Field(default=0.0, ge=0, le=1)  # chance that another request is a 1-token decode
    alone: bool = True  # also a case with the target alone

    @field_validator("size")
    @classmethod
    def _fits(cls, size: Tuple[int, int]) -> Tuple[int, int]:
        if size[1] > MAX_SIZE:
            raise ValueError(f"at most {MAX_SIZE} requests per batch")
        return size

    def members(self) -> int:
        return 2 * self.count * self.size[1] + 2

    def _batch(self, k: int, page_size: int) -> Tuple[Dict[str, dict], List[str]]:
        rng = random.Random(f"{self.seed}:{k}")  # string seeds hash the same in every process
        others = rng.randint(*self.size) - 1
        requests: Dict[str, dict] = {}
        owner, shared = None, (rng.randint(*self.prefix_len) // page_size) * page_size
        for j in range(others):
            name = f"{self.name}{k}_{j}"
            if rng.random() < self.decode:
                requests[name] = {"qo_len": 1, "prefix_len": rng.randint(*self.prefix_len)}
            elif self.shared_prefix and shared:
                requests[name] = {"qo_len": rng.randint(*self.qo_len), "prefix_len": shared}
                if owner:
                    requests[name]["prefix"] = owner
                owner = owner or name
            else:
                requests[name] = {"qo_len": rng.randint(*self.qo_len), "prefix_len": rng.randint(*self.prefix_len)}
        case = list(requests)
        case.insert(rng.randint(0, others), f"{self.name}_target")
        return requests, case

    def make(self, page_size: int) -> Made:
        requests = {f"{self.name}_target": self.target.request()}
        cases = {f"{self.name}_alone": [f"{self.name}_target"]} if self.alone else {}
        for k in range(self.count):
            made, cases[f"{self.name}{k}"] = self._batch(k, page_size)
            requests.update(made)
        return requests, cases


class PrefixLengths(_Model):
    """One request per prefix length, alone and beside a filler: cases <name><L>_alone, <name><L>_filled.
    Lengths: `lengths`, plus base + page_size - 1, base + page_size, base + page_size + 1 (base null: none)."""

    kind: Literal["prefix_lengths"]
    name: str = Field(default="pl", pattern=NAME)
    qo_len: int = Field(default=16, ge=1)
    lengths: List[Annotated[int, Field(ge=0)]] = Field(default_factory=lambda: [1, 511, 2048, 4097],
                                                       max_length=MAX_SIZE)
    base: Union[Annotated[int, Field(ge=0)], None] = 0
    filler: Shape = Shape(qo_len=64)

    def members(self) -> int:
        return 3 * (len(self.lengths) + 3) + 1

    def all_lengths(self, page_size: int) -> List[int]:
        edge = [] if self.base is None else [self.base + page_size + d for d in (-1, 0, 1)]
        return sorted(set(self.lengths) | set(edge))

    def make(self, page_size: int) -> Made:
        filler = f"{self.name}_filler"
        requests, cases = {filler: self.filler.request()}, {}
        for length in self.all_lengths(page_size):
            name = f"{self.name}{length}"
            requests[name] = {"qo_len": self.qo_len, "prefix_len": length}
            cases[f"{name}_alone"], cases[f"{name}_filled"] = [name], [name, filler]
        return requests, cases


Generator = Annotated[Union[BatchSizes, RandomMixes, PrefixLengths], Field(discriminator="kind")]
_GENERATOR: TypeAdapter[Union[BatchSizes, RandomMixes, PrefixLengths]] = TypeAdapter(Generator)


def _where(i: int, loc: tuple) -> str:
    """sweep[i].field[j] for a pydantic error location (the union's tag left out)."""
    parts = list(loc[1:] if loc and loc[0] in ("batch_sizes", "random_mixes", "prefix_lengths") else loc)
    return f"sweep[{i}]" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)


def parse(i: int, raw: object) -> Union[BatchSizes, RandomMixes, PrefixLengths]:
    """One generator, validated; ValueError naming sweep[i].field."""
    try:
        return _GENERATOR.validate_python(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise ValueError(f"{_where(i, err['loc'])}: {err['msg'].removeprefix('Value error, ')}") from None


def _positive(data: dict, field: str, default: int, key: str) -> int:
    try:
        return TypeAdapter(PositiveInt).validate_python(data.get(field, default))
    except ValidationError:
        raise ValueError(f"{key}: a positive integer is needed to expand sweep") from None


def _mapping(data: dict, field: str) -> dict:
    value = data.get(field) or {}
    if not isinstance(value, dict):
        raise ValueError(f"{field}: a mapping of names (the sweep adds to it)")
    return dict(value)


def expand(data: dict, page_size_default: int) -> dict:
    """The job-file dict with its sweep expanded: generated requests and cases added, generators moved to
    `swept`. Names may not collide; the requests made must fit limits.max_rows (checked before making them)."""
    sweep = data.get("sweep")
    if not isinstance(sweep, list):
        raise ValueError("sweep: a list of generators (kind: batch_sizes, random_mixes or prefix_lengths)")
    page_size = _positive(data, "page_size", page_size_default, "page_size")
    raw_limits = data.get("limits")
    limits: dict = raw_limits if isinstance(raw_limits, dict) else {}
    max_rows = _positive(limits, "max_rows", DEFAULT_MAX_ROWS, "limits.max_rows")
    gens = [parse(i, raw) for i, raw in enumerate(sweep)]
    requests, cases = _mapping(data, "requests"), _mapping(data, "cases")
    for i, gen in enumerate(gens):
        if gen.members() > max_rows:
            raise ValueError(f"sweep[{i}]: makes up to {gen.members()} requests, over limits.max_rows ({max_rows})")
        made_requests, made_cases = gen.make(page_size)
        for what, have, made in (("request", requests, made_requests), ("case", cases, made_cases)):
            taken = next((n for n in made if n in have), None)
            if taken is not None:
                raise ValueError(f"sweep[{i}].name: {what} {taken!r} already exists (name the generator otherwise)")
            have.update(made)
    swept = list(data.get("swept") or []) + [g.model_dump(mode="json") for g in gens]
    return {**data, "requests": requests, "cases": cases, "sweep": [], "swept": swept}
