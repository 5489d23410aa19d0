"""Early passes from the CLI, on a fake training whose culprits' damage shows in its loss part-way.

The fake prints ``step N loss X`` and appends the same to the metrics file; a
training broken by a culprit has its loss rise from ``--damage-from`` on (per
culprit with ``--damage-at``). The all-on training leaves the baseline's band
there, which sets the horizon at twice that step.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import yaml

from tests.support.cli import CULPRIT, GRAPH, launches, write_config
from tests.support.fake_training import run_fusion_dd

LATE = GRAPH[3]
CURVE = ("--steps", "40", "--step-sleep", "0.03", "--damage-from", "8")


def report(tmp_path: Path) -> dict:
    return json.loads((tmp_path / ".fusion-dd" / "report.json").read_text())


def culprits(found: dict) -> list[list[str]]:
    return sorted(sorted(rule["name"] for rule in culprit["rules"]) for culprit in found["culprits"])


def test_early_passes_save_steps_and_a_full_training_proves_the_fix(tmp_path: Path) -> None:
    write_config(tmp_path, "--culprits", CULPRIT, *CURVE)
    done = run_fusion_dd("search", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    found = report(tmp_path)
    assert culprits(found) == [[CULPRIT]] and found["fix_verified"]
    early = [trial for trial in found["trials"] if trial.get("kind") == "early_pass"]
    assert early and all(trial["outcome"] == "pass" and trial["steps"] < 40 for trial in early)
    assert all(trial["role"] in ("search", "repeat") for trial in early)  # never a reference
    # The fix's own verdict is a full training that passed: a proof, or a full training of the search.
    fix = sorted(name for name in {rule for trial in found["trials"] for rule in trial["configuration"]}
                 if name != CULPRIT)  # fmt: skip
    fix_trials = [trial for trial in found["trials"] if trial["configuration"] == fix and trial["repeat"] == 0]
    assert any(trial.get("kind") == "metric" and trial["outcome"] == "pass" for trial in fix_trials)
    # The fix candidate trains to its end (a failing one would still stop early): its pass is the
    # fix's proof, so there is neither an early pass of it nor a separate proof training.
    assert fix_trials[0]["role"] == "search" and fix_trials[0]["kind"] == "metric"
    assert not [trial for trial in found["trials"] if trial["role"] == "proof"]
    # The summary counts the fix's trainings that ran to the horizon apart from the full ones.
    fix_early = sum(trial.get("kind") == "early_pass" for trial in found["trials"] if trial["configuration"] == fix)
    assert found["fix_verified_early"] == fix_early == 1  # the guard's second training, to the horizon
    full = found["fix_verified_by"] - fix_early
    assert f"({full} to its end, 1 stopped early at the horizon)" in done.stdout
    cost = found["cost"]
    assert cost["steps_per_full_training"] == 40 and cost["steps_unknown"] == 0
    assert cost["training_steps"] == sum(trial["steps"] for trial in found["trials"])
    assert cost["training_steps"] < 40 * cost["trainings"]  # the early passes saved steps
    assert cost["device_seconds"] > 0
    assert "training-steps" in done.stdout and "early passes:" in done.stdout
    assert found["early_passes"]["trainings"] == len(early) and not found["early_passes"]["revised"]


def test_pass_at_off_trains_every_configuration_to_its_end(tmp_path: Path) -> None:
    write_config(tmp_path, "--culprits", CULPRIT, *CURVE, early_stop={"pass_at": "off"})
    done = run_fusion_dd("search", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    found = report(tmp_path)
    assert culprits(found) == [[CULPRIT]]
    assert not [trial for trial in found["trials"] if trial.get("kind") == "early_pass"]
    assert found["cost"]["training_steps"] == 40 * found["cost"]["trainings"]
    assert "early passes:" not in done.stdout


def test_damage_after_the_horizon_is_caught_by_the_fix_s_full_training(tmp_path: Path) -> None:
    """LATE's damage starts at step 30, past the horizon (16): early passes wrongly vouch for it."""
    write_config(tmp_path, "--culprits", f"{CULPRIT},{LATE}", *CURVE, "--damage-at", f"{LATE}:30")
    done = run_fusion_dd("search", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    found = report(tmp_path)
    assert culprits(found) == sorted([[CULPRIT], [LATE]]) and found["fix_verified"]
    assert found["early_passes"]["revised"] and found["early_passes"]["contradicted_by"]
    assert "early verdicts revised" in done.stdout
    # Caught by the fix candidate's own training, which ran past the horizon, not by a proof after the search.
    (reason,) = found["early_passes"]["revised"]
    assert reason.startswith("the fix candidate's full training #") and "failed after the horizon" in reason
    assert not [trial for trial in found["trials"] if trial["role"] == "proof"]
    # After the revision, no training passes early: the answer rests on full trainings.
    journal = [json.loads(line) for line in (tmp_path / ".fusion-dd" / "journal.jsonl").read_text().splitlines()]
    revision = next(index for index, record in enumerate(journal) if record.get("type") == "early_passes_revised")
    later = [record for record in journal[revision:] if record.get("type") == "trial_finished"]
    assert later and all(record["kind"] not in ("early_pass", "early_fail") for record in later)


def test_a_fix_candidate_that_left_the_band_before_the_horizon_revises_no_early_pass(tmp_path: Path) -> None:
    """LATE's damage starts at step 15, inside the horizon (16), and patience stops the fix
    candidate only at step 17: early passes saw that damage, so its failure is an ordinary one."""
    write_config(tmp_path, "--culprits", f"{CULPRIT},{LATE}", *CURVE, "--damage-at", f"{LATE}:15")
    done = run_fusion_dd("search", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    found = report(tmp_path)
    assert culprits(found) == sorted([[CULPRIT], [LATE]]) and found["fix_verified"]
    journal = [json.loads(line) for line in (tmp_path / ".fusion-dd" / "journal.jsonl").read_text().splitlines()]
    stopped = [record["early_stop"] for record in journal if record.get("kind") == "early_fail"]
    assert any(stop["step"] > 16 >= stop["departed"] for stop in stopped), stopped
    assert not found["early_passes"]["revised"], found["early_passes"]
    assert "early verdicts revised" not in done.stdout


def test_a_resumed_search_with_early_passes_and_a_revision_asks_the_same_questions(tmp_path: Path) -> None:
    uninterrupted, interrupted = tmp_path / "whole", tmp_path / "parts"
    args = ("--culprits", f"{CULPRIT},{LATE}", *CURVE, "--damage-at", f"{LATE}:30")
    for where in (uninterrupted, interrupted):
        where.mkdir()
        write_config(where, *args)
    assert run_fusion_dd("search", cwd=uninterrupted).returncode == 0
    total = report(uninterrupted)["trainings"]
    # Stop once right after the proof that contradicts the early passes, and once mid-way through the next round.
    for budget in (12, total - 4, total + 20):
        document = yaml.safe_load((interrupted / "fusion-dd.yaml").read_text())
        document["search"]["budget"] = budget
        (interrupted / "fusion-dd.yaml").write_text(yaml.safe_dump(document))
        step = run_fusion_dd("search", cwd=interrupted)
        assert step.returncode in (0, 3), step.stderr
    assert step.returncode == 0, step.stderr
    assert Counter(launches(interrupted)) == Counter(launches(uninterrupted))
    assert culprits(report(interrupted)) == culprits(report(uninterrupted))


def test_a_bad_pass_at_is_one_line_and_exit_2(tmp_path: Path) -> None:
    write_config(tmp_path, "--culprits", CULPRIT, early_stop={"pass_at": "soon"})
    done = run_fusion_dd("search", cwd=tmp_path)
    assert done.returncode == 2
    assert "early_stop.pass_at: 'soon' is not valid" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / ".fusion-dd" / "journal.jsonl").exists()


def test_early_failures_stop_failing_trainings_and_each_culprit_set_is_proven_alone(tmp_path: Path) -> None:
    other = GRAPH[5]
    write_config(tmp_path, "--culprits", f"{CULPRIT},{other}", *CURVE)
    done = run_fusion_dd("search", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    found = report(tmp_path)
    assert culprits(found) == sorted([[CULPRIT], [other]]) and found["fix_verified"]
    early = [trial for trial in found["trials"] if trial.get("kind") == "early_fail"]
    assert early and all(trial["outcome"] == "fail" and trial["steps"] < 40 for trial in early)
    assert all(trial["role"] in ("search", "repeat") for trial in early)  # never a reference or a proof
    # Each set's failure is a full training of that set alone, never only early failures.
    by_id = {trial["trial_id"]: trial for trial in found["trials"]}
    proofs = [by_id[trial_id] for trial_id in found["early_passes"]["culprits_proven_by"]]
    assert sorted(trial["configuration"] for trial in proofs) == sorted([[CULPRIT], [other]])
    assert all(trial["kind"] == "metric" and trial["outcome"] == "fail" for trial in proofs)
    # The set found first was asked alone before a fix candidate failed: it failed early, and is
    # trained again for its proof. The second was asked alone after that: its own training ran
    # on past the band and is the proof, with no second training of it.
    assert sorted(trial["role"] for trial in proofs) == ["proof", "search"]
    first, second = sorted(proofs, key=lambda trial: trial["role"])  # "proof" < "search"
    assert int(second["trial_id"]) < int(first["trial_id"])  # proven while searching, the other at the end
    asked_alone = Counter(tuple(trial["configuration"]) for trial in found["trials"])
    assert asked_alone[tuple(first["configuration"])] == 2 and asked_alone[tuple(second["configuration"])] == 1
    journal = [json.loads(line) for line in (tmp_path / ".fusion-dd" / "journal.jsonl").read_text().splitlines()]
    flagged = [record["trial_id"] for record in journal if record.get("fails_to_end")]
    assert second["trial_id"] in flagged and first["trial_id"] not in flagged
    assert found["early_passes"]["early_fails"] == len(early) and not found["early_passes"]["revised"]
    assert "early failures:" in done.stdout


def test_a_culprit_set_that_passes_its_full_training_alone_withdraws_the_early_failures_that_blamed_it(
    tmp_path: Path,
) -> None:
    """With LIAR on, the loss rises from step 8 as a culprit's would, but the accuracy stays good."""
    liar = GRAPH[5]
    write_config(tmp_path, "--culprits", CULPRIT, *CURVE, "--curve-damage", f"{liar}:8")
    done = run_fusion_dd("search", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    found = report(tmp_path)
    assert culprits(found) == [[CULPRIT]] and found["fix_verified"]
    journal = [json.loads(line) for line in (tmp_path / ".fusion-dd" / "journal.jsonl").read_text().splitlines()]
    revisions = [record for record in journal if record.get("type") == "early_passes_revised"]
    assert [(record["scope"], record["config"]) for record in revisions] == [("containing", [liar])]
    assert found["early_passes"]["contradicted_by"] == [revisions[0]["trial_id"]]
    assert "early verdicts revised" in done.stdout
    # The handed-over fix keeps the liar on: its own full training passed.
    everything = next(trial["configuration"] for trial in found["trials"] if trial["role"] == "all_on")
    fix = sorted(set(everything) - set(found["switched_off"]))
    assert liar in fix and CULPRIT not in fix
    assert any(trial["configuration"] == fix and trial.get("kind") == "metric" and trial["outcome"] == "pass"
               for trial in found["trials"])  # fmt: skip


def test_a_curve_printed_but_not_written_is_read_from_the_output_with_the_pattern_it_names(tmp_path: Path) -> None:
    config = write_config(tmp_path, "--culprits", CULPRIT, *CURVE, "--no-metrics-file")
    read = run_fusion_dd("search", cwd=tmp_path)
    assert read.returncode == 0, read.stderr
    said = next(line for line in read.stderr.splitlines() if line.startswith("loss curves: read from output.log"))
    assert "('step 40 loss" in said and "early_stop.step_pattern '" in said, said
    assert "early passes: a search training" in read.stderr, read.stderr
    found = report(tmp_path)
    assert culprits(found) == [[CULPRIT]] and found["fix_verified"]
    assert [trial for trial in found["trials"] if trial.get("kind") == "early_pass"]
    assert found["cost"]["steps_unknown"] == 0 and "steps_advice" not in found["cost"]
    named = found["early_passes"]["curves_from_output"]
    assert named["printed"].startswith("step 40 loss") and f"early_stop.step_pattern '{named['step_pattern']}'" in said
    assert named["source"] == "the baseline's output"
    # step_pattern: off reads no output (the named pattern itself is tested in tests/runner/test_early_stop.py).
    document = yaml.safe_load(config.read_text())
    document["early_stop"] = {"step_pattern": "off"}
    config.write_text(yaml.safe_dump(document))
    again = run_fusion_dd("search", "--restart", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "loss curves: read from output.log" not in again.stderr and culprits(report(tmp_path)) == [[CULPRIT]]
    off = next(line for line in again.stderr.splitlines() if line.startswith("early passes off:"))
    assert "step_pattern: off reads no output" in off, off
    assert not [trial for trial in report(tmp_path)["trials"] if trial.get("kind") == "early_pass"]
    assert "curves_from_output" not in report(tmp_path)["early_passes"]


def test_a_loss_that_scatters_per_step_still_passes_early_and_only_culprits_fail_early(tmp_path: Path) -> None:
    """A printed curve with 15 % noise per step: healthy trainings pass early, none fails early."""
    write_config(tmp_path, "--culprits", CULPRIT, *CURVE, "--loss-noise", "0.15", "--damage-rate", "0.3",
                 "--no-metrics-file")  # fmt: skip
    done = run_fusion_dd("search", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "early passes: a search training" in done.stderr, done.stderr
    found = report(tmp_path)
    assert culprits(found) == [[CULPRIT]] and found["fix_verified"]
    early_fails = [trial for trial in found["trials"] if trial.get("kind") == "early_fail"]
    assert all(CULPRIT in trial["configuration"] for trial in early_fails), early_fails
    assert [trial for trial in found["trials"] if trial.get("kind") == "early_pass"]
    assert not found["early_passes"]["revised"]


def test_a_divergence_band_narrower_than_the_losss_scatter_is_warned_of_after_the_references(tmp_path: Path) -> None:
    write_config(tmp_path, "--culprits", CULPRIT, *CURVE, "--loss-noise", "0.15", budget=3,
                 early_stop={"divergence": 0.1, "relative": True})  # fmt: skip
    done = run_fusion_dd("search", cwd=tmp_path)
    assert done.returncode == 3, done.stderr  # the budget: the warning comes after the references
    warning = next(line for line in done.stderr.splitlines() if line.startswith("warning: early_stop.divergence"))
    assert "0.1 relative is narrower than the baseline's own scatter" in warning and "widen it to at least" in warning


def test_a_damage_that_never_shows_in_the_loss_says_why_there_are_no_early_passes(tmp_path: Path) -> None:
    write_config(tmp_path, "--culprits", CULPRIT, "--steps", "10")  # a flat curve: the damage is in the metric only
    done = run_fusion_dd("search", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "early passes off: the all-on training's loss never left the baseline's band" in done.stderr, done.stderr


def test_a_damage_seen_late_in_all_on_says_a_horizon_would_reach_the_end(tmp_path: Path) -> None:
    write_config(tmp_path, "--culprits", CULPRIT, "--steps", "20", "--step-sleep", "0.01", "--damage-from", "12")
    done = run_fusion_dd("search", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stderr.splitlines() if line.startswith("early passes off:"))
    assert "would reach the training's end (20 steps)" in line, line
    assert not [trial for trial in report(tmp_path)["trials"] if trial.get("kind") == "early_pass"]


def test_a_step_pattern_in_the_config_reads_printed_curves_for_the_search_and_the_page(tmp_path: Path) -> None:
    write_config(tmp_path, "--culprits", CULPRIT, *CURVE, "--no-metrics-file",
                 early_stop={"step_pattern": r"step (\d+) loss (\S+)"})  # fmt: skip
    done = run_fusion_dd("search", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "loss curves: read from output.log" not in done.stderr  # the config said how: nothing to tell
    found = report(tmp_path)
    assert culprits(found) == [[CULPRIT]] and found["fix_verified"]
    assert [trial for trial in found["trials"] if trial.get("kind") == "early_pass"]
    named = found["early_passes"]["curves_from_output"]
    assert named["source"] == "config" and named["step_pattern"] == r"step (\d+) loss (\S+)"
    # The page draws the printed curves of the trainings that are not journaled too: the culprit's and the fix's.
    shown = run_fusion_dd("report", "--html", "page.html", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    page = (tmp_path / "page.html").read_text(encoding="utf-8")
    drawn = set(re.findall(r'"label": "([^"(]+) \(#\d+\)", "points": \[\[', page))  # curves with points
    assert {"baseline", "all on", f"culprit 1: {CULPRIT}", "fix"} <= drawn, drawn
