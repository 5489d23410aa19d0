"""The CANN backend: what the engine used to know about CANN, now behind one interface."""

from __future__ import annotations

import json
from pathlib import Path

from fusion_dd.backends import backend_for
from fusion_dd.backends.cann import CannBackend
from fusion_dd.backends.cann.switch import parse_switch_text, render_switch
from fusion_dd.core.hooks import TrialFiles, collect_artifacts, effects_of, switch_check_of
from fusion_dd.core.rules import Rule, Section
from fusion_dd.search.choose_off import default_choose_off

CAST = Rule("CastRemoveFusionPass", Section.GRAPH)
VAR = Rule("ZReduceMeanVarianceFusionPass", Section.GRAPH)
ELTWISE = Rule("TbeEltwiseFusionPass", Section.UB)
RULES = [CAST, VAR, ELTWISE]


def write_fusion_result(trial_dir: Path, graph: dict[str, int], ub: dict[str, int]) -> None:
    """``fusion_result.json`` where CANN writes it, effect counts as strings like the compiler's."""
    folder = trial_dir / "FE" / "1234"
    folder.mkdir(parents=True)
    sections = {"graph_fusion": graph, "ub_fusion": ub}
    document = {
        "g0": {
            section: {name: {"match_times": str(max(n, 1)), "effect_times": str(n)} for name, n in passes.items()}
            for section, passes in sections.items()
        }
    }
    (folder / "fusion_result.json").write_text(json.dumps(document))


def test_switch_files_are_byte_identical_to_what_the_engine_rendered_before() -> None:
    base = parse_switch_text('{"Switch": {"GraphFusion": {"OtherPass": "off"}}}')
    rendered = CannBackend(base_cfg=base).render(RULES, [VAR])
    assert rendered.switch_text == render_switch(RULES, [VAR], base)
    assert rendered.env_defaults == {"ASCEND_WORK_PATH": "{trial_dir}"}


def test_the_backend_of_a_search_is_cann_with_its_base_cfg() -> None:
    class Config:
        base_cfg = parse_switch_text('{"Switch": {"UBFusion": {"X": "on"}}}')

    backend = backend_for(Config())
    assert backend.name == "cann" and '"X": "on"' in backend.render(RULES, []).switch_text


def test_without_counts_a_ubfusion_rule_is_switched_off_and_the_search_layer_stays_neutral() -> None:
    pair = frozenset({CAST, ELTWISE})
    rule, reason = CannBackend().chooser({})(pair)
    assert rule == ELTWISE and "UBFusion rule" in reason
    assert default_choose_off(pair)[0] == CAST  # the pure layer knows no compiler: first by name


def test_counts_win_over_the_section_preference() -> None:
    rule, reason = CannBackend().chooser({CAST: 1, ELTWISE: 9})(frozenset({CAST, ELTWISE}))
    assert rule == CAST and "fewest places" in reason


def test_the_fusion_result_hook_journals_the_proof_and_the_counts(tmp_path: Path) -> None:
    write_fusion_result(tmp_path, {CAST.name: 3, "NotACandidate": 7}, {ELTWISE.name: 2})
    hooks = CannBackend().hooks(RULES)
    facts = collect_artifacts(hooks, TrialFiles(tmp_path, frozenset(r.name for r in RULES), "all_on"))
    assert facts["fusion_result"]["effects"] == {CAST.name: 3, ELTWISE.name: 2}
    assert switch_check_of(facts) == ("applied", facts["fusion_result"]["switch_check"]["message"])
    assert effects_of(facts) == {CAST.name: 3, ELTWISE.name: 2}
    json.dumps(facts)  # journal-ready


def test_a_switched_off_rule_that_fired_is_ignored(tmp_path: Path) -> None:
    write_fusion_result(tmp_path, {CAST.name: 3}, {})
    facts = collect_artifacts(CannBackend().hooks(RULES), TrialFiles(tmp_path, frozenset({VAR.name})))
    status, message = switch_check_of(facts)
    assert status == "ignored" and "CastRemoveFusionPass (GraphFusion) fired although switched off" in message


def test_no_file_is_unverified_and_an_unreadable_one_costs_only_the_proof(tmp_path: Path) -> None:
    facts = collect_artifacts(CannBackend().hooks(RULES), TrialFiles(tmp_path, frozenset()))
    assert switch_check_of(facts)[0] == "unverified" and "effects" not in facts["fusion_result"]
    (tmp_path / "fusion_result.json").write_text("[" * 5000)
    facts = collect_artifacts(CannBackend().hooks(RULES), TrialFiles(tmp_path, frozenset()))
    status, message = switch_check_of(facts)
    assert status == "unverified" and message.startswith("unreadable fusion_result.json")
    assert "error" in facts["fusion_result"]


def test_a_hook_that_crashes_does_not_lose_the_trial(tmp_path: Path) -> None:
    class Broken:
        name = "broken"

        def collect(self, files: TrialFiles) -> dict:
            raise RuntimeError("boom")

    facts = collect_artifacts([Broken()], TrialFiles(tmp_path, frozenset()))
    assert facts == {"broken": {"error": "RuntimeError: boom"}}
    assert switch_check_of(facts) == ("unverified", "RuntimeError: boom")


REAL = Path(__file__).resolve().parents[2] / "fixtures" / "ascend-real"


def test_every_real_shape_proves_the_switch_and_journals_the_counts(tmp_path: Path) -> None:
    """List and flat files (as real trainings and atc leave them) are read like the keyed one."""
    gru, ub = Rule("GRUFusionPass", Section.GRAPH), Rule("TbeCommonRules0FusionPass", Section.UB)
    layer_norm = Rule("LayerNormGradV3FusionPass", Section.GRAPH)
    cases = [("fusion_result.flat.atc-ctpn.json", [gru, ub], {gru.name: 20, ub.name: 150}),
             ("fusion_result.array.open-sora-plan.json", [layer_norm], {layer_norm.name: 1})]
    for name, candidates, effects in cases:
        trial_dir = tmp_path / name
        trial_dir.mkdir()
        (trial_dir / "fusion_result.json").write_text((REAL / name).read_text())
        facts = collect_artifacts(
            CannBackend().hooks(candidates), TrialFiles(trial_dir, frozenset(r.name for r in candidates), "all_on")
        )
        assert switch_check_of(facts)[0] == "applied", name
        assert facts["fusion_result"]["effects"] == effects
        # Switched off, the same file shows the compiler ignored the switch.
        off = collect_artifacts(CannBackend().hooks(candidates), TrialFiles(trial_dir, frozenset()))
        assert switch_check_of(off)[0] == "ignored"


def test_an_unreadable_file_beside_a_readable_one_is_named_and_no_partial_counts_are_journaled(tmp_path: Path) -> None:
    write_fusion_result(tmp_path, {CAST.name: 3}, {})
    (tmp_path / "fusion_result.json").write_text('[{"graph_fusion": {"A": {"effect_times": "x"}}}]')
    facts = collect_artifacts(CannBackend().hooks(RULES), TrialFiles(tmp_path, frozenset(r.name for r in RULES)))
    status, message = switch_check_of(facts)
    assert status == "unverified"
    assert str(tmp_path / "fusion_result.json") in message and "'x'" in message
    assert "effects" not in facts["fusion_result"]
    assert facts["fusion_result"]["unreadable"][0]["path"] == str(tmp_path / "fusion_result.json")
