"""The verdict on one configuration: the word every layer shares, from the pure search up to the
report, so it lives below all of them."""

from __future__ import annotations

import enum


class Outcome(str, enum.Enum):
    """The verdict on one configuration.

    UNRESOLVED (crash, timeout, no metric) is treated like PASS by the strategies,
    as Zeller and Hildebrandt define ddmin.
    """

    PASS = "pass"
    FAIL = "fail"
    UNRESOLVED = "unresolved"
