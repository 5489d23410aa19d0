"""The demo training reads fusion_switch.cfg exactly as fusion-dd writes it, with
CANN's precedence: an exact name beats "ALL", a silent file means on, and the old
line format applies to both sections."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from fusion_dd.backends.cann.switch import parse_switch_text, render_switch
from fusion_dd.demo import DEFAULT_SCENARIO, candidate_rules
from fusion_dd.demo.pipeline import known_rules
from fusion_dd.demo.train import switch_decision
from fusion_dd.core.rules import Rule, Section

RULES = candidate_rules(DEFAULT_SCENARIO)


@settings(deadline=None, max_examples=60)
@given(st.sets(st.sampled_from(RULES)))
def test_reader_agrees_with_fusion_dd_writer(enabled: set[Rule]) -> None:
    text = render_switch(RULES, enabled)
    decide = switch_decision(parse_switch_text(text))
    for rule in RULES:
        assert decide(rule) is (rule in enabled), rule


def _state_text(on: bool) -> str:
    return "on" if on else "off"


@settings(deadline=None, max_examples=60)
@given(
    split=st.integers(min_value=1, max_value=len(RULES) - 1),
    enabled_bits=st.lists(st.booleans(), min_size=len(RULES), max_size=len(RULES)),
    graph_all=st.sampled_from([None, True, False]),
    ub_all=st.sampled_from([None, True, False]),
    overrides=st.lists(st.booleans(), min_size=len(RULES), max_size=len(RULES)),
    overridden=st.lists(st.booleans(), min_size=len(RULES), max_size=len(RULES)),
)
def test_reader_agrees_with_writer_over_a_base_with_all_and_exact_entries(
    split: int,
    enabled_bits: list[bool],
    graph_all: bool | None,
    ub_all: bool | None,
    overrides: list[bool],
    overridden: list[bool],
) -> None:
    """Candidates get exact entries; the others follow the base cfg as CANN would."""
    candidates, outside = RULES[:split], RULES[split:]
    enabled = [rule for rule, bit in zip(candidates, enabled_bits) if bit]
    sections: dict[str, dict[str, str]] = {"GraphFusion": {}, "UBFusion": {}}
    for section, value in ((Section.GRAPH, graph_all), (Section.UB, ub_all)):
        if value is not None:
            sections[section.value]["ALL"] = _state_text(value)
    expected: dict[Rule, bool] = {}
    for i, rule in enumerate(RULES):
        if overridden[i]:
            sections[rule.section.value][rule.name] = _state_text(overrides[i])
    for i, rule in enumerate(outside):
        index = split + i
        if overridden[index]:
            expected[rule] = overrides[index]
        else:
            default = graph_all if rule.section is Section.GRAPH else ub_all
            expected[rule] = True if default is None else default
    for rule in candidates:
        expected[rule] = rule in enabled
    base = parse_switch_text(json.dumps({"Switch": sections}), "base.cfg")
    decide = switch_decision(parse_switch_text(render_switch(candidates, enabled, base)))
    for rule in RULES:
        assert decide(rule) is expected[rule], rule


def test_all_off_with_an_exact_on_entry() -> None:
    text = json.dumps({"Switch": {"GraphFusion": {"ALL": "off", "LayerNormFusionPass": "on"}}})
    decide = switch_decision(parse_switch_text(text))
    for rule in known_rules():
        if rule.name == "LayerNormFusionPass":
            assert decide(rule)
        elif rule.section is Section.GRAPH:
            assert not decide(rule), rule
        else:
            assert decide(rule), rule  # UBFusion is silent: CANN's default, on


def test_exact_name_only_counts_in_its_own_section() -> None:
    text = json.dumps({"Switch": {"UBFusion": {"LayerNormFusionPass": "off"}}})
    decide = switch_decision(parse_switch_text(text))
    assert decide(Rule("LayerNormFusionPass", Section.GRAPH))


def test_line_format_applies_to_both_sections() -> None:
    text = "LayerNormFusionPass:off\nTbeEltwiseFusionPass:off\nGeluFusionPass:on\n"
    decide = switch_decision(parse_switch_text(text))
    off = {"LayerNormFusionPass", "TbeEltwiseFusionPass"}
    for rule in known_rules():
        assert decide(rule) is (rule.name not in off), rule


@settings(deadline=None, max_examples=30)
@given(st.sets(st.sampled_from(RULES)))
def test_line_format_written_for_every_rule(enabled: set[Rule]) -> None:
    text = "".join(f"{r.name}:{_state_text(r in enabled)}\n" for r in RULES)
    decide = switch_decision(parse_switch_text(text))
    for rule in RULES:
        assert decide(rule) is (rule in enabled)


def test_no_switch_file_means_everything_on() -> None:
    decide = switch_decision(None)
    assert all(decide(rule) for rule in known_rules())
