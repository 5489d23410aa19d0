"""How far a training must run before its loss curve can vouch for a pass.

The references tell, before the search asks anything, when damage becomes
visible: the all-on training's loss leaves the baseline's band at some step.
A configuration whose loss has stayed inside the band for well beyond that step
is very likely healthy, so the search may take it as a pass and stop it there
(a *speculative* pass: the fix is still verified by a full training, see
``fusion_dd.coordinator.engine``). This module computes that step, the *horizon*; it is pure
and has no clock, no files and no processes.

The band is the divergence rule's (``early_stop.divergence`` with ``relative``),
or, when that is not configured, the *pass band*: :data:`DEFAULT_PASS_BAND`
relative to the baseline's loss plus :data:`SCATTER_SIGMAS` times the
baseline's own step-to-step scatter there, with both curves read as the median
of their last :data:`SMOOTHING` reports. A training's per-step loss is noisy (a
minibatch's loss), and a band that ignored it would take a healthy run whose
loss wobbles above the baseline's for a failure, and rule out its early pass
at its first spike. A smooth curve has no scatter, and the median of a
monotone curve's last reports is the previous one, for the baseline and the
training alike. Leaving the band means ``patience`` reports in a row above it,
as for stopping a diverged run, so that one spike of the all-on run does not
set a horizon too early; the horizon counts from the first of those reports.

The horizon is ``factor`` times that step (the damage of another culprit may
show a little later than the all-on run's), at least ``min_fraction`` of the
training (a departure at step 3 says little about step 6), and never beyond
the training's length (the baseline's last step).
"""

from __future__ import annotations

import bisect
import functools
import math
import statistics
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..core.errors import UsageError

#: The band for early passes when ``early_stop.divergence`` is not set: 10% above
#: the baseline's loss at the same step, plus its scatter (``SCATTER_SIGMAS``).
DEFAULT_PASS_BAND = 0.1
#: The pass band widens by this many times the baseline's scatter: the standard deviation
#: of one of its reports around its trend, estimated over ``SCATTER_WINDOW`` points either
#: side (``_scatter``). Two medians of three independent reports differ by about 0.95 of
#: it, so with an exact estimate a healthy run's reading would lie above the band about
#: once in 10^5 reports; with the estimate's own error, 90 to 100 % of healthy runs with
#: 15 % noise per report keep their early pass over 200 reports (tests/runner).
SCATTER_SIGMAS = 4.0
SCATTER_WINDOW = 25
#: The pass band reads each curve as the median of its last this many reports, so that
#: a single spike neither rules out an early pass nor counts toward a failure.
SMOOTHING = 3
#: The horizon is this many times the step at which the all-on run left the band.
DEFAULT_FACTOR = 2.0
#: The horizon is at least this fraction of the training's length.
MIN_FRACTION = 0.2


class Baseline:
    """A baseline curve prepared for "its loss at the nearest earlier step" look-ups.

    Non-finite points are dropped (they are no reference for anything), and for
    a step reported twice the last value counts.
    """

    def __init__(self, curve: Iterable[tuple[int, float]]) -> None:
        by_step: dict[int, float] = {}
        for step, loss in curve:
            if math.isfinite(loss):
                by_step[int(step)] = float(loss)
        self.steps = sorted(by_step)
        self.losses = [by_step[step] for step in self.steps]
        self._pass_band: tuple[list[float], list[float]] | None = None  # (smoothed, scatter), computed once

    def __bool__(self) -> bool:
        return bool(self.steps)

    def top(self, step: int, divergence: float | None, relative: bool) -> tuple[int, float, float] | None:
        """(baseline step, its loss, the band's top) at the nearest earlier or equal step; None before its first.

        With ``divergence`` the band is the user's, over the raw loss; without,
        the pass band (the module's docstring): its loss is the smoothed one.
        """
        index = bisect.bisect_right(self.steps, step) - 1
        if index < 0:
            return None
        if divergence is not None:
            loss = self.losses[index]
            return self.steps[index], loss, loss + band_width(loss, divergence, relative)
        smoothed, scatter = self.pass_band()
        loss = smoothed[index]
        return self.steps[index], loss, loss + band_width(loss, None, relative) + SCATTER_SIGMAS * scatter[index]

    def pass_band(self) -> tuple[list[float], list[float]]:
        """Per point, the loss as the pass band reads it (the median of the last reports) and the scatter."""
        if self._pass_band is None:
            losses, count = self.losses, len(self.losses)
            smoothed = [statistics.median(losses[max(0, i - SMOOTHING + 1) : i + 1]) for i in range(count)]
            self._pass_band = smoothed, _scatter(losses)
        return self._pass_band

    def at(self, step: int) -> tuple[int, float] | None:
        """(baseline step, loss) at the nearest earlier or equal step; None before its first."""
        index = bisect.bisect_right(self.steps, step) - 1
        if index < 0:
            return None
        return self.steps[index], self.losses[index]

    @property
    def last_step(self) -> int | None:
        return self.steps[-1] if self.steps else None


