"""dataclasses.replace for the plan's hot loops (issue #36 item 5).

A plan asks for some two thousand variants of LaunchConfig and ComputeSettings (the searches'
contexts, combos and -ngl; compute_for_devices' settings per device). dataclasses.replace walks
the class's fields and builds a keyword dict on every call; `replace` here reads the init fields
in one attrgetter call, worked out once per class, and calls the class positionally: the same
__init__ (and __post_init__) runs with the same values, in about half the time. Classes where
positional arguments would not line up with the fields (keyword-only fields, init=False fields,
InitVar or ClassVar pseudo-fields, fewer than two fields) and changes naming no init field go
through dataclasses.replace itself, which gives its own errors.
"""

from __future__ import annotations

import dataclasses
from operator import attrgetter
from typing import Any, TypeVar

T = TypeVar("T")

# per dataclass: the init fields' getter and each field's position; None: dataclasses.replace
_PLANS: dict[type, tuple[attrgetter[Any], dict[str, int]] | None] = {}


def _plan(cls: type) -> tuple[attrgetter[Any], dict[str, int]] | None:
    fields = dataclasses.fields(cls)
    names = tuple(f.name for f in fields)
    positional = all(f.init and not f.kw_only for f in fields)
    # fields() leaves out InitVar and ClassVar pseudo-fields, which __dataclass_fields__ holds
    plain = len(fields) == len(getattr(cls, "__dataclass_fields__", ()))
    if not (positional and plain and len(names) >= 2):
        return None
    return attrgetter(*names), {name: i for i, name in enumerate(names)}


def replace(obj: T, /, **changes: Any) -> T:
    """dataclasses.replace(obj, **changes), faster on plain dataclasses."""
    cls = type(obj)
    try:
        plan = _PLANS[cls]
    except KeyError:
        plan = _PLANS[cls] = _plan(cls)
    if plan is None:
        return dataclasses.replace(obj, **changes)  # type: ignore[type-var]
    get, index = plan
    values = list(get(obj))
    for name, value in changes.items():
        i = index.get(name)
        if i is None:
            return dataclasses.replace(obj, **changes)  # type: ignore[type-var]
        values[i] = value
    return cls(*values)
