"""The horizon of early passes: where the all-on curve leaves the baseline's band, and how far past it to look."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fusion_dd.core.errors import UsageError
from fusion_dd.runner.horizon import DEFAULT_PASS_BAND, MIN_FRACTION, PassAt, band_width, departure, horizon, narrow_divergence

BASELINE = [(step, 1.0) for step in range(1, 1001)]


def damaged(start: int, rate: float = 0.05) -> list[tuple[int, float]]:
    return [(step, 1.0 + (rate * (step - start + 1) if step >= start else 0.0)) for step in range(1, 1001)]


def test_departure_is_the_first_of_patience_reports_above_the_band() -> None:
    # +0.05 at step 150, +0.10 at 151 (on the 10% band's edge, inside), +0.15 at 152: above from 152 on,
    # and the median of the last three reports (the pass band's reading) from 153 on.
    assert departure(BASELINE, damaged(150)) == 153
    assert departure(BASELINE, damaged(150), divergence=0.0) == 150  # a band of width 0: above at once
    assert departure(BASELINE, damaged(150), divergence=0.5) == 160  # +0.50 at 159 is on the edge


def test_a_spike_shorter_than_patience_does_not_depart() -> None:
    curve = [(step, 5.0 if step in (10, 11) else 1.0) for step in range(1, 100)]
    assert departure(BASELINE, curve, patience=3) is None
    assert departure(BASELINE, curve, patience=2) == 11  # the median of three is above at 11 and 12
    assert departure(BASELINE, curve, patience=2, divergence=0.1, relative=True) == 10  # a user's band reads raw


def test_nan_departs_at_once_and_early_steps_can_be_skipped() -> None:
    curve = [(1, 9.0), (2, 9.0), (3, 9.0), (4, 1.0), (5, math.nan)]
    assert departure(BASELINE, curve) == 1
    assert departure(BASELINE, curve, start_step=4) == 5


def test_a_curve_inside_the_band_sets_no_horizon() -> None:
    assert departure(BASELINE, BASELINE) is None
    assert horizon(PassAt(), 1000, None) is None


def test_horizon_is_twice_the_departure_at_least_a_fraction_never_the_whole_training() -> None:
    assert horizon(PassAt(), 1000, 150) == 300
    assert horizon(PassAt(), 1000, 10) == math.ceil(MIN_FRACTION * 1000)
    assert horizon(PassAt(), 1000, 600) is None  # 1200 would be past the end: nothing to save
    assert horizon(PassAt(), 1000, 150, factor=3) == 450


def test_a_fixed_step_or_fraction_overrides_the_curves_and_off_is_off() -> None:
    assert horizon(PassAt(auto=False, step=250), 1000, None) == 250
    assert horizon(PassAt(auto=False, fraction=0.3), 1000, None) == 300
    assert horizon(PassAt(auto=False), 1000, 150) is None
    assert horizon(PassAt(), None, 150) is None  # no baseline curve, no length


def test_band_width_follows_the_divergence_rule_or_defaults_to_ten_percent() -> None:
    assert band_width(2.0, None, False) == pytest.approx(DEFAULT_PASS_BAND * 2.0)
    assert band_width(2.0, 0.5, False) == 0.5
    assert band_width(2.0, 0.5, True) == 1.0


@pytest.mark.parametrize(
    ("value", "expected"),
    [("auto", PassAt()), (None, PassAt()), ("off", PassAt(auto=False)), (False, PassAt(auto=False)),
     (300, PassAt(auto=False, step=300)), (0.25, PassAt(auto=False, fraction=0.25))],
)  # fmt: skip
def test_pass_at_parses_its_spellings(value: object, expected: PassAt) -> None:
    assert PassAt.parse(value) == expected
    assert PassAt.parse(expected.to_json()) == expected


@pytest.mark.parametrize("value", ["sometimes", 0, -5, 1.5, 1.0, True, [3]])
def test_a_bad_pass_at_names_the_key_and_the_fix(value: object) -> None:
    with pytest.raises(UsageError, match=r"^early_stop\.pass_at: .* use auto, off, a step count"):
        PassAt.parse(value)


@given(
    start=st.integers(min_value=1, max_value=999),
    length=st.integers(min_value=2, max_value=5000),
    factor=st.floats(min_value=1.0, max_value=10.0),
)
def test_the_horizon_is_never_before_the_departure_nor_at_the_end(start: int, length: int, factor: float) -> None:
    found = horizon(PassAt(), length, start, factor=factor)
    if found is not None:
        assert start <= found < length
        assert found >= MIN_FRACTION * length


def test_a_divergence_band_narrower_than_the_baselines_scatter_is_said_with_a_width_that_is_not() -> None:
    import random

    rng = random.Random(1)
    noisy = [(step, (2 * 0.99**step + 0.5) * (1 + rng.gauss(0.0, 0.1))) for step in range(1, 1001)]
    said = narrow_divergence(noisy, 0.1, True)
    assert said is not None and "about 0.0564 per report (10% of it)" in said and "widen it to at least" in said
    advised = float(said.split("widen it to at least ", 1)[1].split(" ", 1)[0])
    assert narrow_divergence(noisy, advised, True) is None
    smooth = [(step, 2 * 0.99**step + 0.5) for step in range(1, 1001)]
    assert narrow_divergence(smooth, 0.1, True) is None  # no scatter: the band is the user's to choose
    assert narrow_divergence(noisy, None, False) is None  # the pass band allows for the scatter itself
