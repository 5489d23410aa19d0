"""The SVG toolkit of the HTML report (fusion_dd/report/svg.py): ticks, scales, escaping, layout."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import pytest

from fusion_dd.report import svg

ODD = 'Fuse<Add&Mul>"q\'Pass'


@pytest.mark.parametrize(
    ("low", "high", "target", "expected"),
    [
        (0.0, 1.0, 6, [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]),
        (0.0, 15.3, 8, [0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 14.0]),
        (0.27, 0.96, 6, [0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]),
        (-3.0, 3.0, 6, [-3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 3.0]),
        (0.0, 100_000.0, 6, [0.0, 20_000.0, 40_000.0, 60_000.0, 80_000.0, 100_000.0]),
        (0.9999, 1.0001, 5, [0.99990, 0.99995, 1.0, 1.00005, 1.0001]),
    ],
)
def test_nice_ticks_are_round_numbers_inside_the_range(low, high, target, expected):
    ticks = svg.nice_ticks(low, high, target)
    assert ticks == pytest.approx(expected, abs=1e-12)
    # Exactly the short decimal, not 0.30000000000000004: the labels print as written.
    assert all(repr(tick) == repr(round(tick, 10)) for tick in ticks)
    assert all(low - 1e-12 <= tick <= high + 1e-12 for tick in ticks)


def test_nice_ticks_of_an_empty_or_bad_range():
    assert svg.nice_ticks(2.0, 2.0) == [2.0]
    assert svg.nice_ticks(1.0, 0.0, 6) == svg.nice_ticks(0.0, 1.0, 6)
    assert svg.nice_ticks(0.0, math.inf) == [] and svg.nice_ticks(math.nan, 1.0) == []


@pytest.mark.parametrize(("raw", "step"), [(0.13, 0.1), (0.22, 0.2), (3.4, 5.0), (7.5, 10.0), (1234.0, 1000.0)])
def test_nice_step(raw, step):
    assert svg.nice_step(raw) == pytest.approx(step)


def test_tick_labels_have_the_decimals_of_their_step():
    assert [svg.tick_label(v, 0.05) for v in (0.05, 0.1, 0.15)] == ["0.05", "0.10", "0.15"]
    assert [svg.tick_label(v, 2.0) for v in (0.0, 2.0, -4.0)] == ["0", "2", "-4"]
    assert svg.tick_label(2_000_000.0, 1_000_000.0) == "2e+06"


def test_log_ticks_are_powers_of_ten_with_minor_ticks_between():
    major, minor = svg.log_ticks(0.07, 150.0)
    assert major == [0.1, 1.0, 10.0, 100.0]
    assert 0.2 in minor and 50.0 in minor and 0.08 in minor and 200.0 not in minor
    assert not set(major) & set(minor)


def test_log_ticks_within_one_decade_and_over_many():
    major, _ = svg.log_ticks(2.0, 30.0)  # one power of ten inside: 2 and 5 times join it
    assert major == [2.0, 5.0, 10.0, 20.0]
    major, minor = svg.log_ticks(1.2, 1.9)  # no power inside: linear nice ticks
    assert len(major) >= 2 and all(1.2 <= value <= 1.9 for value in major) and minor == []
    major, _ = svg.log_ticks(1e-12, 1e12)  # 25 decades: every few of them, at most 8 labels
    assert len(major) <= 9 and major[0] == 1e-12 and all(math.log10(v) == round(math.log10(v)) for v in major)
    assert svg.log_ticks(0.0, 10.0) == ([], [])


def test_scales_map_the_domain_onto_the_pixels():
    x = svg.Linear(0.0, 10.0)
    x.place(100.0, 600.0)
    assert (x(0.0), x(5.0), x(10.0)) == (100.0, 350.0, 600.0)
    y = svg.Log(0.1, 1000.0)
    y.place(400.0, 0.0)  # bottom to top
    assert y(0.1) == pytest.approx(400.0) and y(1.0) == pytest.approx(300.0) and y(1000.0) == pytest.approx(0.0)
    flat = svg.Linear(3.0, 3.0)  # one value: a domain around it, never a division by zero
    flat.place(0.0, 100.0)
    assert flat(3.0) == pytest.approx(50.0)
    counts = svg.Linear(0.0, 3.0, integer=True)
    assert [value for value, _ in counts.ticks(8)[0]] == [0.0, 1.0, 2.0, 3.0]


def test_numbers_are_short_and_never_negative_zero():
    assert [svg.num(v) for v in (1.0, 1.5, 1.256, -0.001, 0.0, 12.30)] == ["1", "1.5", "1.26", "0", "0", "12.3"]


def test_rule_names_with_markup_characters_are_escaped_in_text_legends_and_figures():
    label = f"culprit 1: {ODD} (#0003)"
    drawn = svg.figure(300, 100, ODD, [svg.text(10, 10, ODD), svg.legend(0, 20, [svg.Entry(label, "#000000", "line")])])
    assert ODD not in drawn
    assert "Fuse&lt;Add&amp;Mul&gt;&quot;q&#x27;Pass" in drawn
    tree = ET.fromstring(drawn)  # well-formed XML: the browser draws it as written
    texts = ["".join(node.itertext()) for node in tree.iter() if node.tag.endswith("text")]
    assert texts == [ODD, label]
    assert tree.get("aria-label") == ODD


def test_paths_count_their_points_and_markers():
    assert svg.polyline_path([(0, 0), (1, 2.5), (3, 4)]) == "M 0 0 L 1 2.5 L 3 4"
    assert svg.dot_path(1.234, 5) == "M1.23 5h0"
    assert svg.circle_path(10, 10, 2).count("a") == 2 and svg.cross_path(0, 0, 1).count("M") == 2


def test_a_long_legend_goes_below_the_plot_a_short_one_to_its_right():
    short = [svg.Entry("pass", "#000000"), svg.Entry("fail", "#000000")]
    box, (lx, ly), height = svg.layout(1000, 200, y_labels=["0.5", "0.75"], ylabel=True, entries=short)
    assert lx > box.right and ly == box.top and height >= box.bottom + 30
    long = [svg.Entry("culprit 2: " + " + ".join(["CastRemoveFusionPass"] * 6), "#000000", "line")]
    box, (lx, ly), height = svg.layout(1000, 200, y_labels=["1"], ylabel=True, entries=long)
    assert box.right == 1000 - 16 and ly > box.bottom and height >= ly + svg.LEGEND_ROW
