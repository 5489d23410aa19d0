"""How many configurations a strategy may ask at once: a number, or a plan that replays.

A strategy sizes each batch of questions by the number of devices (bisect asks
P prefixes per round, the all-culprits layer asks up to P rules alone). So the
questions of a search depend on the device count as well as on the answers, and
a search resumed with a different ``--devices`` would ask different questions
than the interrupted session did: the cache then misses and finished trainings
are wasted. Resume must be exact replay, so the device count each question was
asked with is an input of the search like its answers, and is journaled.

``Lanes`` is that input as the strategies see it: ``width()`` is the parallelism
for the next question. A plain ``int`` is the fixed width that tests and
benchmarks use. The engine passes a ``LanePlan``: the widths the journal holds
for the questions asked before (replayed exactly), then the devices in service
now for every question never asked (so devices added on resume speed up only
the questions not asked yet).

Pure: the plan is told the current width and writes nothing itself; the engine
journals each new entry through ``on_new`` before the question is asked.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Union


class LanePlan:
    """Parallelism per question: replayed from ``recorded``, then ``current()`` (recorded via ``on_new``).

    The oracle calls ``advance()`` once per question, after the strategy built
    it with ``width()``. ``width()`` may be called any number of times before
    that and gives the same value each time, even if the device count changes
    in between (a device retired during a training of the previous question).

    ``opening``: the width of the first question when no session asked it yet,
    instead of ``current()``: the first question that trains beside the
    references gets the devices they leave idle (``fusion_dd.search.first_question``).
    """

    def __init__(
        self,
        current: Callable[[], int],
        recorded: Sequence[int] = (),
        on_new: Callable[[int, int], None] | None = None,
        opening: int | None = None,
    ) -> None:
        self._current = current
        self._recorded = list(recorded)
        self._on_new = on_new
        self._opening = opening
        self._next = 0  # index of the next question
        self._frozen: int | None = None  # width promised for the next, not yet recorded, question

    @property
    def asked(self) -> int:
        """Questions asked so far in this session (replayed ones included)."""
        return self._next

    @property
    def replaying(self) -> bool:
        """Whether the next question was asked by an earlier session."""
        return self._next < len(self._recorded)

    @property
    def opening(self) -> bool:
        """Whether the next question is the opening one, asked beside the references.

        Its devices would sit idle through the references' round otherwise, so a
        strategy asks as many configurations as it has devices for (``eager``).
        """
        return self._next == 0 and self._opening is not None

    def width(self) -> int:
        if self._next < len(self._recorded):
            return self._recorded[self._next]
        if self._frozen is None:
            wanted = self._opening if self.opening else self._current()
            self._frozen = max(1, int(wanted))
        return self._frozen

    def advance(self) -> int:
        """The next question is being asked: its width, recorded first when it is new."""
        width = self.width()
        if self._next >= len(self._recorded):
            if self._on_new is not None:
                self._on_new(self._next, width)
            self._recorded.append(width)
            self._frozen = None
        self._next += 1
        return width


Lanes = Union[int, LanePlan]


def width_of(lanes: Lanes) -> int:
    """The parallelism for the next question."""
    if isinstance(lanes, LanePlan):
        return lanes.width()
    if lanes < 1:
        raise ValueError(f"parallelism must be at least 1, got {lanes}")
    return lanes


def eager(lanes: Lanes) -> bool:
    """Whether the next question should fill its width rather than ask the fewest configurations that
    finish in as few rounds: the opening question, beside the references (``LanePlan.opening``)."""
    return isinstance(lanes, LanePlan) and lanes.opening


#: The fewest devices on which a search trains what it will probably ask next beside a question.
SPECULATION_WIDTH = 3


def speculates(lanes: Lanes) -> bool:
    """Whether the next question's idle devices train guesses at what comes after it.

    A guess that is right saves a round; a wrong one costs a training. On two
    devices a round is two trainings, so a wrong guess costs half a round of
    accelerator time, and a search run on so few devices is one where that
    time is scarce: there, as on one device, the searches train only what they
    know they need. From three devices on, idle devices train guesses
    (``fusion_dd.search.oracle.prefetch``).
    """
    return width_of(lanes) >= SPECULATION_WIDTH
