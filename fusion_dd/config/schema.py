"""The keys a ``fusion-dd.yaml`` may hold, derived from the dataclasses that carry their values.

Why derived: a key is accepted (and suggested on a typo, and checked against
the configuration reference by a test) exactly when the dataclass of its
section has a field for it. A second hand-written list of keys drifts: a
section missing from it is read without its keys being checked, so a
misspelled key there is silently ignored and its default used instead.

A field that is not written by users (worked out while parsing) says so with
``metadata=INTERNAL``; a field whose value is a section of its own (``train.slurm``)
says so with ``metadata=NESTED``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

#: Field metadata: the value is not a key of the file (set while parsing).
INTERNAL: Mapping[str, Any] = {"key": False}
#: Field metadata: the value is a section of its own, read from a nested mapping.
NESTED: Mapping[str, Any] = {"nested": True}


def section_keys(section: type) -> dict[str, Any]:
    """``{key: None | nested keys}`` for a section's dataclass, in the order of its fields.

    The nested keys of a ``NESTED`` field come from the dataclass its default
    factory makes, so no type annotation has to be evaluated.
    """
    keys: dict[str, Any] = {}
    for item in dataclasses.fields(section):
        if not item.metadata.get("key", True):
            continue
        if item.metadata.get("nested"):
            factory = item.default_factory
            if factory is dataclasses.MISSING:
                raise TypeError(f"{section.__name__}.{item.name}: a nested section needs a default factory")
            keys[item.name] = section_keys(type(factory()))
        else:
            keys[item.name] = None
    return keys


def dotted_keys(schema: Mapping[str, Any], prefix: str = "") -> set[str]:
    """Every key of ``schema`` as it is written in the reference (``train.slurm.partition``)."""
    keys: set[str] = set()
    for name, sub in schema.items():
        if sub is None:
            keys.add(prefix + name)
        else:
            keys |= dotted_keys(sub, f"{prefix}{name}.")
    return keys
