"""Shared checks for the strategy tests: what a correct answer means, stated once."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from fusion_dd.testing.simulate import SimulatedOracle, as_outcome


def fails(model: Callable, config: frozenset) -> bool:
    return as_outcome(model(frozenset(config))).value == "fail"


def is_one_minimal_failing(model: Callable, config: frozenset) -> bool:
    """Fails, and removing any single rule does not (the empty set always passes)."""
    if not fails(model, config):
        return False
    return all(not fails(model, config - {rule}) for rule in config if len(config) > 1)


def no_repeats(oracle: SimulatedOracle) -> bool:
    return len(oracle.calls) == len(set(oracle.calls))


def random_predicate(seed: int, universe: frozenset, density: float = 0.5) -> Callable[[frozenset], bool]:
    """An arbitrary, deterministic, non-monotone predicate with the preconditions held.

    Strategies must return a verified answer for *any* oracle, not only for the
    monotone models they are tuned for.
    """

    def predicate(config: frozenset) -> bool:
        if not config:
            return False
        if config == universe:
            return True
        digest = hashlib.sha256(f"{seed}:{sorted(config)}".encode()).digest()
        return digest[0] < 256 * density

    return predicate


def brute_force_minimum(sets) -> int:
    """The size of a minimum hitting set, by trying every subset: an oracle for tiny families."""
    from itertools import combinations

    rules = sorted({rule for group in sets for rule in group}, key=repr)
    for size in range(len(rules) + 1):
        for pick in combinations(rules, size):
            if all(set(group) & set(pick) for group in sets):
                return size
    raise ValueError("an empty set cannot be met")
