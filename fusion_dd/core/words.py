"""Enums whose members are the bare words fusion-dd's files have always carried."""

from __future__ import annotations

import enum


class Word(str, enum.Enum):
    """A str enum that equals, hashes, prints, formats and serializes as its value.

    Journal records and ``report.json`` hold plain words (``"found"``, ``"trial_started"``);
    code names them through an enum so that a misspelt one cannot be written, while every
    file of an earlier version still reads the same."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


__all__ = ["Word"]