@dataclass(frozen=True)
class PassAt:
    """``early_stop.pass_at``: off, auto (from the references' curves), a step, or a fraction.

    ``step`` is a fixed horizon in steps; ``fraction`` one in parts of the
    training's length (the baseline's last step). Exactly one of ``auto``,
    ``step`` and ``fraction`` is set when the setting is on.
    """

    auto: bool = True
    step: int | None = None
    fraction: float | None = None

    @property
    def off(self) -> bool:
        return not self.auto and self.step is None and self.fraction is None

    def to_json(self) -> str | int | float:
        if self.auto:
            return "auto"
        if self.step is not None:
            return self.step
        if self.fraction is not None:
            return self.fraction
        return "off"

    @classmethod
    def parse(cls, value: Any, where: str = "early_stop.pass_at") -> "PassAt":
        """``auto`` (the default), ``off``/false, a whole number of steps, or a fraction in (0, 1)."""
        if value is None or value == "auto":
            return cls()
        if value is False or value == "off":
            return cls(auto=False)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            return cls(auto=False, step=value)
        if isinstance(value, float) and math.isfinite(value) and 0 < value < 1:
            return cls(auto=False, fraction=value)
        raise UsageError(
            f"{where}: {value!r} is not valid; use auto, off, a step count >= 1, "
            "or a fraction of the training between 0 and 1 (e.g. 0.3)"
        )


def prepared(curve: Baseline | Iterable[tuple[int, float]]) -> Baseline:
    """``curve`` as a :class:`Baseline`, the same one for the same points.

    Every training's monitor judges against the baseline's curve (up to
    ``early_stop.MAX_CURVE_POINTS`` of them), and its pass band's scatter takes tens of
    milliseconds to compute: computed once per curve, not once per training.
    """
    if isinstance(curve, Baseline):
        return curve
    return _prepared(tuple((int(step), float(loss)) for step, loss in curve))


@functools.lru_cache(maxsize=4)
def _prepared(curve: tuple[tuple[int, float], ...]) -> Baseline:
    return Baseline(curve)


def band_width(loss: float, divergence: float | None, relative: bool) -> float:
    """How far above the baseline's ``loss`` a report may lie and still count as inside the band."""
    if divergence is None:
        return DEFAULT_PASS_BAND * abs(loss)
    return divergence * abs(loss) if relative else divergence


def _scatter(losses: list[float]) -> list[float]:
    """Per point, a robust estimate of the standard deviation of one report around the curve's trend.

    From the differences of neighbouring reports (of independent noise they have twice its
    variance), each window's median difference removed (the trend's local slope), as
    1.4826 x their median absolute deviation / sqrt(2): spikes do not inflate it, and a
    smooth curve, whose differences change slowly, has none. A minibatch's loss scatters
    in proportion to its level, which falls fastest at the start, so where the losses are
    positive the differences are of their logarithms, and the estimate is that share of
    the loss at the point.
    """
    count = len(losses)
    if count < 3:
        return [0.0] * count
    positive = all(loss > 0 for loss in losses)
    values = [math.log(loss) for loss in losses] if positive else losses
    differences = [later - earlier for earlier, later in zip(values, values[1:])]
    scatter = []
    for i in range(count):
        window = differences[max(0, i - SCATTER_WINDOW) : min(len(differences), i + SCATTER_WINDOW)]
        slope = statistics.median(window)
        spread = 1.4826 * statistics.median(abs(value - slope) for value in window) / math.sqrt(2.0)
        # The level at the point: a centred median of five, narrowed at the ends.
        level = statistics.median(losses[i - (k := min(2, i, count - 1 - i)) : i + k + 1]) if positive else 1.0
        scatter.append(spread * level)
    return scatter


