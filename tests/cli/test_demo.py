"""`fusion-dd demo` end to end: the built-in training, the real engine, real subprocesses.

A demo search is the slowest thing in the suite (numpy trainings), so the tests
share one: the README's `fusion-dd demo` itself (the default scenario, the default
state directory), run once for the module. The other scenarios' planted faults
are checked training by training in tests/demo/test_demo_planted.py.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from fusion_dd.demo import DEFAULT_SCENARIO, SCENARIOS
from tests.support.fake_training import call_fusion_dd, run_fusion_dd
from tests.support.html_page import check_html_report


def planted(name: str) -> list[set[str]]:
    return sorted((set(culprit) for culprit in SCENARIOS[name].planted), key=sorted)


def found(report: dict) -> list[set[str]]:
    return sorted(({rule["name"] for rule in culprit["rules"]} for culprit in report["culprits"]), key=sorted)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    """`fusion-dd demo --jobs 2` in a fresh directory: its output and its state directory."""
    cwd = tmp_path_factory.mktemp("demo")
    result = run_fusion_dd("demo", "--jobs", "2", cwd=cwd, env={"FUSION_DD_HTML": "1"})
    return result, cwd / ".fusion-dd-demo"


@pytest.fixture(scope="module")
def report(demo) -> dict:
    result, state = demo
    assert result.returncode == 0, result.stderr
    return json.loads((state / "report.json").read_text())


def test_the_default_scenario_finds_every_planted_culprit_set(report) -> None:
    assert report["status"] == "found"
    assert found(report) == planted(DEFAULT_SCENARIO)
    assert {culprit["kind"] for culprit in report["culprits"]} == {"independent", "interacting"}


def test_the_demo_is_guided_by_the_references_dumps(report, demo) -> None:
    """Dumps on (the default): the references' comparison ranks the rules, the summary shows it."""
    result, state = demo
    guide = report["guide"]
    assert guide["mode"] == "dumps" and guide["dumps"]["trials"] == ["0001", "0002"]
    # The independent culprit's fused op is the first to go wrong: it is among the first suspects.
    assert "LayerNormFusionPass" in guide["ranking"][:4]
    assert {entry["rule"] for entry in guide["evidence"]} == set(guide["ranking"])
    assert "guide: suspects asked first (the top one alone, then the next ones together), ranked by the references' tensor dumps:" in result.stdout
    assert "LayerNormFusionPass: first bad op" in result.stdout
    from fusion_dd.store.journal import read_records

    records = read_records(state / "journal.jsonl")
    assert [r["ranking"] for r in records if r.get("type") == "guide"] == [guide["ranking"]]


def test_the_later_search_is_ranked_by_the_failing_fix_candidates_dump(report, demo) -> None:
    """Inside the failing fix (LayerNorm off), its own dump leads to the pair's fused op, and the pair's
    other rule (it makes no bad op) is asked as a partner: the whole default demo in at most 17 trainings
    (16, plus the fix's second training that "verified" rests on)."""
    result, state = demo
    from fusion_dd.coordinator.replay import rebuild_from_dir
    from fusion_dd.store.journal import read_records

    refined = [r for r in read_records(state / "journal.jsonl") if r.get("type") == "guide_refined"]
    assert len(refined) == 1 and "LayerNormFusionPass" not in refined[0]["config"]
    assert refined[0]["ranking"][0] == "ZReduceMeanVarianceFusionPass"
    assert "CastRemoveFusionPass" in refined[0]["partners"]["ZReduceMeanVarianceFusionPass"]
    assert report["guide"]["refined"][0]["off"] == ["LayerNormFusionPass"]
    partners = "asked with ZReduceMeanVarianceFusionPass when it passes alone: CastRemoveFusionPass <- culprit"
    assert partners in result.stdout
    # Everything counted: the fix's two trainings, and the full training of a culprit set alone that
    # backs its early failures.
    assert report["trainings"] <= 18
    # The journal alone replays to the same answer: the refinement is read back, never recomputed.
    rebuilt = rebuild_from_dir(state, running=False).report
    assert found(rebuilt) == found(report) and rebuilt["trainings"] == report["trainings"]
    assert rebuilt["guide"]["refined"] == report["guide"]["refined"]


