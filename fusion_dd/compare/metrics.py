"""How far a fusion-on tensor is from its fusion-off counterpart.

The metrics are msaccucmp's (cosine similarity, max absolute error, mean
absolute error, relative errors and their sum (accumulated relative error),
relative Euclidean distance, RMSE, Kullback-Leibler divergence, the standard
deviation of each side, share of elements within a relative error), computed
in float64 and in chunks: a tensor is never converted to
float64 as a whole, so memory per pair stays the raw bytes (memory mapped) plus
one chunk, whatever the tensor's size.

NaN and Inf at the same positions with the same value on both sides are a shared
property of the network and are ignored; anywhere else they flag the pair.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import asdict, dataclass

import numpy as np

#: Relative errors are taken only where |off| exceeds this (elsewhere they explode).
REL_EPS = 1e-6
#: Elements per chunk: 512 KiB of float64 per side, so that the dozen passes
#: over a chunk run in the CPU cache instead of main memory.
CHUNK = 1 << 16


@dataclass(frozen=True)
class Thresholds:
    """When a pair counts as bad: by cosine, by absolute and by relative error.

    Bad when ``cosine < cosine and max_abs > max_abs``, or ``cosine < cosine_floor``,
    or ``max_abs > max_abs_ceiling``, or ``mean_rel > mean_rel`` (a uniform scale
    error leaves the cosine at 1: only the relative error sees it), or when a
    flag (NaN/Inf mismatch, one side all zero) is set. One refinement: a pair
    whose max abs error is at most ``noise_abs`` is never bad by its cosine or
    relative error alone, because both are any number for two tensors of
    near-zero noise (a bias that gets no gradient, compared a few steps into
    training); ``noise_abs=0`` gives the plain rule. The mean relative error is
    taken where ``|fusion-off| > 1e-6`` only, so that values near zero, whose
    relative error explodes under any rounding, do not decide it.
    """

    cosine: float = 0.99
    max_abs: float = 0.001
    cosine_floor: float = 0.9
    max_abs_ceiling: float = 1.0
    noise_abs: float = 1e-4
    mean_rel: float = 0.05

    def is_bad(self, metrics: Metrics) -> bool:
        return bool(self.reasons(metrics))

    def reasons(self, metrics: Metrics) -> list[str]:
        """Why a pair is bad (empty when it is within the thresholds)."""
        reasons = list(metrics.flags)
        cosine = metrics.cosine
        above_noise = metrics.max_abs > self.noise_abs
        if not math.isnan(cosine) and cosine < self.cosine and metrics.max_abs > self.max_abs:
            reasons.append(f"cosine {cosine:.4g} < {self.cosine} and max abs {metrics.max_abs:.4g} > {self.max_abs}")
        elif not math.isnan(cosine) and cosine < self.cosine_floor and above_noise:
            reasons.append(f"cosine {cosine:.4g} < {self.cosine_floor}")
        if metrics.max_abs > self.max_abs_ceiling:
            reasons.append(f"max abs {metrics.max_abs:.4g} > {self.max_abs_ceiling}")
        if metrics.mean_rel > self.mean_rel and above_noise:
            reasons.append(f"mean relative error {metrics.mean_rel:.4g} > {self.mean_rel}")
        return reasons


@dataclass(frozen=True)
class Metrics:
    """The comparison of one pair; ``flags`` name what makes it bad regardless of thresholds."""

    cosine: float
    max_abs: float
    max_rel: float
    mean_rel: float
    rel_euclid: float
    rmse: float
    within_0001: float
    within_0005: float
    elements: int
    ignored_nonfinite: int = 0
    flags: tuple[str, ...] = ()
    mean_abs: float = 0.0
    accumulated_rel: float = 0.0
    kl_divergence: float = math.nan  # NaN where a side has values <= 0 (no distribution)
    std_on: float = 0.0
    std_off: float = 0.0
    nan_on: int = 0
    inf_on: int = 0
    nan_off: int = 0
    inf_off: int = 0
    basis: str = "tensor"  # "statistics": measured from a statistics-only dump

    def to_json(self) -> dict[str, object]:
        data = asdict(self)
        data["flags"] = list(self.flags)
        return {key: _json_number(value) for key, value in data.items()}

    def short(self) -> str:
        """``cosine 0.71, max abs 3.2`` for one-line reports."""
        text = f"cosine {_fmt(self.cosine)}, max abs {_fmt(self.max_abs)}, mean rel {_fmt(self.mean_rel)}"
        nonfinite = [f"{count} {what}" for count, what in (
            (self.nan_on, "NaN fusion-on"), (self.inf_on, "Inf fusion-on"), (self.nan_off, "NaN fusion-off"), (self.inf_off, "Inf fusion-off"),
        ) if count]  # fmt: skip
        if self.basis == "statistics":
            text = f"statistics only: max abs {_fmt(self.max_abs)}, largest relative difference {_fmt(self.mean_rel)}"
        if nonfinite:
            text += " (" + ", ".join(nonfinite) + ")"
        if self.flags:
            text += " [" + "; ".join(self.flags) + "]"
        return text


def _fmt(value: float) -> str:
    if math.isnan(value):
        return "nan"
    return f"{value:.4g}"


def _json_number(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def compare_arrays(on: np.ndarray, off: np.ndarray, *, rel_eps: float = REL_EPS) -> Metrics:
    """The metrics of fusion-on ``on`` (x) against fusion-off ``off`` (y).

    Arrays of different shapes but the same size are compared element by element
    in C order (a flag says so); different sizes raise ValueError, which the
    caller lists as a problem of that pair.
    """
    flags: list[str] = []
    if on.size != off.size:
        raise ValueError(f"sizes differ: {list(on.shape)} ({on.size} elements) vs {list(off.shape)} ({off.size})")
    if on.shape != off.shape:
        on, off = on.reshape(-1), off.reshape(-1)
    acc = _Accumulator()
    for x, y in zip(_chunks(on), _chunks(off)):
        acc.add(x, y, rel_eps)
    return acc.result(flags)


def _chunks(array: np.ndarray) -> Iterator[np.ndarray]:
    """Consecutive C-order pieces of ``array`` as flat float64, at most ~CHUNK elements each.

    Slicing along the leading axes keeps a memory-mapped or transposed view lazy:
    only the current piece is copied.
    """
    if array.ndim == 0:
        yield np.asarray(array, dtype=np.float64).reshape(1)
        return
    if array.size <= CHUNK or array.ndim == 1:
        step = CHUNK if array.ndim == 1 else max(1, array.shape[0])
        for start in range(0, max(array.shape[0], 1), step):
            yield np.asarray(array[start : start + step], dtype=np.float64).reshape(-1)
        return
    inner = array.size // array.shape[0] if array.shape[0] else 0
    if inner > CHUNK:
        for index in range(array.shape[0]):
            yield from _chunks(array[index])
        return
    rows = max(1, CHUNK // max(inner, 1))
    for start in range(0, array.shape[0], rows):
        yield np.asarray(array[start : start + rows], dtype=np.float64).reshape(-1)


class _Accumulator:
    """Running sums over chunks; kept in float64 Python scalars."""

    def __init__(self) -> None:
        self.dot = self.xx = self.yy = self.dd = 0.0
        self.max_abs = 0.0
        self.max_rel = 0.0
        self.sum_rel = 0.0
        self.rel_count = 0
        self.within1 = self.within5 = 0
        self.count = 0
        self.ignored = 0
        self.mismatch = 0
        self.sum_abs = 0.0
        self.sx = self.sy = 0.0
        self.ylogy = self.ylogx = 0.0
        self.positive = True
        self.nan_x = self.inf_x = self.nan_y = self.inf_y = 0

    def add(self, x: np.ndarray, y: np.ndarray, rel_eps: float) -> None:
        """Fold one chunk in. Few passes, each over a chunk that stays in cache.

        Finite sums of squares prove every element finite (fp16/fp32 values cannot
        overflow a float64 square), so the NaN/Inf filter runs only when needed.
        """
        xx, yy = float(np.dot(x, x)), float(np.dot(y, y))
        if not (math.isfinite(xx) and math.isfinite(yy)):
            self.nan_x += int(np.count_nonzero(np.isnan(x)))
            self.inf_x += int(np.count_nonzero(np.isinf(x)))
            self.nan_y += int(np.count_nonzero(np.isnan(y)))
            self.inf_y += int(np.count_nonzero(np.isinf(y)))
            fx, fy = np.isfinite(x), np.isfinite(y)
            both = fx & fy
            neither = ~fx & ~fy
            same = int(np.count_nonzero(neither & ((x == y) | (np.isnan(x) & np.isnan(y)))))
            self.ignored += same
            self.mismatch += int(both.size - np.count_nonzero(both)) - same
            x, y = x[both], y[both]
            xx, yy = float(np.dot(x, x)), float(np.dot(y, y))
        if x.size == 0:
            return
        diff = np.subtract(x, y)
        self.count += x.size
        self.xx += xx
        self.yy += yy
        self.dot += float(np.dot(x, y))
        self.dd += float(np.dot(diff, diff))
        self.sx += float(x.sum())
        self.sy += float(y.sum())
        if self.positive:
            if float(x.min()) > 0 and float(y.min()) > 0:
                self.ylogy += float(np.dot(y, np.log(y)))
                self.ylogx += float(np.dot(y, np.log(x)))
            else:
                self.positive = False
        np.abs(diff, out=diff)
        self.sum_abs += float(diff.sum())
        self.max_abs = max(self.max_abs, float(diff.max()))
        ay = np.abs(y)
        mask = ay > rel_eps
        counted = int(np.count_nonzero(mask))
        if not counted:
            return
        # Relative error where |y| > eps, zero elsewhere (and those zeros are not counted).
        np.maximum(ay, rel_eps, out=ay)
        np.divide(diff, ay, out=diff)
        np.multiply(diff, mask, out=diff)
        excluded = x.size - counted
        self.max_rel = max(self.max_rel, float(diff.max()))
        self.sum_rel += float(diff.sum())
        self.rel_count += counted
        self.within1 += int(np.count_nonzero(diff < 0.001)) - excluded
        self.within5 += int(np.count_nonzero(diff < 0.005)) - excluded

    def result(self, flags: list[str]) -> Metrics:
        if self.mismatch:
            flags.append(f"NaN/Inf at {self.mismatch} positions on one side only")
        x_zero, y_zero = self.xx == 0.0, self.yy == 0.0
        if x_zero and y_zero:
            cosine = 1.0
        elif x_zero or y_zero:
            cosine = math.nan
            flags.append("fusion-on side all zero" if x_zero else "fusion-off side all zero")
        else:
            cosine = self.dot / (math.sqrt(self.xx) * math.sqrt(self.yy))
            cosine = max(-1.0, min(1.0, cosine))
        if self.yy:
            rel_euclid = math.sqrt(self.dd / self.yy)
        else:
            rel_euclid = 0.0 if self.dd == 0.0 else math.inf
        kl = math.nan
        if self.positive and self.count and self.sx > 0 and self.sy > 0:
            # KL(off || on) of the tensors as distributions p = y / sum(y), q = x / sum(x)
            kl = max(0.0, (self.ylogy - self.ylogx) / self.sy - math.log(self.sy) + math.log(self.sx))
        n = self.count
        std = lambda total, squares: math.sqrt(max(0.0, squares / n - (total / n) ** 2)) if n else 0.0  # noqa: E731
        return Metrics(
            cosine=cosine,
            max_abs=self.max_abs,
            max_rel=self.max_rel,
            mean_rel=self.sum_rel / self.rel_count if self.rel_count else 0.0,
            rel_euclid=rel_euclid,
            rmse=math.sqrt(self.dd / self.count) if self.count else 0.0,
            within_0001=self.within1 / self.rel_count if self.rel_count else 1.0,
            within_0005=self.within5 / self.rel_count if self.rel_count else 1.0,
            elements=self.count,
            ignored_nonfinite=self.ignored,
            flags=tuple(flags),
            mean_abs=self.sum_abs / n if n else 0.0,
            accumulated_rel=self.sum_rel,
            kl_divergence=kl,
            std_on=std(self.sx, self.xx),
            std_off=std(self.sy, self.yy),
            nan_on=self.nan_x,
            inf_on=self.inf_x,
            nan_off=self.nan_y,
            inf_off=self.inf_y,
        )


#: The statistics a statistics-only dump gives per tensor, as ``statistic.csv`` names them.
STATISTICS = ("max", "min", "mean", "norm")


def tensor_statistics(array: np.ndarray) -> dict[str, float]:
    """The statistics of a full tensor, to compare it with a statistics-only dump (finite values only)."""
    values = np.asarray(array, dtype=np.float64).reshape(-1)
    finite = values[np.isfinite(values)]
    stats = {"count": float(values.size), "nan": float(np.count_nonzero(np.isnan(values))),
             "inf": float(np.count_nonzero(np.isinf(values)))}  # fmt: skip
    if finite.size:
        stats.update(max=float(finite.max()), min=float(finite.min()), mean=float(finite.mean()),
                     norm=float(np.sqrt(np.dot(finite, finite))))  # fmt: skip
    return stats


def compare_statistics(on: dict[str, float], off: dict[str, float], *, rel_eps: float = REL_EPS) -> Metrics:
    """Metrics of two tensors known only by their statistics (max, min, mean, L2 norm).

    Enough to rank and localize, not to prove closeness: the cosine is unknown
    (NaN); ``max_abs`` is the largest difference of max, min and mean;
    ``mean_rel`` and ``max_rel`` the largest relative difference of the four;
    ``rel_euclid`` is ``|norm_on - norm_off| / norm_off``, a lower bound of the
    true relative distance (triangle inequality). NaN or Inf counts that
    differ flag the pair.
    """
    flags: list[str] = []
    shared = [name for name in STATISTICS if name in on and name in off]
    if not shared:
        raise ValueError("no statistic in common (max, min, mean or norm) on both sides")
    diffs = {name: abs(on[name] - off[name]) for name in shared}
    rels = {name: diffs[name] / max(abs(off[name]), rel_eps) for name in shared}
    for what in ("nan", "inf"):
        if what in on and what in off and on[what] != off[what]:
            flags.append(f"{what.upper()} count {on[what]:.0f} fusion-on, {off[what]:.0f} fusion-off")
    worst_rel = max(rels.values())
    rel_euclid = math.nan
    if "norm" in shared:
        rel_euclid = diffs["norm"] / off["norm"] if off["norm"] else (0.0 if not diffs["norm"] else math.inf)
    return Metrics(
        cosine=math.nan,
        max_abs=max((diffs[name] for name in shared if name != "norm"), default=diffs.get("norm", 0.0)),
        max_rel=worst_rel,
        mean_rel=worst_rel,
        rel_euclid=rel_euclid,
        rmse=math.nan,
        within_0001=math.nan,
        within_0005=math.nan,
        elements=int(off.get("count", on.get("count", 0))),
        flags=tuple(flags),
        nan_on=int(on.get("nan", 0)),
        inf_on=int(on.get("inf", 0)),
        nan_off=int(off.get("nan", 0)),
        inf_off=int(off.get("inf", 0)),
        basis="statistics",
    )