def narrow_divergence(curve: Iterable[tuple[int, float]], divergence: float | None, relative: bool) -> str | None:
    """Why a divergence band the user set would stop healthy trainings: narrower than the baseline's own scatter.

    A divergence band reads each raw report, so a loss that scatters per report by
    more than about a third of the band's width leaves it for ``patience`` reports in
    a row somewhere in a long training: every training, the healthy ones included,
    is stopped as a real failure, and every rule looks like a culprit. None when
    the band is wide enough, or no divergence is set (the pass band allows for the
    scatter).
    """
    baseline = prepared(curve)
    if divergence is None or len(baseline.steps) < 3:
        return None
    scatter = statistics.median(baseline.pass_band()[1])
    width = statistics.median(band_width(loss, divergence, relative) for loss in baseline.losses)
    if width >= NARROW_BAND_SIGMAS * scatter:
        return None
    level = statistics.median(abs(loss) for loss in baseline.losses)
    share = f" ({scatter / level:.0%} of it)" if level > 0 else ""
    setting = f"{divergence:g}{' relative' if relative else ''}"
    return (
        f"early_stop.divergence {setting} is narrower than the baseline's own scatter: its loss varies by about "
        f"{scatter:.3g} per report{share}, so healthy trainings would be stopped as diverged; widen it to at least "
        f"{NARROW_BAND_SIGMAS * scatter / (level if relative and level > 0 else 1.0):.2g}{' relative' if relative else ''}, "
        "or leave it unset (early verdicts then use the pass band, which allows for the scatter)"
    )


#: A divergence band narrower than this many times the baseline's scatter is said to stop healthy trainings.
NARROW_BAND_SIGMAS = 4.0


class LossReading:
    """A training's loss as the band reads it, one report at a time: with ``smooth`` (the pass band), the
    median of its last :data:`SMOOTHING` reports, as :meth:`Baseline.top` reads the baseline's."""

    def __init__(self, smooth: bool) -> None:
        self._recent: deque[float] | None = deque(maxlen=SMOOTHING) if smooth else None

    def feed(self, loss: float) -> float:
        if self._recent is None:
            return loss
        self._recent.append(loss)
        return statistics.median(self._recent)


def departure(
    baseline: Iterable[tuple[int, float]],
    curve: Iterable[tuple[int, float]],
    *,
    divergence: float | None = None,
    relative: bool = False,
    patience: int = 3,
    start_step: int = 0,
) -> int | None:
    """The first step of the first ``patience`` reports in a row of ``curve`` above the baseline's band.

    None when the curve never leaves the band (the damage shows only in the
    final metric: then the curves set no horizon). A non-finite loss counts as
    outside the band at once. The baseline is read at the nearest earlier step.
    """
    reference = prepared(baseline)
    reading = LossReading(smooth=divergence is None)
    run: list[int] = []
    for step, loss in sorted(curve):
        if step < start_step:
            continue
        if not math.isfinite(loss):
            return run[0] if run else step
        value = reading.feed(loss)
        point = reference.top(step, divergence, relative)
        if point is None:
            continue
        if value > point[2]:
            run.append(step)
            if len(run) >= patience:
                return run[0]
        else:
            run.clear()
    return None


def horizon(
    setting: PassAt,
    length: int | None,
    departed_at: int | None,
    *,
    factor: float = DEFAULT_FACTOR,
    min_fraction: float = MIN_FRACTION,
) -> int | None:
    """The step at which a training still inside the band counts as a (speculative) pass; None: no early passes.

    ``length`` is the training's length in steps (the baseline's last step),
    ``departed_at`` what :func:`departure` found on the all-on curve. A horizon
    at or beyond the length saves nothing and is None.
    """
    if setting.off or length is None or length < 1:
        return None
    if setting.step is not None:
        step = setting.step
    elif setting.fraction is not None:
        step = math.ceil(setting.fraction * length)
    else:
        if departed_at is None:
            return None
        step = max(math.ceil(factor * max(departed_at, 1)), math.ceil(min_fraction * length))
    return step if step < length else None


__all__ = [
    "DEFAULT_FACTOR", "DEFAULT_PASS_BAND", "MIN_FRACTION", "SCATTER_SIGMAS", "SMOOTHING", "Baseline", "LossReading",
    "PassAt", "band_width", "departure", "horizon", "narrow_divergence", "prepared",
]