def test_the_demo_fix_is_verified_and_written(report, demo) -> None:
    _, state = demo
    assert report["fix_verified"] is True
    off = set(report["switched_off"])
    assert len(off) == 2 and all(off & culprits for culprits in planted(DEFAULT_SCENARIO))
    assert (state / "fusion_switch.cfg").exists()


def test_every_demo_training_that_fuses_proves_its_switch_file_applied(report) -> None:
    # The demo writes fusion_result.json like CANN; with nothing fusing (every candidate off,
    # or a suspect asked alone that fuses nothing in this network) it reports no section at
    # all, so only those runs stay unverified. It writes the file when its training ends, so a
    # training stopped early (an early pass or failure) leaves none either.
    alone = sum(
        1 for trial in report["trials"]
        if len(trial["configuration"]) == 1 or trial.get("kind") in ("early_pass", "early_fail")
    )  # fmt: skip
    assert sum(report["switch_check"].values()) == report["trainings"]
    assert report["switch_check"]["applied"] >= report["trainings"] - 1 - alone
    assert set(report["switch_check"]) <= {"applied", "unverified"}


def test_the_demo_compares_what_it_found_with_what_it_planted(demo) -> None:
    result, state = demo
    assert "all planted culprit sets found; fix verified: yes" in result.stdout
    assert f"demo scenario {DEFAULT_SCENARIO!r}" in result.stderr
    for culprits in planted(DEFAULT_SCENARIO):
        assert any(line.split()[-1:] == ["found"] and " + ".join(sorted(culprits)) in line
                   for line in result.stdout.splitlines())
    config = yaml.safe_load((state / "fusion-dd.yaml").read_text())
    assert config["train"]["command"][config["train"]["command"].index("--scenario") + 1] == DEFAULT_SCENARIO


def assert_localized_where_planted(report: dict, name: str, stdout: str) -> None:
    """Dumping is on by default: each culprit set is localized to a layer its fault damages."""
    scenario = SCENARIOS[name]
    by_set = {frozenset(rule["name"] for rule in c["rules"]): c["localization"] for c in report["culprits"]}
    for culprit, damaged in zip(scenario.planted, scenario.damaged, strict=True):
        found = by_set[frozenset(culprit)]
        assert {layer.split("/")[0] for layer in found["layers"]} <= set(damaged), found
        assert set(found["rules"]) <= culprit and found["rules"], found
        assert f"{' + '.join(found['rules'])} broke {found['op']}" in stdout
    assert report["localization"]["status"] == "complete"
    assert "every planted culprit localized to the layer it damaged" in stdout


def test_the_demo_localizes_every_culprit_where_it_was_planted(report, demo) -> None:
    result, _ = demo
    assert_localized_where_planted(report, DEFAULT_SCENARIO, result.stdout)


def test_no_localize_writes_a_demo_config_without_dumping(tmp_path):
    from fusion_dd.demo.config import write_demo_config

    with_dumps = yaml.safe_load(write_demo_config(tmp_path / "a", DEFAULT_SCENARIO).read_text())
    assert with_dumps["localize"] == {"env": {"FUSION_DD_DUMP_DIR": "{dump_dir}"}}
    without = yaml.safe_load(write_demo_config(tmp_path / "b", DEFAULT_SCENARIO, localize=False).read_text())
    assert "localize" not in without


def test_the_demo_writes_its_html_report_and_says_where(report, demo) -> None:
    result, state = demo
    assert "html report: .fusion-dd-demo/report.html" in result.stdout
    page = check_html_report(state / "report.html", state)
    assert len(page.tables["culprits"]) == 1 + len(report["culprits"])


