"""Name validation: misspellings, never-fired names, section mismatches."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fusion_dd.backends.cann.artifacts import closest_names, collect_candidates, validate_names
from fusion_dd.backends.cann.artifacts.validate import _within_edits, likely_typos
from fusion_dd.core.rules import Rule, Section


def kinds(warnings):
    return [(w.rule.name, w.kind) for w in warnings]


def test_misspelling_is_caught_with_the_right_spelling_suggested():
    warnings = validate_names([Rule("TbeEltwiseFusionPas", Section.UB)], fired=None)
    assert kinds(warnings) == [("TbeEltwiseFusionPas", "unknown")]
    assert warnings[0].suggestions[0] == "TbeEltwiseFusionPass"
    assert "did you mean TbeEltwiseFusionPass" in str(warnings[0])


def test_wrong_case_is_caught():
    warnings = validate_names([Rule("tbeeltwisefusionpass", Section.UB)], fired=None)
    assert warnings[0].suggestions == ("TbeEltwiseFusionPass",)


def test_a_name_that_fired_but_is_missing_from_the_catalog_gives_no_warning():
    rule = Rule("BrandNewCustomFusionPass", Section.GRAPH)
    assert validate_names([rule], fired={"BrandNewCustomFusionPass"}) == []
    # Without artifacts the same name is unknown.
    assert kinds(validate_names([rule], fired=None)) == [("BrandNewCustomFusionPass", "unknown")]


def test_never_fired_and_misspelled_against_fired_names():
    warnings = validate_names(
        [Rule("SoftmaxFusionPass", Section.GRAPH), Rule("MyCustmFusionPass", Section.GRAPH)],
        fired={"MyCustomFusionPass"},
    )
    assert kinds(warnings) == [
        ("SoftmaxFusionPass", "never-fired"),
        ("MyCustmFusionPass", "unknown"),
        ("MyCustmFusionPass", "never-fired"),
    ]
    assert warnings[1].suggestions == ("MyCustomFusionPass",)


def test_section_mismatch_against_catalog_and_artifacts():
    warnings = validate_names([Rule("TbeEltwiseFusionPass", Section.GRAPH)], fired=None)
    assert kinds(warnings) == [("TbeEltwiseFusionPass", "section-mismatch")]
    assert "listed under GraphFusion but is a UBFusion pass" in str(warnings[0])
    # An artifact's section beats the catalog's.
    assert validate_names(
        [Rule("TbeEltwiseFusionPass", Section.GRAPH)],
        fired={"TbeEltwiseFusionPass"},
        known_sections={"TbeEltwiseFusionPass": [Section.GRAPH]},
    ) == []


def test_collect_reports_misspelled_list_entries_with_a_section(tmp_path):
    plain = tmp_path / "rules.txt"
    plain.write_text("TbeEltwiseFusionPas UBFusion\nTbeEltwiseFusionPass GraphFusion\n")
    candidates = collect_candidates([plain])
    assert kinds(candidates.name_warnings) == [
        ("TbeEltwiseFusionPass", "section-mismatch"),
        ("TbeEltwiseFusionPas", "unknown"),
    ]
    assert len(candidates.warnings) == 2


def test_closest_names_ignores_unrelated_names():
    assert closest_names("ZzzTotallyDifferent", ["SoftmaxFusionPass"]) == ()


def _osa_distance(a: str, b: str) -> int:
    """Optimal string alignment distance, the plain full table (the reference for the banded one)."""
    table = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(len(a) + 1):
        table[i][0] = i
    for j in range(len(b) + 1):
        table[0][j] = j
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            table[i][j] = min(table[i - 1][j] + 1, table[i][j - 1] + 1, table[i - 1][j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                table[i][j] = min(table[i][j], table[i - 2][j - 2] + 1)
    return table[len(a)][len(b)]


@settings(max_examples=400, deadline=None)
@given(st.text("abc", max_size=9), st.text("abc", max_size=9), st.integers(0, 3))
def test_the_banded_edit_check_agrees_with_the_full_table(a, b, limit):
    assert _within_edits(a, b, limit) == (_osa_distance(a, b) <= limit)


def test_likely_typos_are_near_known_names_and_new_names_are_not():
    vocabulary = ["TbeEltwiseFusionPass", "LayerNormGradV3FusionPass", "SoftmaxFusionPass", "ASoftmaxFusionPass"]
    assert likely_typos("TbeEltwiseFusionPas", vocabulary) == ("TbeEltwiseFusionPass",)
    assert likely_typos("tbeeltwisefusionpass", vocabulary) == ("TbeEltwiseFusionPass",)  # case only
    assert likely_typos("LayerNormGradV3FusoinPass", vocabulary) == ("LayerNormGradV3FusionPass",)  # a swap
    assert likely_typos("SoftmaxFusionPas", vocabulary) == ("ASoftmaxFusionPass", "SoftmaxFusionPass")
    assert likely_typos("QuuxAttentionRewritePass", vocabulary) == ()
    assert likely_typos("TbeEltwiseFusionPass", vocabulary) == ()  # a known name is no typo of itself
