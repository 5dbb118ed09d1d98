"""What a job spec's load errors say: the input to blame (the file, or the --set that made the bad value)
and, for a key the spec does not have, which keys it does have there."""

from __future__ import annotations

import difflib
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Type, Union, get_args, get_origin

from pydantic import BaseModel

Loc = Tuple[str, ...]
GENERATED = ("swept", "sglang_overridden")  # keys detrun fills in itself (a stored spec has them)


def kind_of(data: object) -> str:
    """A parsed YAML document's kind, in words (for "a job spec must be a mapping, got ...")."""
    names = {type(None): "nothing", list: "a list", str: "a string", int: "a number", float: "a number",
             bool: "a boolean"}
    return names.get(type(data), f"a {type(data).__name__}")


def override_key(item: str) -> Loc:
    """The key path of a --set KEY.PATH=VALUE."""
    return tuple(item.partition("=")[0].split("."))


def blamed_override(loc: Loc, message: str, overrides: Sequence[str]) -> Optional[str]:
    """The last --set item whose key is where the error is (or under it, or above it), else None. An error
    of a validator of the whole spec has no location: its message starts with the field's dotted path."""
    head = message.partition(":")[0]
    where = loc or (tuple(head.split(".")) if head and " " not in head else ())
    for item in reversed(overrides):
        key = override_key(item)
        if where and (key[:len(where)] == where or where[:len(key)] == key):
            return item
    return None


def _unwrap(tp: object) -> object:
    """Optional[X] -> X."""
    if get_origin(tp) is Union:
        rest = [a for a in get_args(tp) if a is not type(None)]
        return rest[0] if len(rest) == 1 else tp
    return tp


def _model_at(root: Type[BaseModel], loc: Loc) -> Optional[Type[BaseModel]]:
    """The model whose fields live at loc (a dict's or list's items followed through), or None."""
    tp: object = root
    for part in loc:
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            field = tp.model_fields.get(part)
            if field is None:
                return None
            tp = field.annotation
        elif get_origin(tp) in (dict, Dict):
            tp = get_args(tp)[1]
        elif get_origin(tp) in (list, List):
            tp = get_args(tp)[0]
        else:
            return None
        tp = _unwrap(tp)
    return tp if isinstance(tp, type) and issubclass(tp, BaseModel) else None


def error_text(err: Mapping[str, Any], root: Type[BaseModel]) -> str:
    """One pydantic error as "field.path: what is wrong"; an unknown key names the keys known there."""
    loc = tuple(str(p) for p in err["loc"])
    where = ".".join(loc)
    if err["type"] == "extra_forbidden":
        model = _model_at(root, loc[:-1])
        known = [k for k in (model.model_fields if model else {}) if k not in GENERATED]
        close = difflib.get_close_matches(loc[-1], known, n=1)
        hint = f"; did you mean {close[0]}?" if close else (f" (its keys: {', '.join(known)})" if known else "")
        parent = ".".join(loc[:-1]) or "the job spec"
        return f"{where}: not a key of {parent}{hint}"
    msg = err["msg"].removeprefix("Value error, ")
    return f"{where}: {msg}" if where else msg