def test_the_demo_html_report_says_where_each_culprit_broke_in_the_summarys_words(report, demo) -> None:
    from fusion_dd.report.localize import culprit_sentence

    result, state = demo
    page = check_html_report(state / "report.html", state)
    text = (state / "report.html").read_text()
    visible = text[: text.index('<script type="application/json"')]
    cells = [row[-1] for row in page.tables["culprits"][1:]]
    for culprit, cell in zip(report["culprits"], cells):
        op = culprit["localization"]["op"]
        assert op in cell  # the op by name, e.g. ln_a/add_beta
        sentence = culprit_sentence(culprit)
        assert sentence in cell and sentence in result.stdout  # one text, the terminal's
    assert "ln_a/add_beta" in visible
    assert "{&quot;" not in visible and '{"' not in visible  # no raw JSON anywhere on the page
    # The guide's ranking as a table, the culprits marked.
    ranked = page.tables["guide"][1:]
    assert [row[1] for row in ranked][:1] == report["guide"]["ranking"][:1]
    assert any(row[-1] == "culprit" for row in ranked)
    # The fix said once.
    fix = visible[visible.index('<p id="fix">') :]
    fix = fix[: fix.index("</p>")]
    assert fix.count("trained and passes") == 1 and fix.count("every other fusion stays on") == 1


def test_list_scenarios_and_bad_scenario(tmp_path):
    listed = run_fusion_dd("demo", "--list-scenarios", cwd=tmp_path)
    assert listed.returncode == 0
    for name in SCENARIOS:
        assert name in listed.stdout
    bad = call_fusion_dd("demo", "--scenario", "nope", cwd=tmp_path)  # refused before any training
    assert bad.returncode == 2 and "unknown scenario 'nope'" in bad.stderr


def test_autofuse_scenario_finds_the_autofuse_pair_and_the_rule_and_prints_the_export_line(demo, report):
    # 10 steps: both planted faults already show (the AutoFuse pair freezes the weights, the fused
    # LayerNorm cancels from the first step), and the search's 29 trainings cost about a quarter
    # less than at 20. The scenario's own length (60 steps) is checked in tests/demo/test_demo_planted.py.
    # Where the README's demo ran, as a newcomer tries the next scenario: a state directory of its own.
    _, default_state = demo
    cwd = default_state.parent
    result = run_fusion_dd("demo", "--scenario", "autofuse", "--steps", "10", "--jobs", "2", "--no-localize", cwd=cwd)
    assert result.returncode == 0, result.stderr
    state = cwd / ".fusion-dd-demo-autofuse"
    assert "config: .fusion-dd-demo-autofuse/fusion-dd.yaml" in result.stderr
    assert json.loads((default_state / "report.json").read_text()) == report  # the default demo's left as it was
    report = json.loads((state / "report.json").read_text())
    assert found(report) == planted("autofuse") == [{"LayerNormFusionPass"}, {"elemwise", "reduce"}]
    pair = next(c for c in report["culprits"] if len(c["rules"]) == 2)
    assert pair["kind"] == "interacting" and {r["section"] for r in pair["rules"]} == {"AutoFuse"}
    assert report["fix_verified"] is True
    flags = "--enable_autofuse=true;--autofuse_disable_pass=reduce"  # AutoFuse stays on, Reduce fusion off
    assert report["fix_env"] == {"AUTOFUSE_FLAGS": flags}
    assert (state / "autofuse_flags.txt").read_text().strip() == flags
    assert f"export AUTOFUSE_FLAGS='{flags}'" in result.stdout
    assert "all planted culprit sets found" in result.stdout
    fix = json.loads((state / "fusion_switch.cfg").read_text())
    assert fix["Switch"]["GraphFusion"]["LayerNormFusionPass"] == "off"
    assert "elemwise" not in json.dumps(fix)  # AutoFuse is not switched by the cfg


