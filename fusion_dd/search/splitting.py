"""Group testing for independent culprits: Hwang's generalized binary splitting, on prefixes.

Once a search has found one culprit and the fix candidate still fails, more
culprits remain. A prefix bisection per culprit, then a fix candidate per
culprit, costs about log2(m) + 2 trainings each, m the rules left. Hwang's
generalized binary splitting does better for independent culprits: test
groups sized to hold about one culprit each, discard a passing group whole,
halve a failing one until a single rule is left, whose test alone is its proof
(a single rule that fails is a 1-minimal failing set: the empty configuration
passes). d culprits among m rules then cost about d * (log2(m / d) + 1)
trainings, and the fix candidate is asked once, when the rules left probably
hold no culprit.

The groups are tested as *prefixes* of the fix candidate: the rules already
shown clean (a passing prefix) stay on with the group. For independent
culprits that is the same question as the group alone (the clean rules cannot
fail), and it keeps interactions visible: a set whose rules lie in two groups
fails as soon as the prefix reaches its last rule. When the rule a failing
prefix narrows down to passes alone, it fails only together with earlier rules:
the phase ends and hands that prefix (known to fail) to the interaction-aware
strategy. A prefix that reaches the end of the candidate is the fix candidate
itself, so the fix is verified by the phase's last question.

The number of culprits left is unknown, so it is estimated from the density
seen so far: ``found`` culprits among the ``examined`` rules with a known
verdict, scaled to the rules left, and at least one while the last prefix
asked is known to fail. Groups are 2^a rules, a = floor(log2((m - d + 1) / d)),
Hwang's choice for a known d; below ``threshold`` culprits expected, the group
is everything left (the fix candidate).

With P devices a round asks P prefixes (a (P+1)-ary search); once one round can
settle a failing segment, it also asks each of its rules alone, so the proof
shares the round.

Pure and deterministic: what is asked depends only on the answers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from fusion_dd.search.lanes import SPECULATION_WIDTH

T = TypeVar("T", bound=Hashable)

Ask = Callable[[Sequence[frozenset]], "list[bool]"]  # configurations -> fails?


@dataclass
class Split(Generic[T]):
    """What one splitting phase established.

    ``culprits``: rules proven to fail alone, in the order found.
    ``fix_passes``: the whole candidate (every culprit off) passed.
    ``failing``: otherwise, a configuration known to fail that needs the
    interaction-aware strategy (a failing prefix whose last rule passes alone).
    """

    culprits: list[T] = field(default_factory=list)
    fix_passes: bool = False
    failing: frozenset[T] | None = None


def expected_left(found: int, examined: int, left: int, more_known: bool) -> float:
    """How many culprits the ``left`` rules probably hold: the density seen so far, scaled.

    ``more_known``: a prefix reaching into them failed, so at least one is there.
    The density is damped by a fifth of all the rules: a culprit found early
    says little about how dense the rest is, and groups too small cost a
    training each where groups too large cost one halving step per doubling.
    Only when every rule examined was a culprit (the first rule failed alone,
    and so did each next one) is the rest taken to be as dense: its rules are
    then asked alone.
    """
    if left == 0:
        return 0.0
    if found and examined == found:
        return float(left)
    guess = found * left / (examined + (examined + left) / 5)
    return min(float(left), max(guess, 1.0) if more_known else guess)


def group_size(left: int, culprits: float) -> int:
    """Hwang's group size for ``culprits`` among ``left`` rules: 2^floor(log2((m - d + 1) / d))."""
    if culprits <= 0:
        return left
    ratio = (left - culprits + 1) / culprits
    if ratio < 2:
        return 1
    return min(left, 2 ** int(math.floor(math.log2(ratio))))


