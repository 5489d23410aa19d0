"""A small SVG toolkit for the HTML report: scales, nice ticks, axes, legends, text.

The report's plots used to be matplotlib figures; importing matplotlib and
drawing cost one to two seconds of CPU at the end of every search, a third of
the wall time of a search of instant trainings. The plots are a handful of
bars, markers and lines, so they are written here as SVG text directly: a few
milliseconds, no dependency, and the same output for the same numbers
(deterministic coordinates, no random ids), which keeps the page diffable.

Everything here is pure string building. Text always goes through :func:`esc`
(rule names may hold ``<``, ``&`` or quotes); numbers through :func:`num`
(two decimals at most: a hundredth of a pixel).
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

FONT = "system-ui, -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif"
TICK_FONT_SIZE = 10
LABEL_FONT_SIZE = 11
AXIS_COLOR = "#333333"
GRID_COLOR = "#e6e6e6"
HATCH_ID = "fdd-hatch"  # the one hatch pattern of a page (ids are global to an HTML document)


def esc(text: object) -> str:
    """Text and attribute values, escaped for SVG inside HTML (``<``, ``&``, both quotes)."""
    return html.escape(str(text), quote=True)


def num(value: float) -> str:
    """A coordinate as short text: at most two decimals, no ``-0``, no trailing zeros."""
    text = f"{value:.2f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


# -- ticks ------------------------------------------------------------------------------


def nice_step(raw: float) -> float:
    """The 1, 2 or 5 times a power of ten nearest to a raw step (Heckbert's nice numbers)."""
    if not math.isfinite(raw) or raw <= 0:
        return 1.0
    exponent = math.floor(math.log10(raw))
    fraction = raw / 10**exponent
    nice = 1.0 if fraction < 1.5 else 2.0 if fraction < 3.0 else 5.0 if fraction < 7.0 else 10.0
    return nice * 10**exponent


def _decimals(step: float) -> int:
    return max(0, -math.floor(math.log10(step) + 1e-9)) if step > 0 else 0


def nice_ticks(low: float, high: float, target: int = 6) -> list[float]:
    """Round tick values inside [low, high], about ``target`` of them, a nice step apart."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return []
    if high < low:
        low, high = high, low
    if high == low:
        return [low]
    step = nice_step((high - low) / max(1, target - 1))
    first = math.ceil(low / step - 1e-9)
    last = math.floor(high / step + 1e-9)
    digits = _decimals(step) + 1
    return [round(index * step, digits) + 0.0 for index in range(first, last + 1)]


def tick_label(value: float, step: float) -> str:
    """A tick's label with as many decimals as its step needs (``0.05`` -> two)."""
    if value == 0:
        return "0"
    if abs(value) >= 1e6 or (step > 0 and step < 1e-4):
        return f"{value:g}"
    return f"{value:.{_decimals(step)}f}"


def log_ticks(low: float, high: float) -> tuple[list[float], list[float]]:
    """Major and minor ticks of a log axis over [low, high] (both > 0).

    Majors are the powers of ten inside the range (every k-th of them when the
    range spans many decades); when fewer than two fall inside, 2 and 5 times
    the powers join them, and within less than a decade the ticks are linear
    nice ticks. Minors are 2..9 times each power of ten inside the range.
    """
    if not (low > 0 and high > 0 and math.isfinite(low) and math.isfinite(high)):
        return [], []
    if high < low:
        low, high = high, low
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    inside = [10.0**e for e in range(first, last + 1) if low * (1 - 1e-9) <= 10.0**e <= high * (1 + 1e-9)]
    minor = [m * 10.0**e for e in range(first, last + 1) for m in range(2, 10) if low <= m * 10.0**e <= high]
    if len(inside) > 8:
        stride = math.ceil(len(inside) / 8)
        inside = inside[::stride]
    if len(inside) >= 2:
        return inside, minor
    mixed = sorted(
        m * 10.0**e for e in range(first, last + 1) for m in (1, 2, 5) if low * (1 - 1e-9) <= m * 10.0**e <= high * (1 + 1e-9)
    )
    if len(mixed) >= 2:
        return mixed, [value for value in minor if value not in mixed]
    return nice_ticks(low, high, 5), []


def padded(low: float, high: float, fraction: float = 0.05) -> tuple[float, float]:
    """A domain around [low, high] with a margin on both sides (never empty)."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return 0.0, 1.0
    if high < low:
        low, high = high, low
    if high == low:
        half = abs(low) * 0.1 or 0.5
        return low - half, high + half
    margin = (high - low) * fraction
    return low - margin, high + margin


# -- scales -----------------------------------------------------------------------------


class Linear:
    """A linear map from a domain of values to a range of pixels."""

    log = False

    def __init__(self, low: float, high: float, *, integer: bool = False) -> None:
        if not high > low:
            low, high = padded(low, high)
        self.low, self.high = low, high
        self.integer = integer  # counts (trials, rules): no tick between whole numbers
        self.place(0.0, 1.0)

    def place(self, start: float, end: float) -> None:
        """The pixel range: ``start`` for ``low``, ``end`` for ``high`` (y axes: bottom to top)."""
        self.start, self.end = start, end
        self._k = (end - start) / (self._t(self.high) - self._t(self.low))

    def _t(self, value: float) -> float:
        return value

    def __call__(self, value: float) -> float:
        return self.start + (self._t(value) - self._t(self.low)) * self._k

    def ticks(self, target: int = 6) -> tuple[list[tuple[float, str]], list[float]]:
        """Labelled major ticks and unlabelled minor ticks."""
        values = nice_ticks(self.low, self.high, target)
        if self.integer:
            values = [value for value in values if value == int(value)]
        step = values[1] - values[0] if len(values) > 1 else abs(values[0]) if values else 1.0
        return [(value, tick_label(value, step)) for value in values], []


class Log(Linear):
    """A log10 map (every value must be > 0)."""

    log = True

    def __init__(self, low: float, high: float) -> None:
        if not high > low:
            low, high = low / 2, high * 2
        self.low, self.high = low, high
        self.integer = False
        self.place(0.0, 1.0)

    def _t(self, value: float) -> float:
        return math.log10(value)

    def ticks(self, target: int = 6) -> tuple[list[tuple[float, str]], list[float]]:
        major, minor = log_ticks(self.low, self.high)
        return [(value, f"{value:g}") for value in major], minor


def log_padded(low: float, high: float, fraction: float = 0.05) -> tuple[float, float]:
    """A log domain around [low, high] (both > 0), the margin taken in decades."""
    a, b = padded(math.log10(low), math.log10(high), fraction)
    return 10.0**a, 10.0**b


# -- text and shapes --------------------------------------------------------------------


def text_width(text: str, size: float = TICK_FONT_SIZE) -> float:
    """An estimate of a text's width in pixels (no font metrics without a browser)."""
    return 0.6 * size * len(text)


def text(x: float, y: float, content: object, *, size: float = TICK_FONT_SIZE, anchor: str = "start",
         color: str = AXIS_COLOR, rotate: bool = False, baseline: str = "middle", weight: str | None = None) -> str:
    """One text element; ``rotate`` turns it to read bottom to top (y axis labels)."""
    where = f'transform="translate({num(x)},{num(y)}) rotate(-90)"' if rotate else f'x="{num(x)}" y="{num(y)}"'
    bold = f' font-weight="{weight}"' if weight else ""
    return (f'<text {where} font-size="{num(size)}" text-anchor="{anchor}" dominant-baseline="{baseline}" '
            f'fill="{color}"{bold}>{esc(content)}</text>')


def line(x1: float, y1: float, x2: float, y2: float, color: str, width: float = 1.0, dash: str | None = None) -> str:
    dashing = f' stroke-dasharray="{dash}"' if dash else ""
    return (f'<line x1="{num(x1)}" y1="{num(y1)}" x2="{num(x2)}" y2="{num(y2)}" stroke="{color}" '
            f'stroke-width="{num(width)}"{dashing}/>')


def polyline_path(points: Iterable[tuple[float, float]]) -> str:
    """``M x y L x y ...``, one ``L`` per point after the first (the report's tests count them)."""
    parts: list[str] = []
    for x, y in points:
        parts.append(f"{'L' if parts else 'M'} {num(x)} {num(y)}")
    return " ".join(parts)


def circle_path(x: float, y: float, r: float) -> str:
    """A circle as a path segment, so that many markers make one element."""
    return f"M{num(x - r)} {num(y)}a{num(r)} {num(r)} 0 1 0 {num(2 * r)} 0a{num(r)} {num(r)} 0 1 0 {num(-2 * r)} 0z"


def dot_path(x: float, y: float) -> str:
    """A marker as an empty path segment: stroked with round caps it is a dot of the stroke's width.

    A fifth of the text of :func:`circle_path`, for the thousands of markers of a large search.
    """
    return f"M{num(x)} {num(y)}h0"


def cross_path(x: float, y: float, r: float) -> str:
    """An ``x`` marker as a path segment (stroked, not filled)."""
    return (f"M{num(x - r)} {num(y - r)}L{num(x + r)} {num(y + r)}"
            f"M{num(x - r)} {num(y + r)}L{num(x + r)} {num(y - r)}")


def hatch_pattern() -> str:
    """The diagonal hatch that marks trainings stopped early (used as ``fill="url(#fdd-hatch)"``)."""
    return (f'<pattern id="{HATCH_ID}" width="6" height="6" patternUnits="userSpaceOnUse" '
            'patternTransform="rotate(45)"><line x1="0" y1="0" x2="0" y2="6" stroke="#000000" '
            'stroke-opacity="0.5" stroke-width="1.6"/></pattern>')


# -- legends ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """One legend row: a swatch of the given kind and its label."""

    label: str
    color: str
    kind: str = "box"  # box | line | marker | cross | band
    dash: str | None = None
    hatch: bool = False
    edge: str | None = None


LEGEND_ROW = 16


def legend_width(entries: Sequence[Entry]) -> float:
    return 30 + max((text_width(entry.label, TICK_FONT_SIZE) for entry in entries), default=0.0)


def legend(x: float, y: float, entries: Sequence[Entry]) -> str:
    """The legend's rows from (x, y) downwards, swatch then label."""
    parts: list[str] = []
    for row, entry in enumerate(entries):
        middle = y + row * LEGEND_ROW + LEGEND_ROW / 2
        if entry.kind == "line":
            parts.append(line(x, middle, x + 22, middle, entry.color, 1.6, entry.dash))
        elif entry.kind == "marker":
            parts.append(f'<circle cx="{num(x + 11)}" cy="{num(middle)}" r="4" fill="{entry.color}"/>')
        elif entry.kind == "cross":
            parts.append(f'<path d="{cross_path(x + 11, middle, 4)}" stroke="{entry.color}" stroke-width="1.6" fill="none"/>')
        else:
            opacity = ' fill-opacity="0.25"' if entry.kind == "band" else ""
            edge = f' stroke="{entry.edge}" stroke-width="1.6"' if entry.edge else ""
            parts.append(f'<rect x="{num(x)}" y="{num(middle - 5)}" width="22" height="10" fill="{entry.color}"{opacity}{edge}/>')
            if entry.hatch:
                parts.append(f'<rect x="{num(x)}" y="{num(middle - 5)}" width="22" height="10" fill="url(#{HATCH_ID})"/>')
        parts.append(text(x + 28, middle, entry.label))
    return "".join(parts)


# -- a chart ------------------------------------------------------------------------------


@dataclass
class Box:
    """The plot area of an axes, in pixels: left, top, right, bottom."""

    left: float
    top: float
    right: float
    bottom: float


def axes(box: Box, x: Linear | None, y: Linear | None, *, xlabel: str = "", ylabel: str = "",
         categories: Sequence[tuple[float, str]] = (), grid: bool = True, xticks_target: int = 8,
         xcategories: Sequence[tuple[float, str]] = (), title: str = "", ylabel_x: float = 14) -> str:
    """The frame of an axes, its ticks, tick labels, grid lines and axis labels.

    ``categories`` replaces the y ticks by labelled rows (pixel y, label);
    ``xcategories`` the x ticks by labelled columns (pixel x, label).
    """
    parts: list[str] = []
    if y is not None and not categories:
        major, minor = y.ticks(6)
        for value, label in major:
            py = y(value)
            if grid:
                parts.append(line(box.left, py, box.right, py, GRID_COLOR))
            parts.append(line(box.left - 4, py, box.left, py, AXIS_COLOR))
            parts.append(text(box.left - 6, py, label, anchor="end"))
        for value in minor:
            py = y(value)
            parts.append(line(box.left - 2, py, box.left, py, AXIS_COLOR, 0.6))
    for py, label in categories:
        parts.append(line(box.left - 4, py, box.left, py, AXIS_COLOR))
        parts.append(text(box.left - 6, py, label, anchor="end"))
    if x is not None and not xcategories:
        major, _ = x.ticks(xticks_target)
        for value, label in major:
            px = x(value)
            parts.append(line(px, box.bottom, px, box.bottom + 4, AXIS_COLOR))
            parts.append(text(px, box.bottom + 14, label, anchor="middle"))
    for px, label in xcategories:
        parts.append(line(px, box.bottom, px, box.bottom + 4, AXIS_COLOR))
        parts.append(text(px, box.bottom + 14, label, anchor="middle"))
    parts.append(f'<rect x="{num(box.left)}" y="{num(box.top)}" width="{num(box.right - box.left)}" '
                 f'height="{num(box.bottom - box.top)}" fill="none" stroke="{AXIS_COLOR}" stroke-width="0.8"/>')
    if xlabel:
        parts.append(text((box.left + box.right) / 2, box.bottom + 32, xlabel, size=LABEL_FONT_SIZE, anchor="middle"))
    if ylabel:
        parts.append(text(ylabel_x, (box.top + box.bottom) / 2, ylabel, size=LABEL_FONT_SIZE, anchor="middle",
                          rotate=True))
    if title:
        parts.append(text((box.left + box.right) / 2, box.top - 10, title, size=LABEL_FONT_SIZE, anchor="middle"))
    return "".join(parts)


def layout(width: float, plot_height: float, *, y_labels: Iterable[str], ylabel: bool, entries: Sequence[Entry],
           top: float = 12, legend_max: float = 320) -> tuple[Box, tuple[float, float], float]:
    """Place one axes and its legend: the plot box, where the legend starts, the figure's height.

    The legend goes right of the plot when its labels are short, below it when
    they are long (loss curves named after rule sets), so the plot keeps its width.
    """
    left = (30 if ylabel else 8) + max((text_width(label) for label in y_labels), default=0.0) + 10
    wide = legend_width(entries) if entries else 0.0
    side = bool(entries) and wide <= legend_max
    right = width - (wide + 24 if side else 16)
    box = Box(left, top, right, top + plot_height)
    below = 44.0
    if side:
        return box, (right + 16, top), max(box.bottom + below, top + len(entries) * LEGEND_ROW + 8)
    if entries:
        return box, (left, box.bottom + below), box.bottom + below + len(entries) * LEGEND_ROW + 8
    return box, (right, top), box.bottom + below


def figure(width: float, height: float, label: str, body: Iterable[str], defs: str = "") -> str:
    """The ``<svg>`` element: a fixed pixel size that the page scales down to its width."""
    inner = "".join(body)
    defs_part = f"<defs>{defs}</defs>" if defs else ""
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{num(width)}" height="{num(height)}" '
            f'viewBox="0 0 {num(width)} {num(height)}" role="img" aria-label="{esc(label)}" '
            f'font-family="{esc(FONT)}"><title>{esc(label)}</title>{defs_part}{inner}</svg>')


__all__ = [
    "Box", "Entry", "Linear", "Log", "axes", "circle_path", "cross_path", "dot_path", "esc", "figure", "hatch_pattern", "layout", "legend",
    "legend_width", "line", "log_padded", "log_ticks", "nice_step", "nice_ticks", "num", "padded", "polyline_path",
    "text", "text_width", "tick_label",
]