def test_a_bad_devices_or_budget_is_refused_as_search_refuses_it_before_anything_is_written(tmp_path):
    from fusion_dd.demo.config import write_demo_config

    config = write_demo_config(tmp_path / "search", DEFAULT_SCENARIO)  # search's line, on the demo's own config
    for option, state_dir in ((["--devices", "junk"], ["--state-dir", "x"]), (["--budget", "0"], [])):
        searched = call_fusion_dd("search", "-c", str(config), *option, cwd=tmp_path)
        # The devices case end to end, as the user met it; the budget case in process (nothing trains).
        run = run_fusion_dd if option[0] == "--devices" else call_fusion_dd
        demoed = run("demo", *option, *state_dir, cwd=tmp_path)
        assert searched.returncode == demoed.returncode == 2, demoed.stderr
        assert demoed.stderr == searched.stderr and demoed.stderr.startswith(f"fusion-dd: error: {option[0]}: ")
        assert len(demoed.stderr.splitlines()) == 1 and demoed.stdout == ""
    assert sorted(path.name for path in tmp_path.iterdir()) == ["search"]  # no x, no .fusion-dd-demo


def test_a_demo_asked_again_with_other_options_says_what_it_shows_and_names_the_demos_restart(demo, report, tmp_path):
    """On a copy of the README's finished demo: the way out of another definition is the demo's own."""
    import shutil

    _, finished = demo
    state = tmp_path / ".fusion-dd-demo"
    shutil.copytree(finished, state)
    config = (state / "fusion-dd.yaml").read_bytes()

    other = run_fusion_dd("demo", "--steps", "12", "--jobs", "2", cwd=tmp_path)
    assert other.returncode == 2 and other.stdout == ""
    assert other.stderr.splitlines() == [
        "fusion-dd: error: .fusion-dd-demo: holds a demo search with other options (changed: train.command); run "
        "this one afresh with 'fusion-dd demo --steps 12 --jobs 2 --restart' (moves the old one aside, nothing is "
        "deleted), or give it another --state-dir"
    ]
    assert (state / "fusion-dd.yaml").read_bytes() == config  # refused before the demo rewrote its config

    again = run_fusion_dd("demo", "--no-localize", "--jobs", "2", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert (
        "fusion-dd: .fusion-dd-demo: holds a finished demo search that ran with other options (localize); its "
        "answer is shown again as it ran; add --restart for a new one"
    ) in again.stderr.splitlines()
    assert "every planted culprit localized to the layer it damaged" in again.stdout  # the answer as it ran

    # Two references and one question (budget 3): enough to show the old search moved aside, a new one begun.
    fresh = run_fusion_dd("demo", "--steps", "12", "--jobs", "2", "--no-localize", "--budget", "3", "--restart", cwd=tmp_path)
    assert fresh.returncode == 3, fresh.stderr
    assert "fusion-dd: moved the old search aside: .fusion-dd-demo -> .fusion-dd-demo.1" in fresh.stderr
    assert json.loads((tmp_path / ".fusion-dd-demo.1" / "report.json").read_text())["culprits"] == report["culprits"]
    command = yaml.safe_load((state / "fusion-dd.yaml").read_text())["train"]["command"]
    assert command[command.index("--steps") + 1] == "12"
    assert json.loads((state / "report.json").read_text())["trainings"] == 3


def test_an_unfinished_demo_is_not_held_against_its_plant() -> None:
    from fusion_dd.cli import demo_comparison

    planted_sets = [("LayerNormFusionPass",)]
    for status in ("interrupted", "budget_exhausted"):
        lines = demo_comparison({"status": status, "culprits": []}, planted_sets, [("ln_a",)])
        assert lines == [f"planted vs found: the search has not finished ({status}); nothing to compare yet"]
    found = {
        "status": "found", "fix_verified": True, "localization": {"status": "incomplete"},
        "culprits": [{"rules": [{"name": "LayerNormFusionPass"}], "localization": {"reason": "not localized yet"}}],
    }  # fmt: skip
    lines = demo_comparison(found, planted_sets, [("ln_a",)])
    assert "all planted culprit sets found; fix verified: yes" in lines
    assert lines[-1] == "localization incomplete: 0 of 1 planted culprits localized so far"