def _cuts(lo: int, hi: int, count: int) -> list[int]:
    """Up to ``count`` cut points strictly inside (lo, hi), as even as possible."""
    width = hi - lo
    count = min(count, width - 1)
    points = {lo + (width * i + (count + 1) // 2) // (count + 1) for i in range(1, count + 1)}
    return sorted(p for p in points if lo < p < hi)


def split(
    rules: Sequence[T],
    clean: int,
    ask: Ask,
    on_culprit: Callable[[T, bool], None],
    *,
    found: int,
    width: Callable[[], int] = lambda: 1,
    announce: Callable[[frozenset[T]], None] = lambda config: None,
    threshold: float = 1.5,
    ride: Callable[[Sequence[frozenset[T]]], None] = lambda configs: None,
    repeats: bool = False,
) -> Split[T]:
    """Find the independent culprits among ``rules`` (the failing fix candidate, in order) by prefixes.

    ``rules[:clean]`` is known to pass; the whole of ``rules`` to fail.
    ``ask`` answers a batch of configurations (True: fails), one round on the
    devices; ``on_culprit`` is told each culprit once it is proven (the caller
    switches it off), and whether it was asked alone only (dense culprits: no
    prefix around it shows that it matters). ``found``: culprits found before (the density estimate's
    start). ``width``: devices, read each round. ``announce`` is told the fix
    candidate (the whole of what is left on) before it is asked or trained on a guess.

    ``ride`` is handed, right before a question, what will probably be asked
    after it, to train on the devices it leaves idle (``fusion_dd.search.oracle.prefetch``;
    from ``SPECULATION_WIDTH`` devices on): beside the fix candidate its repeat
    when ``repeats`` (a passing fix is trained twice), and beside the rules of a
    segment asked alone, for each of them in order, the round that follows if
    it is the culprit. Guesses change no question; an unused one costs a training.
    """
    order = list(rules)
    result: Split[T] = Split()
    known_fail = len(order)  # the shortest prefix known to fail
    examined = clean + found
    lo = clean
    passed_alone: set[T] = set()  # asked alone and passed (dense culprits); a prefix still covers them
    while True:
        left = len(order) - lo
        if left == 0:
            result.fix_passes = True  # the whole candidate is a passing prefix
            return result
        devices = max(1, width())
        batch, ends = _wave(order, lo, known_fail, found, examined, devices, passed_alone, threshold)
        if batch:
            # Culprits this dense are asked alone, P at a time: each that fails is found and proven
            # by its one training; the first that passes alone is then covered by a prefix.
            answers = ask([frozenset({rule}) for rule in batch])
            for rule, fails in zip(batch, answers):
                if fails:
                    result.culprits.append(rule)
                    on_culprit(rule, True)
                    order.remove(rule)
                    found += 1
                    examined += 1
                else:
                    passed_alone.add(rule)
            known_fail = len(order) + 1
            continue
        riders = ride if devices >= SPECULATION_WIDTH and repeats else None
        answers = _ask_prefixes(order, ends, ask, announce, known_fail, riders)
        hit = next((end for end, fails in zip(ends, answers) if fails), None)
        below = [end for end, fails in zip(ends, answers) if not fails and (hit is None or end < hit)]
        if below:
            examined += max(below) - lo
            lo = max(below)
        if hit is None:
            if lo == len(order):
                result.fix_passes = True
                return result
            continue

        def ahead(
            hypotheses: Sequence[tuple[int, int]], devices: int, found: int = found, examined: int = examined
        ) -> None:
            if devices >= SPECULATION_WIDTH:
                state = (found, examined, devices, passed_alone, threshold)
                ride(_guesses(order, hypotheses, state, announce, repeats))

        culprit, lo, failing = _boundary(order, lo, hit, ask, width, ahead)
        if culprit is None:
            result.failing = failing
            return result
        result.culprits.append(culprit)
        on_culprit(culprit, False)
        order.remove(culprit)  # off from now on; rules[:lo] (before it) passed without it
        examined += 1
        found += 1
        known_fail = len(order) + 1


def _wave(
    order: list[T],
    lo: int,
    known_fail: int,
    found: int,
    examined: int,
    devices: int,
    passed_alone: set[T],
    threshold: float,
) -> tuple[list[T], list[int]]:
    """The next round of ``split``: rules to ask alone (dense culprits), else the prefix ends to ask."""
    left = len(order) - lo
    more = known_fail <= len(order) and known_fail > lo
    expected = expected_left(found, examined, left, more)
    size = left if expected < threshold else group_size(left, expected)
    if size == 1 and left > 1 and order[lo] not in passed_alone:
        return [rule for rule in order[lo : lo + devices] if rule not in passed_alone], []
    size = max(size, 2) if size == 1 else size
    ends = sorted({min(len(order), lo + size * (i + 1)) for i in range(devices)})
    return [], [end for end in ends if end < known_fail] or [known_fail]


def first_wave(
    rules: Sequence[T], clean: int, *, found: int, devices: int, threshold: float = 1.5
) -> list[frozenset[T]]:
    """The configurations ``split`` asks first, with these arguments, on ``devices`` devices.

    A caller that may start a splitting phase after its next question (when a
    fix candidate fails) can have them trained beside that question
    (``fusion_dd.search.oracle.prefetch``): the phase's first round is then saved.
    """
    order = list(rules)
    if clean >= len(order):
        return []
    devices = max(1, devices)
    batch, ends = _wave(order, clean, len(order), found, clean + found, devices, set(), threshold)
    if batch:
        return [frozenset({rule}) for rule in batch]
    if ends == [len(order)]:  # the whole candidate, known to fail: its boundary is searched at once
        if len(order) - clean == 2 and devices == 1:
            return [frozenset({order[clean]})]
        cuts, singles = _segment(clean, len(order), devices)
        return [frozenset(order[:c]) for c in cuts] + [frozenset({order[i]}) for i in singles]
    return [frozenset(order[:end]) for end in ends if end != len(order)]


def _guesses(
    order: list[T],
    hypotheses: Sequence[tuple[int, int]],
    state: tuple[int, int, int, set[T], float],
    announce: Callable[[frozenset[T]], None],
    repeats: bool,
) -> list[frozenset[T]]:
    """Beside rules asked alone: for each (its index, the clean length it would leave), in
    order, the round ``split`` asks next if it is the culprit; a fix candidate twice when
    ``repeats`` (its repeat too). ``state``: found, examined, devices, passed alone, threshold."""
    configs: list[frozenset[T]] = []
    for index, clean in hypotheses:
        for config in _following(order, index, clean, state, announce):
            if config not in configs:
                configs.append(config)
                if repeats and len(config) == len(order) - 1:
                    configs.append(config)
    return configs


def _following(
    order: list[T],
    index: int,
    clean: int,
    state: tuple[int, int, int, set[T], float],
    announce: Callable[[frozenset[T]], None],
) -> list[frozenset[T]]:
    """What ``split`` asks right after finding ``order[index]`` a culprit with ``order[:clean]`` passing."""
    found, examined, devices, passed_alone, threshold = state
    rest = order[:index] + order[index + 1 :]
    if clean >= len(rest):
        return []
    batch, ends = _wave(rest, clean, len(rest) + 1, found + 1, examined + 1, devices, passed_alone, threshold)
    if batch:
        return [frozenset({rule}) for rule in batch]
    if len(rest) in ends:
        announce(frozenset(rest))  # a fix candidate, trained on a guess: the engine is told first
    return [frozenset(rest[:end]) for end in ends]


def _ask_prefixes(
    order: list[T],
    ends: list[int],
    ask: Ask,
    announce: Callable[[frozenset[T]], None],
    known_fail: int,
    ride: Callable[[Sequence[frozenset[T]]], None] | None = None,
) -> list[bool]:
    """Ask each prefix ``order[:end]``; a prefix already known to fail is not asked.

    ``ride``: told the fix candidate twice (its repeat rides along) when the prefixes include it.
    """
    configs = [frozenset(order[:end]) for end in ends if end != known_fail]
    if any(end == len(order) for end in ends if end != known_fail):
        announce(frozenset(order))
        if ride is not None:
            ride([frozenset(order), frozenset(order)])
    answers = iter(ask(configs) if configs else [])
    return [True if end == known_fail else next(answers) for end in ends]


def _segment(lo: int, hi: int, devices: int) -> tuple[list[int], list[int]]:
    """One round of ``_boundary`` over (lo, hi]: the prefix ends to ask, and the rules to ask alone.

    Once one round can settle the segment, it asks each rule alone too (the proof).
    """
    size = hi - lo
    if 2 * size - 1 <= devices or size == 1:
        return list(range(lo + 1, hi)), list(range(lo, hi))
    if size <= devices and devices >= SPECULATION_WIDTH:
        # Every rule alone fits, not every cut beside: the rules alone settle it (in rule
        # order the first that fails is a culprit), the cuts that fit only narrow an
        # interaction down, should none fail alone. One round instead of two; from three
        # devices on, as the guesses: on one or two the questions stay as they were.
        return _cuts(lo, hi, devices - size), list(range(lo, hi))
    return _cuts(lo, hi, devices), []


def _boundary(
    order: list[T],
    lo: int,
    hi: int,
    ask: Ask,
    width: Callable[[], int],
    ahead: Callable[[Sequence[tuple[int, int]], int], None] = lambda hypotheses, devices: None,
) -> tuple[T | None, int, frozenset[T] | None]:
    """The rule where prefixes start failing, in (lo, hi]: (culprit, new clean length, or what to minimize).

    ``order[:lo]`` passes, ``order[:hi]`` fails. Once one round settles the
    segment, the same round asks each of its rules alone (the proof); ``ahead``
    is told, just before, each rule's index and the clean length it would leave
    as the culprit, and the devices.
    """
    while True:
        devices = max(1, width())
        size = hi - lo
        if size == 2 and devices == 1:
            # Two rules left: the first one alone is the likelier proof (it fails: done in one);
            # if it passes, the second alone (it fails: done, as a prefix and a proof would be).
            first, second = order[lo], order[lo + 1]
            if ask([frozenset({first})])[0]:
                return first, lo, None
            if ask([frozenset({second})])[0]:
                return second, lo, None  # order[:lo + 1] is not known to pass: start again at lo
            return None, lo, frozenset(order[:hi])  # neither fails alone: an interaction in order[:hi]
        cuts, singles = _segment(lo, hi, devices)
        configs = [frozenset(order[:c]) for c in cuts] + [frozenset({order[i]}) for i in singles]
        exact = len(cuts) == size - 1
        if singles:
            # The culprit is the first rule that fails alone; every cut up to it passes.
            ahead([(i, i if exact else max((c for c in cuts if c <= i), default=lo)) for i in singles], devices)
        answers = ask(configs) if configs else []
        cut_answers = answers[: len(cuts)]
        first = next((c for c, fails in zip(cuts, cut_answers) if fails), None)
        passing = [c for c, fails in zip(cuts, cut_answers) if not fails and (first is None or c < first)]
        new_hi = first if first is not None else hi
        new_lo = max(passing, default=lo)
        if singles and exact:
            rule_at = new_hi - 1  # order[:new_hi] fails, order[:new_hi - 1] passes
            alone = dict(zip(singles, answers[len(cuts) :]))
            if alone.get(rule_at):
                return order[rule_at], rule_at, None
            return None, rule_at, frozenset(order[:new_hi])
        if singles:
            failing = [i for i, fails in zip(singles, answers[len(cuts) :]) if fails]
            if failing:  # order[:clean] passed and does not hold it: the next prefixes start there
                clean = max((c for c in passing if c <= failing[0]), default=lo)
                return order[failing[0]], clean, None
            return None, new_lo, frozenset(order[:new_hi])
        lo, hi = new_lo, new_hi
