"""The XLA backend: XLA_FLAGS merged with the user's, and the proof from a real pass dump (recorded once)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fusion_dd.backends import backend_for, fix_env_of
from fusion_dd.backends.xla import XlaBackend, check, dumped_pass_names, known_passes, merge_flags, parse_debug_options, parse_dump
from fusion_dd.config.settings import parse_config
from fusion_dd.core.errors import UsageError
from fusion_dd.core.hooks import TrialFiles, collect_artifacts, effects_of, switch_check_of
from fusion_dd.core.rules import Rule, Section
from tests.support import FIXTURES

COMPILERS = FIXTURES / "compilers"
ALGSIMP = Rule("algsimp", Section.XLA_PASS)
CSE = Rule("cse", Section.XLA_PASS)
BF16 = Rule("float-normalization-bf16", Section.XLA_PASS)
EXCESS = Rule("xla_allow_excess_precision", Section.XLA_FLAG)
RULES = [ALGSIMP, CSE, BF16, EXCESS]


def names(which: str) -> list[str]:
    return (COMPILERS / f"xla_dump_{which}.names").read_text().split()


def options(which: str) -> str:
    return (COMPILERS / f"xla_{which}.debug_options").read_text()


def make_dump(trial_dir: Path, which: str, debug_options: str) -> None:
    dump = trial_dir / "xla"
    dump.mkdir(parents=True)
    for name in names(which):
        (dump / name).write_text("" if not name.endswith(".debug_options") else debug_options)


def config(tmp_path: Path, rules: str, env: dict[str, str] | None = None) -> object:
    document = {"rules": yaml.safe_load(rules), "train": {"command": ["python", "train.py"], "env": env}}
    return parse_config(document, tmp_path / "fusion-dd.yaml")


def test_off_passes_and_flags_render_into_xla_flags_with_the_trials_dump() -> None:
    flags = XlaBackend(user_env={}).render(RULES, [BF16]).env["XLA_FLAGS"]
    assert flags.split() == [
        "--xla_disable_hlo_passes=algsimp,cse",
        "--xla_allow_excess_precision=false",
        "--xla_dump_to={trial_dir}/xla",
        "--xla_dump_hlo_pass_re=.*",
    ]
    # All on: nothing disabled, the flag left at XLA's default; only the dump remains.
    assert XlaBackend(user_env={}).render(RULES, RULES).env["XLA_FLAGS"].split() == [
        "--xla_dump_to={trial_dir}/xla",
        "--xla_dump_hlo_pass_re=.*",
    ]


def test_the_users_flags_are_kept_and_merged() -> None:
    user = "--xla_cpu_enable_fast_math=false --xla_disable_hlo_passes=dce,cse --xla_allow_excess_precision=true --xla_dump_to=/mine"
    flags = merge_flags(user, RULES, [CSE, EXCESS], dumps=False).split()
    # The user's dce stays disabled; cse is a candidate (on here), so the configuration decides;
    # the candidate flag is on, so left at XLA's default; the user's own dump stays in the fix.
    assert flags == ["--xla_cpu_enable_fast_math=false", "--xla_dump_to=/mine", "--xla_disable_hlo_passes=dce,algsimp,float-normalization-bf16"]
    trial = merge_flags(user, RULES, [CSE, EXCESS], dumps=True).split()
    assert "--xla_dump_to=/mine" not in trial and "--xla_dump_to={trial_dir}/xla" in trial


def test_the_fix_exports_xla_flags_without_the_dump() -> None:
    backend = backend_for(type("Config", (), {"compiler": "xla", "train": type("T", (), {"env": {}})()})())
    assert fix_env_of(backend, RULES, [ALGSIMP, BF16]) == {
        "XLA_FLAGS": "--xla_disable_hlo_passes=cse --xla_allow_excess_precision=false"
    }


def test_fired_passes_come_from_the_dump_file_names() -> None:
    fired = parse_dump(names("all_on"))
    assert fired["algsimp"] == 2 and fired["cse"] == 1 and fired["float-normalization-bf16"] == 1
    assert "pipeline-start" not in fired
    off = parse_dump(names("algsimp_cse_off"))
    assert "algsimp" not in off and "cse" not in off and "float-normalization-bf16" in off
    assert {"algsimp", "simplify-sorts", "layout-assignment"} <= dumped_pass_names(names("all_on"))


def test_debug_options_prove_what_arrived() -> None:
    disabled, other = parse_debug_options(options("algsimp_cse_off"))
    assert disabled == {"algsimp", "cse"} and other["xla_allow_excess_precision"] == "false"


def test_the_hook_reads_a_real_dump(tmp_path: Path) -> None:
    make_dump(tmp_path, "algsimp_cse_off", options("algsimp_cse_off"))
    hook = XlaBackend(user_env={}).hooks(RULES)[0]
    facts = collect_artifacts([hook], TrialFiles(tmp_path, frozenset({"float-normalization-bf16"}), "search"))
    assert switch_check_of(facts)[0] == "applied"
    assert effects_of(facts) == {"float-normalization-bf16": 1}


def test_flags_that_never_arrived_stop_the_search_with_the_xla_hint() -> None:
    facts = check(RULES, ["float-normalization-bf16"], names("all_on"), [options("all_on")])
    assert facts["switch_check"]["status"] == "ignored"
    assert "XLA_FLAGS" in facts["switch_check"]["message"] and "switch file" not in facts["switch_check"]["message"]


def test_a_pass_that_fires_although_disabled_is_a_warning() -> None:
    # The all-on dump (algsimp fired) with debug options saying algsimp was disabled.
    facts = check([ALGSIMP, CSE], [], names("all_on"), ['xla_disable_hlo_passes: "algsimp"\nxla_disable_hlo_passes: "cse"\n'])
    assert facts["switch_check"]["status"] == "applied"
    assert facts["fired_although_off"] == ["algsimp", "cse"]


def test_without_a_dump_the_search_runs_unverified(tmp_path: Path) -> None:
    facts = XlaBackend(user_env={}).hooks(RULES)[0].collect(TrialFiles(tmp_path, frozenset(), "baseline"))
    assert facts["switch_check"]["status"] == "unverified" and "xla/" in facts["switch_check"]["message"]


def test_names_and_flags_are_candidates_and_unknown_passes_only_warn(tmp_path: Path) -> None:
    loaded = config(tmp_path, "{compiler: xla, names: [algsimp, xla_allow_excess_precision, algsimpp]}")
    assert [(rule.name, rule.section) for rule in loaded.rules] == [
        ("algsimp", Section.XLA_PASS),
        ("xla_allow_excess_precision", Section.XLA_FLAG),
        ("algsimpp", Section.XLA_PASS),
    ]
    assert len(loaded.warnings) == 1 and "'algsimpp'" in loaded.warnings[0] and "did you mean algsimp?" in loaded.warnings[0]
    assert {"algsimp", "cse", "float-normalization-bf16"} <= known_passes()


def test_candidates_from_a_dump_directory(tmp_path: Path) -> None:
    make_dump(tmp_path / "run", "all_on", options("all_on"))
    loaded = config(tmp_path, "{compiler: xla, from: run/xla, names: [xla_allow_excess_precision]}")
    found = {rule.name for rule in loaded.rules}
    assert {"algsimp", "cse", "float-normalization-bf16", "xla_allow_excess_precision"} <= found
    with pytest.raises(UsageError, match="unknown to the artifacts of rules.from; did you mean algsimp"):
        config(tmp_path, "{compiler: xla, from: run/xla, names: [algsimq], unknown: error}")


def test_a_name_with_a_separator_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"rules.names\[0\].*separates names"):
        config(tmp_path, "{compiler: xla, names: ['algsimp,cse']}")


def test_a_pass_missing_from_the_list_that_the_dump_names_is_confirmed(tmp_path: Path) -> None:
    make_dump(tmp_path, "all_on", options("all_on"))
    (tmp_path / "xla" / "module_0001.jit_f.0099.main.after_algsimp.before_brand-new-pass.txt").write_text("")
    rules = [ALGSIMP, Rule("brand-new-pass", Section.XLA_PASS)]
    facts = XlaBackend(user_env={}).hooks(rules)[0].collect(TrialFiles(tmp_path, frozenset({"algsimp", "brand-new-pass"}), "all_on"))
    assert facts["known_to_compiler"] == ["brand-new-pass"]


def test_a_top_level_pipeline_is_no_pass_name() -> None:
    found = dumped_pass_names(names("all_on"))
    assert "algsimp" in found and not any(name.startswith("HLO_passes") for name in found)
