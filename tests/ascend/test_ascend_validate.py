"""Name validation: misspellings, never-fired names, section mismatches."""

from __future__ import annotations

from fusion_dd.ascend import closest_names, collect_candidates, validate_names
from fusion_dd.rules import Rule, Section


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
