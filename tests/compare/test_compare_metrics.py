"""Pair metrics against values computed by hand, and the default bad-pair rule."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fusion_dd.compare import metrics as metrics_module
from fusion_dd.compare.metrics import Thresholds, compare_arrays


def test_hand_computed_values() -> None:
    x = np.array([1.0, 2.0, 3.0, 0.0], np.float32)
    y = np.array([1.0, 2.0, 2.0, 0.0], np.float32)
    m = compare_arrays(x, y)
    assert m.cosine == pytest.approx(11 / math.sqrt(14 * 9))  # 1 + 4 + 6
    assert m.max_abs == 1.0
    # relative errors where |y| > eps: 0, 0, 0.5 (the 0 of y is left out)
    assert m.max_rel == 0.5
    assert m.mean_rel == pytest.approx(0.5 / 3)
    assert m.rel_euclid == pytest.approx(math.sqrt(1 / 9))
    assert m.rmse == pytest.approx(math.sqrt(1 / 4))
    assert m.within_0001 == pytest.approx(2 / 3)
    assert m.within_0005 == pytest.approx(2 / 3)
    assert m.elements == 4 and m.flags == ()


def test_identical_tensors() -> None:
    x = np.linspace(-3, 3, 100).astype(np.float16)
    m = compare_arrays(x, x.copy())
    assert (m.cosine, m.max_abs, m.rel_euclid, m.rmse, m.within_0001) == (1.0, 0.0, 0.0, 0.0, 1.0)
    assert not Thresholds().is_bad(m)


def test_both_all_zero_is_a_perfect_match() -> None:
    m = compare_arrays(np.zeros(5), np.zeros(5))
    assert m.cosine == 1.0 and m.flags == ()
    assert not Thresholds().is_bad(m)


@pytest.mark.parametrize("zero_side, flag", [("on", "fusion-on side all zero"), ("off", "fusion-off side all zero")])
def test_one_side_all_zero_is_nan_and_flagged(zero_side: str, flag: str) -> None:
    ones, zeros = np.ones(4), np.zeros(4)
    x, y = (zeros, ones) if zero_side == "on" else (ones, zeros)
    m = compare_arrays(x, y)
    assert math.isnan(m.cosine)
    assert m.flags == (flag,)
    assert Thresholds().is_bad(m)


def test_nan_and_inf_at_the_same_positions_are_ignored() -> None:
    x = np.array([1.0, np.nan, np.inf, 2.0])
    y = np.array([1.0, np.nan, np.inf, 2.0])
    m = compare_arrays(x, y)
    assert m.ignored_nonfinite == 2 and m.elements == 2
    assert m.flags == () and m.cosine == pytest.approx(1.0)


@pytest.mark.parametrize(
    "x, y",
    [
        ([1.0, np.nan, 3.0], [1.0, 2.0, 3.0]),
        ([1.0, 2.0, np.inf], [1.0, 2.0, 3.0]),
        ([1.0, -np.inf, 3.0], [1.0, np.inf, 3.0]),
    ],
)
def test_nan_or_inf_on_one_side_flags_the_pair(x: list[float], y: list[float]) -> None:
    m = compare_arrays(np.array(x), np.array(y))
    assert m.flags and "one side only" in m.flags[0]
    assert m.max_abs == 0.0  # the finite elements agree: only the flag makes it bad
    assert Thresholds().is_bad(m)


def test_chunked_computation_equals_the_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(7, 5, 3)).astype(np.float32)
    y = x + rng.normal(scale=0.01, size=x.shape).astype(np.float32)
    whole = compare_arrays(x, y)
    monkeypatch.setattr(metrics_module, "CHUNK", 4)
    chunked = compare_arrays(x, y)
    for field in ("cosine", "max_abs", "max_rel", "mean_rel", "rel_euclid", "rmse", "within_0001"):
        assert getattr(chunked, field) == pytest.approx(getattr(whole, field), rel=1e-12)


def test_sizes_must_match_but_shapes_may_differ() -> None:
    assert compare_arrays(np.ones((2, 3)), np.ones((3, 2))).cosine == 1.0
    with pytest.raises(ValueError, match="sizes differ"):
        compare_arrays(np.ones(3), np.ones(4))


@pytest.mark.parametrize(
    "cosine_target, max_abs, bad",
    [
        (0.995, 0.5, False),  # cosine fine
        (0.98, 0.002, True),  # cosine < 0.99 and max abs > 0.001
        (0.98, 0.0005, False),  # cosine < 0.99 but tiny error
        (0.85, 0.0005, True),  # cosine < 0.9 on its own
        (0.85, 0.00005, False),  # ... unless the error is below the noise floor
        (0.999, 1.5, True),  # max abs > 1 on its own
    ],
)
def test_default_bad_rule(cosine_target: float, max_abs: float, bad: bool) -> None:
    from fusion_dd.compare.metrics import Metrics

    m = Metrics(cosine_target, max_abs, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 10)
    assert Thresholds().is_bad(m) is bad
    assert Thresholds(noise_abs=0).is_bad(m) is (bad or (cosine_target < 0.9))


def test_msaccucmp_metric_set_by_hand() -> None:
    x = np.array([1.0, 2.0, 4.0, 1.0])
    y = np.array([1.0, 1.0, 2.0, 4.0])
    m = compare_arrays(x, y)
    assert m.mean_abs == pytest.approx((0 + 1 + 2 + 3) / 4)
    assert m.accumulated_rel == pytest.approx(0 + 1 + 1 + 0.75)
    assert m.std_on == pytest.approx(np.std(x)) and m.std_off == pytest.approx(np.std(y))
    p, q = y / y.sum(), x / x.sum()
    assert m.kl_divergence == pytest.approx(float(np.sum(p * np.log(p / q))))


def test_kl_is_undefined_for_non_positive_values() -> None:
    assert math.isnan(compare_arrays(np.array([1.0, -1.0]), np.array([1.0, 2.0])).kl_divergence)


def test_chunked_new_metrics_equal_the_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(5)
    x, y = rng.uniform(0.1, 2, 10_000), rng.uniform(0.1, 2, 10_000)
    whole = compare_arrays(x, y)
    import fusion_dd.compare.metrics as metrics

    monkeypatch.setattr(metrics, "CHUNK", 333)
    chunked = compare_arrays(x.reshape(100, 100), y.reshape(100, 100))
    for name in ("mean_abs", "accumulated_rel", "kl_divergence", "std_on", "std_off"):
        assert getattr(chunked, name) == pytest.approx(getattr(whole, name), rel=1e-9)


def test_uniform_scale_error_is_bad_by_relative_error() -> None:
    y = np.random.default_rng(3).normal(size=1000)
    m = compare_arrays(y * 1.3, y)
    assert m.cosine == pytest.approx(1.0) and m.mean_rel == pytest.approx(0.3)
    assert Thresholds().is_bad(m)
    assert "mean relative error" in " ".join(Thresholds().reasons(m))
    assert not Thresholds(mean_rel=0.5).is_bad(m)


def test_nan_and_inf_are_counted_per_side() -> None:
    m = compare_arrays(np.array([np.nan, np.inf, 1.0, -np.inf]), np.array([1.0, 1.0, 1.0, 1.0]))
    assert (m.nan_on, m.inf_on, m.nan_off, m.inf_off) == (1, 2, 0, 0)
    assert "1 NaN fusion-on, 2 Inf fusion-on" in m.short()
