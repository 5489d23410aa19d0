"""The ONNX Runtime backend: its environment variable, its names, its log (a real one, recorded once)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fusion_dd.backends import backend_for, fix_env_of
from fusion_dd.backends.ort import DISABLED_ENV, OrtBackend, check, known_names, parse_log_lines
from fusion_dd.config.settings import parse_config
from fusion_dd.core.errors import UsageError
from fusion_dd.core.hooks import TrialFiles, collect_artifacts, effects_of, fired_although_off_of, switch_check_of
from fusion_dd.integrations import ort_session_kwargs, ort_session_options
from fusion_dd.core.rules import Rule, Section
from tests.support import FIXTURES

COMPILERS = FIXTURES / "compilers"
LOG = COMPILERS / "ort_block_all_on.log"
GELU = Rule("GeluFusionL2", Section.ONNXRUNTIME)
LN = Rule("LayerNormFusionL1", Section.ONNXRUNTIME)
MATMUL = Rule("MatMulAddFusion", Section.ONNXRUNTIME)
RULES = [GELU, LN, MATMUL]


def config(tmp_path: Path, rules: str, **score: object) -> object:
    document = {"rules": None, "train": {"command": ["python", "train.py"]}, "score": score or None}
    import yaml

    document["rules"] = yaml.safe_load(rules)
    return parse_config(document, tmp_path / "fusion-dd.yaml")


def test_switched_off_names_go_into_one_variable_joined_by_semicolons() -> None:
    rendered = OrtBackend().render(RULES, [LN])
    assert rendered.env == {DISABLED_ENV: "GeluFusionL2;MatMulAddFusion"}
    assert rendered.switch_text.splitlines()[-2:] == ["GeluFusionL2", "MatMulAddFusion"]
    # All on: the variable is still set (empty), so an inherited value never leaks into a trial.
    assert OrtBackend().render(RULES, RULES).env == {DISABLED_ENV: ""}
    assert fix_env_of(OrtBackend(), RULES, [GELU, MATMUL]) == {DISABLED_ENV: "LayerNormFusionL1"}


def test_the_real_log_gives_what_ran_and_what_fired() -> None:
    ran, fired = parse_log_lines(LOG.read_text().splitlines())
    assert fired == {
        "MatMulAddFusion": 1,
        "LayerNormFusionL1": 1,
        "GeluFusionL2": 1,
        "RemoveDuplicateCastTransformer": 1,
        "CastFloat16Transformer": 1,
    }
    assert {"TransposeOptimizer_CPUExecutionProvider", "SimplifiedLayerNormFusion", "BiasGeluFusion"} <= ran
    assert ran <= known_names()  # every name ORT 1.32 logged is in the shipped list


def test_the_hook_reads_the_trials_output_log(tmp_path: Path) -> None:
    (tmp_path / "output.log").write_text(LOG.read_text())
    hook = OrtBackend().hooks(RULES)[0]
    facts = collect_artifacts([hook], TrialFiles(tmp_path, frozenset(rule.name for rule in RULES), "all_on"))
    assert switch_check_of(facts)[0] == "applied"
    assert effects_of(facts) == {"GeluFusionL2": 1, "LayerNormFusionL1": 1, "MatMulAddFusion": 1}


def test_a_disabled_transformer_absent_from_the_log_proves_the_switch() -> None:
    lines = [line for line in LOG.read_text().splitlines() if "GeluFusionL2" not in line]
    ran, fired = parse_log_lines(lines)
    facts = check(["GeluFusionL2", "LayerNormFusionL1"], ["LayerNormFusionL1"], ran, fired, True)
    assert facts["switch_check"]["status"] == "applied" and "fired_although_off" not in facts


def test_rules_that_fire_although_switched_off_are_named_not_a_stop() -> None:
    lines = [line for line in LOG.read_text().splitlines() if "GeluFusionL2" not in line]
    ran, fired = parse_log_lines(lines)
    facts = check(["GeluFusionL2", "CastFloat16Transformer"], [], ran, fired, True)
    assert facts["switch_check"]["status"] == "applied"
    assert fired_although_off_of({"onnxruntime_log": facts}) == ["CastFloat16Transformer"]
    assert "cannot be switched off" in facts["switch_check"]["message"]


def test_when_every_disabled_transformer_still_ran_no_switch_arrived() -> None:
    ran, fired = parse_log_lines(LOG.read_text().splitlines())
    facts = check(["GeluFusionL2", "LayerNormFusionL1", "MatMulAddFusion"], [], ran, fired, True)
    assert facts["switch_check"]["status"] == "ignored"
    message = facts["switch_check"]["message"]
    assert "ort_session_kwargs" in message and "switch file" not in message and "TensorFlow" not in message


def test_without_transformer_lines_the_search_runs_unverified() -> None:
    facts = check(["GeluFusionL2"], [], set(), {}, False)
    assert facts["switch_check"]["status"] == "unverified"
    assert "GraphTransformer" in facts["switch_check"]["message"]


def test_a_plain_name_list_is_accepted_without_warnings(tmp_path: Path) -> None:
    loaded = config(tmp_path, "{compiler: onnxruntime, names: [GeluFusionL2, TransposeOptimizer_CPUExecutionProvider, EliminateIdentity]}")
    assert [rule.name for rule in loaded.rules] == ["GeluFusionL2", "TransposeOptimizer_CPUExecutionProvider", "EliminateIdentity"]
    assert all(rule.section is Section.ONNXRUNTIME for rule in loaded.rules)
    assert loaded.warnings == () and backend_for(loaded).name == "onnxruntime"
    assert loaded.definition()["compiler"] == "onnxruntime"


def test_a_misspelled_name_is_an_error_with_an_onnxruntime_suggestion(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as info:
        config(tmp_path, "{compiler: onnxruntime, names: [GeluFusionL3]}")
    message = str(info.value)
    assert "rules.names[0]" in message and "did you mean GeluFusionL2?" in message
    assert "Pass" not in message and "fusion_result" not in message  # no CANN suggestion or hint


def test_transformers_that_cannot_be_switched_off_are_no_candidates(tmp_path: Path) -> None:
    loaded = config(tmp_path, "{compiler: onnxruntime, names: [GeluFusionL2, CastFloat16Transformer]}")
    assert [rule.name for rule in loaded.rules] == ["GeluFusionL2"]
    assert "CastFloat16Transformer" in loaded.warnings[0] and "whatever" in loaded.warnings[0]


def test_candidates_from_a_log_are_the_transformers_that_fired(tmp_path: Path) -> None:
    (tmp_path / "run.log").write_text(LOG.read_text())
    loaded = config(tmp_path, "{compiler: onnxruntime, from: run.log}")
    # The cast transformers fired too but cannot be switched off: said, and left out.
    assert sorted(rule.name for rule in loaded.rules) == ["GeluFusionL2", "LayerNormFusionL1", "MatMulAddFusion"]


@pytest.mark.parametrize(
    "rules, fragment",
    [
        ("{compiler: onnxruntime, GraphFusion: [GeluFusionL2]}", "rules.GraphFusion: is CANN's; with rules.compiler: onnxruntime"),
        ("{names: [GeluFusionL2]}", "rules.names: is the candidate list of rules.compiler: onnxruntime or xla"),
        ("{compiler: onnxruntim, names: [A]}", "did you mean onnxruntime?"),
        ("{compiler: onnxruntime, names: ['A;B']}", "separates names"),
        ("{compiler: onnxruntime}", "no candidate rules: list ONNX Runtime optimizer names under rules.names"),
    ],
)
def test_config_errors_speak_the_compilers_language(tmp_path: Path, rules: str, fragment: str) -> None:
    with pytest.raises(UsageError) as info:
        config(tmp_path, rules)
    assert fragment in str(info.value)


def test_the_session_helpers_do_nothing_outside_fusion_dd(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DISABLED_ENV, raising=False)
    monkeypatch.delenv("FUSION_DD_TRIAL_DIR", raising=False)

    class Options:
        log_severity_level = 2

        def add_session_config_entry(self, key: str, value: str) -> None:
            raise AssertionError("must not be called")

    assert ort_session_kwargs() == {}
    assert ort_session_options(Options()).log_severity_level == 2


def test_the_session_helpers_hand_over_the_list_inside_fusion_dd(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(DISABLED_ENV, "GeluFusionL2;LayerNormFusionL1")
    monkeypatch.setenv("FUSION_DD_TRIAL_DIR", str(tmp_path))
    entries: dict[str, str] = {}

    class Options:
        log_severity_level = 2

        def add_session_config_entry(self, key: str, value: str) -> None:
            entries[key] = value

    options = ort_session_options(Options())
    assert entries == {"optimization.disable_specified_optimizers": "GeluFusionL2;LayerNormFusionL1"}
    assert options.log_severity_level == 1  # info: the GraphTransformer lines are the proof
    monkeypatch.setitem(__import__("sys").modules, "onnxruntime", None)  # kwargs work without onnxruntime's log
    assert ort_session_kwargs() == {"disabled_optimizers": ["GeluFusionL2", "LayerNormFusionL1"]}


def test_a_candidate_the_log_never_lists_is_unknown_to_this_onnxruntime(tmp_path: Path) -> None:
    (tmp_path / "output.log").write_text(LOG.read_text())
    rules = [GELU, Rule("NchwcTransformerX", Section.ONNXRUNTIME), Rule("EliminateIdentity", Section.ONNXRUNTIME)]
    hook = OrtBackend().hooks(rules)[0]
    facts = hook.collect(TrialFiles(tmp_path, frozenset(rule.name for rule in rules), "all_on"))
    # Rewrite rules never show by name: only the transformer that never ran is named.
    assert facts["unknown_to_compiler"] == ["NchwcTransformerX"]
    off = hook.collect(TrialFiles(tmp_path, frozenset(), "baseline"))
    assert "unknown_to_compiler" not in off  # switched off, its absence proves nothing


@pytest.mark.parametrize(
    "class_name, rule_name",
    [("PadFusion", "Pad_Fusion"), ("MatmulBNFusion", "MatMul_BatchNormalization_Fusion"), ("ClipQuantFusion", "ClipQuantRewrite")],
)
def test_a_rewrite_rules_class_name_is_refused_for_the_name_onnxruntime_matches(tmp_path: Path, class_name: str, rule_name: str) -> None:
    # ONNX Runtime 1.32 matches disabled_optimizers against the rule's own name: the class name switches nothing.
    with pytest.raises(UsageError, match=f"did you mean {rule_name}\\?"):
        config(tmp_path, f"{{compiler: onnxruntime, names: [{class_name}]}}")
    assert config(tmp_path, f"{{compiler: onnxruntime, names: [{rule_name}]}}").warnings == ()


def test_the_transpose_optimizer_of_any_execution_provider_and_newer_transformers_are_known(tmp_path: Path) -> None:
    names = "[TransposeOptimizer_CUDAExecutionProvider, GeluApproximation, MatMulNBitsQkvFusion]"
    assert config(tmp_path, f"{{compiler: onnxruntime, names: {names}}}").warnings == ()


def test_a_name_missing_from_the_list_that_the_log_lists_is_confirmed(tmp_path: Path) -> None:
    loaded = config(tmp_path, "{compiler: onnxruntime, names: [GeluFusionL2, GeluFusionL9], unknown: warn}")
    assert "'GeluFusionL9' is unknown" in loaded.warnings[0] and "a name it lists is confirmed" in loaded.warnings[0]
    (tmp_path / "output.log").write_text(
        LOG.read_text() + "[I:onnxruntime:, graph_transformer.cc:15 Apply] GraphTransformer GeluFusionL9 modified: 0\n"
    )
    facts = OrtBackend().hooks(loaded.rules)[0].collect(TrialFiles(tmp_path, frozenset({"GeluFusionL2", "GeluFusionL9"}), "all_on"))
    assert facts["known_to_compiler"] == ["GeluFusionL9"] and "unknown_to_compiler" not in facts
