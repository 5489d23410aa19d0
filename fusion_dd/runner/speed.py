"""How fast a training trained: the price of a fix in throughput.

Fusion rules exist for speed, so switching one off costs some; the trainings a
search runs have measured it already. Each trial's speed is, in this order:

* the median of ``metric.speed_pattern``'s matches in its output (samples/s,
  tokens/s, whatever the training prints: the first group is the number), read
  by :class:`SpeedHook` when the training ends;
* else its steps per second of wall time (:func:`steps_per_second`: the steps it
  ran over its duration, start-up and compilation included, so a short
  training looks a little slower than it trains).

:func:`compare_speeds` is pure: per configuration, the median speed and how
many trainings stand behind it, and the fix's and the baseline's ratio to all-on.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable, Sequence
from typing import Any

from .metrics import parse_number
from .supervisor import LOG_FILE

#: A log line longer than this is read in pieces; a number is never that long.
MAX_LINE_BYTES = 1 << 20
#: At most this many matches are kept (evenly thinned), so a huge log costs bounded memory.
MAX_SAMPLES = 10000


def steps_per_second(steps: int | None, duration: float | None) -> float | None:
    """Steps over wall time; None when either is unknown or zero."""
    if steps is None or duration is None or steps <= 0 or not (duration > 0 and math.isfinite(duration)):
        return None
    return steps / duration


def speed_from_lines(lines: Iterable[str], pattern: re.Pattern[str]) -> float | None:
    """The median of the finite, positive numbers ``pattern`` captures; None without any."""
    values: list[float] = []
    stride, seen = 1, 0  # beyond MAX_SAMPLES, every other kept value goes and every stride-th match is kept
    for line in lines:
        for match in pattern.finditer(line):
            number = parse_number(match.group(1))
            if number is None or not math.isfinite(number) or number <= 0:
                continue
            seen += 1
            if seen % stride:
                continue
            values.append(number)
            if len(values) >= 2 * MAX_SAMPLES:
                values, stride = values[::2], stride * 2
    return statistics.median(values) if values else None


def _log_lines(path: Any) -> Iterable[str]:
    try:
        handle = open(path, "rb")
    except OSError:
        return
    with handle:
        while line := handle.readline(MAX_LINE_BYTES):
            yield line.decode("utf-8", "replace")


class SpeedHook:
    """Journal a training's speed from its output (an artifact hook, ``fusion_dd.core.hooks``)."""

    name = "speed"

    def __init__(self, pattern: re.Pattern[str]) -> None:
        self.pattern = pattern

    def collect(self, files: Any) -> dict[str, Any]:
        speed = speed_from_lines(_log_lines(files.trial_dir / LOG_FILE), self.pattern)
        return {"per_second": speed} if speed is not None else {}


def _median(values: Sequence[float]) -> dict[str, Any] | None:
    return {"per_second": statistics.median(values), "trainings": len(values)} if values else None


def compare_speeds(
    fix: Sequence[float], all_on: Sequence[float], baseline: Sequence[float], unit: str
) -> dict[str, Any]:
    """The fix's and the baseline's speed against all-on's, with the trainings behind each figure."""
    result: dict[str, Any] = {
        "unit": unit,
        "fix": _median(fix),
        "all_on": _median(all_on),
        "baseline": _median(baseline),
        "fix_vs_all_on": None,
        "baseline_vs_all_on": None,
    }
    reference = result["all_on"]
    if reference is not None:
        for name in ("fix", "baseline"):
            if result[name] is not None:
                result[f"{name}_vs_all_on"] = round(result[name]["per_second"] / reference["per_second"], 3)
    return result


def speed_line(speed: dict[str, Any]) -> str | None:
    """The summary's sentence: "the fix trains at 0.97x the speed of all fusion on; all off is 0.71x"."""
    fix, baseline = speed.get("fix_vs_all_on"), speed.get("baseline_vs_all_on")
    if fix is None:
        return None

    def behind(name: str) -> str:
        count = (speed.get(name) or {}).get("trainings", 0)
        return f"{count} training{'s' if count != 1 else ''}"

    text = (
        f"  speed ({speed['unit']}): the fix trains at {fix:.2f}x the speed of all fusion on "
        f"({behind('fix')} against {behind('all_on')})"
    )
    if baseline is not None:
        text += f"; all off is {baseline:.2f}x ({behind('baseline')})"
    return text


__all__ = ["SpeedHook", "compare_speeds", "speed_from_lines", "speed_line", "steps_per_second"]
