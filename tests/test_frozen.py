"""frozen.replace gives what dataclasses.replace gives, on the plan's classes and on the shapes
it hands to dataclasses.replace itself."""

from __future__ import annotations

import dataclasses
from dataclasses import InitVar, dataclass, field
from typing import ClassVar

import pytest

from llamafit import frozen
from llamafit.frozen import replace
from llamafit.memory.compute import ComputeSettings
from llamafit.memory.config import LaunchConfig


@dataclass(frozen=True, slots=True)
class Plain:
    a: int
    b: str = "x"
    c: tuple[int, ...] = ()


@dataclass(frozen=True)
class Checked:
    lo: int
    hi: int

    def __post_init__(self) -> None:
        if self.lo > self.hi:
            raise ValueError("lo above hi")


@dataclass
class NotInit:
    a: int
    seen: list[int] = field(default_factory=list, init=False)


@dataclass(frozen=True)
class KwOnly:
    a: int
    b: int = field(default=0, kw_only=True)


@dataclass
class WithInitVar:
    a: int
    scale: InitVar[int] = 1

    def __post_init__(self, scale: int) -> None:
        self.a *= scale


@dataclass
class NeedsInitVar:
    a: int
    scale: InitVar[int]

    def __post_init__(self, scale: int) -> None:
        self.a *= scale


@dataclass(frozen=True)
class WithClassVar:
    limit: ClassVar[int] = 3
    a: int
    b: int = 0


@dataclass(frozen=True)
class One:
    a: int


CASES = [
    (Plain(1), {"a": 2}, True),
    (Plain(1, "y", (1, 2)), {"b": "z", "c": ()}, True),
    (Plain(1), {}, True),
    (Checked(1, 2), {"hi": 5}, True),
    (NotInit(1), {"a": 2}, False),
    (KwOnly(1, b=2), {"a": 3}, False),
    (KwOnly(1, b=2), {"b": 4}, False),
    (WithInitVar(2, 3), {"a": 5, "scale": 2}, False),
    (WithClassVar(1), {"b": 2}, False),
    (One(1), {"a": 2}, False),
    (LaunchConfig(), {"n_ctx": 4096, "flash_attn": "on"}, True),
    (ComputeSettings(4096, 512, 1, True), {"backend": "cuda", "layers": (1, 2)}, True),
]


@pytest.mark.parametrize(("obj", "changes", "positional"), CASES)
def test_same_as_dataclasses_replace(obj: object, changes: dict[str, object], positional: bool):
    got = replace(obj, **changes)
    want = dataclasses.replace(obj, **changes)  # type: ignore[type-var]
    assert type(got) is type(want)
    assert dataclasses.astuple(got) == dataclasses.astuple(want)  # type: ignore[arg-type]
    assert (frozen._PLANS[type(obj)] is not None) is positional


def test_init_false_field_is_fresh():
    obj = NotInit(1)
    obj.seen.append(1)
    assert replace(obj, a=2).seen == []


def test_post_init_runs():
    with pytest.raises(ValueError, match="lo above hi"):
        replace(Checked(1, 2), lo=3)


@pytest.mark.parametrize(
    ("obj", "changes"),
    [(Plain(1), {"d": 1}), (NotInit(1), {"seen": []}), (NeedsInitVar(1, 2), {"a": 3})],
)
def test_errors_are_dataclasses_own(obj: object, changes: dict[str, object]):
    with pytest.raises((TypeError, ValueError)) as got:
        replace(obj, **changes)
    with pytest.raises((TypeError, ValueError)) as want:
        dataclasses.replace(obj, **changes)  # type: ignore[type-var]
    assert (type(got.value), str(got.value)) == (type(want.value), str(want.value))


def test_not_a_dataclass():
    with pytest.raises(TypeError):
        replace(3, a=1)
