"""The schema is read off the sections' dataclasses: fields are keys, internal ones are not, nesting is said."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from fusion_dd.config.schema import INTERNAL, NESTED, dotted_keys, section_keys
from fusion_dd.config.settings import _SCHEMA, TrainConfig


@dataclass(frozen=True)
class _Inner:
    depth: int = 1


@dataclass(frozen=True)
class _Outer:
    name: str = "x"
    worked_out: bool = field(default=False, metadata=INTERNAL)
    inner: _Inner = field(default_factory=_Inner, metadata=NESTED)


def test_fields_are_keys_in_their_order_internal_ones_left_out_nested_ones_nested() -> None:
    assert section_keys(_Outer) == {"name": None, "inner": {"depth": None}}
    assert dotted_keys({"outer": section_keys(_Outer)}) == {"outer.name", "outer.inner.depth"}


def test_a_nested_section_without_a_default_factory_is_a_programming_error() -> None:
    @dataclass(frozen=True)
    class Broken:
        inner: _Inner = field(default=_Inner(), metadata=NESTED)

    with pytest.raises(TypeError, match="default factory"):
        section_keys(Broken)


def test_the_train_section_accepts_what_its_dataclass_holds_but_not_what_parsing_works_out() -> None:
    assert "devices_given" not in _SCHEMA["train"]
    assert set(_SCHEMA["train"]) | {"devices_given"} == {item for item in TrainConfig.__dataclass_fields__}
    assert "partition" in _SCHEMA["train"]["slurm"]
