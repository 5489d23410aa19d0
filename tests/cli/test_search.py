"""The CLI end to end, through real subprocesses, against the fake training in tests/fakes."""

from __future__ import annotations

import fcntl
import json
import os

import pytest
import yaml

from fusion_dd.backends.cann.switch import load_switch_file
from fusion_dd.core.rules import Section
from fusion_dd.store.journal import read_records
from tests.support.cli import CULPRIT, GRAPH, UB, launches, write_config
from tests.support.fake_training import call_fusion_dd, run_fusion_dd


def test_search_finds_planted_culprit_with_two_devices(tmp_path):
    write_config(tmp_path, "--culprits", CULPRIT)
    result = run_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "culprits found" in result.stdout
    report = json.loads((tmp_path / ".fusion-dd" / "report.json").read_text())
    assert report["status"] == "found"
    assert report["culprits"] == [
        {
            "rules": [{"name": CULPRIT, "section": "GraphFusion"}],
            "kind": "independent",
            "switched_off": [CULPRIT],
            "reason": f"{CULPRIT} fails on its own, so it must be switched off",
            "trainings": 1,
            "support": 1,
        }
    ]
    assert report["fix_verified"] is True
    assert report["trainings"] == len(report["trials"]) == len(launches(tmp_path))
    assert {trial["device"] for trial in report["trials"]} == {"0", "1"}
    fix = load_switch_file(tmp_path / ".fusion-dd" / "fusion_switch.cfg")
    for name in GRAPH + UB:
        section = "GraphFusion" if name in GRAPH else "UBFusion"
        assert fix.entries[section][name] is (name != CULPRIT)
    assert len(set(launches(tmp_path))) == len(launches(tmp_path)), "a configuration was trained twice"

    again = run_fusion_dd("search", cwd=tmp_path)
    assert again.returncode == 0
    assert "already finished" in again.stderr
    assert CULPRIT in again.stdout
    assert len(launches(tmp_path)) == report["trainings"], "a finished search must not train again"

    status = run_fusion_dd("status", cwd=tmp_path)
    assert status.returncode == 0
    assert "state: finished" in status.stdout


def test_interacting_pair_is_found_and_one_rule_switched_off(tmp_path):
    """With search.strategy: ddmin, the one CLI search that is not bisect (the pure layer checks
    both strategies on every kind of culprit set; here the key reaches the engine)."""
    pair = f"{GRAPH[3]}+{UB[2]}"
    write_config(
        tmp_path, "--pair", pair, rules={"GraphFusion": GRAPH[:12], "UBFusion": UB[:4]}, search={"strategy": "ddmin"}
    )
    result = run_fusion_dd("search", "--jobs", "2", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / ".fusion-dd" / "report.json").read_text())
    journal = [json.loads(line) for line in (tmp_path / ".fusion-dd" / "journal.jsonl").read_text().splitlines()]
    assert [r["definition"]["strategy"] for r in journal if r["type"] == "search_started"] == ["ddmin"]
    (culprit,) = report["culprits"]
    assert culprit["kind"] == "interacting"
    assert {rule["name"] for rule in culprit["rules"]} == {GRAPH[3], UB[2]}
    assert len(culprit["switched_off"]) == 1 and culprit["reason"]
    assert report["fix_verified"] is True


def test_overlapping_pairs_switch_off_only_the_shared_rule(tmp_path):
    # {a, b} and {b, c}: switching off b alone defeats both. The order puts {a, b}
    # first and a before b by name, so the default choice for {a, b} alone is a and
    # the search goes on to find {b, c}; then b replaces a. The default strategy only:
    # tests/search/test_culprits.py checks overlapping sets for every strategy.
    a, b, c = sorted(GRAPH[:3])
    others = GRAPH[3:12]
    order = others[:2] + [a] + others[2:5] + [b] + others[5:8] + [c] + others[8:]
    write_config(
        tmp_path, "--pair", f"{a}+{b}", "--pair", f"{b}+{c}",
        rules={"GraphFusion": order, "UBFusion": UB[:2]},
    )
    result = run_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / ".fusion-dd" / "report.json").read_text())
    assert sorted(sorted(rule["name"] for rule in culprit["rules"]) for culprit in report["culprits"]) == [
        sorted([a, b]), sorted([b, c])
    ]
    assert [culprit["switched_off"] for culprit in report["culprits"]] == [[b], [b]]
    assert report["switched_off"] == [b] and report["fix_verified"] is True
    assert report["hitting_set"] == "exact" and report["may_hide"] == [b]
    fix = load_switch_file(tmp_path / ".fusion-dd" / "fusion_switch.cfg")
    assert [name for name in order if fix.state(name, Section.GRAPH) is False] == [b]
    assert f"may hide more culprit sets: {b}" in result.stdout


def test_baseline_failure_is_an_answer_not_an_error(tmp_path):
    write_config(tmp_path, "--nan")
    result = run_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / ".fusion-dd" / "report.json").read_text())
    assert report["status"] == "baseline_fails"
    assert "not among the candidates" in report["message"]


def test_nothing_to_debug(tmp_path):
    write_config(tmp_path)
    result = run_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 0
    assert json.loads((tmp_path / ".fusion-dd" / "report.json").read_text())["status"] == "no_failure"


def test_dry_run_launches_nothing(tmp_path):
    write_config(tmp_path, "--culprits", CULPRIT)
    result = run_fusion_dd("search", "--dry-run", "--devices", "4,5;6,7", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "ASCEND_DEVICE_ID=4,5" in result.stdout and "ASCEND_DEVICE_ID=6,7" in result.stdout
    assert f'"{CULPRIT}": "off"' in result.stdout
    assert "nothing was launched" in result.stdout
    assert not (tmp_path / ".fusion-dd").exists()
    assert not (tmp_path / "launch.log").exists()
    assert "state directory: " in result.stdout and ": does not exist yet: a new search creates it" in result.stdout


def test_a_dry_run_fails_where_the_search_would_refuse_and_changes_nothing(tmp_path):
    """A dry run on a state directory runs the start's refusals, read-only: a spent budget and a
    changed definition fail with the search's own line and exit 2; a resumable search is said."""
    write_config(tmp_path, "--culprits", CULPRIT, budget=6)
    assert run_fusion_dd("search", cwd=tmp_path).returncode != 0  # the budget runs out mid-search
    journal = tmp_path / ".fusion-dd" / "journal.jsonl"
    before = journal.read_bytes()

    spent = run_fusion_dd("search", "--dry-run", "--budget", "3", cwd=tmp_path)
    assert spent.returncode == 2
    assert "nothing was launched" in spent.stdout
    assert "budget 3 is below the 6 trainings this search has already launched" in spent.stderr
    assert "a search would refuse to start" in spent.stderr and "Traceback" not in spent.stderr
    real = run_fusion_dd("search", "--budget", "3", cwd=tmp_path)
    assert real.returncode == 2 and "budget 3 is below the 6 trainings" in real.stderr

    resumable = run_fusion_dd("search", "--dry-run", cwd=tmp_path)
    assert resumable.returncode == 0, resumable.stderr
    assert "holds this search, unfinished (6 trainings launched): a search resumes it" in resumable.stdout
    assert "resuming on devices 0,1 (from the journal)" in resumable.stdout

    with open(tmp_path / ".fusion-dd" / "lock", "w") as lock:  # a coordinator runs there (this test holds its lock)
        lock.write(str(os.getpid()))
        lock.flush()
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        running = run_fusion_dd("search", "--dry-run", cwd=tmp_path)
    assert running.returncode == 2
    assert f"another fusion-dd (pid {os.getpid()}) is running on this state directory" in running.stderr

    write_config(tmp_path, "--culprits", CULPRIT, budget=40, rules={"GraphFusion": GRAPH[:-1]})
    changed = run_fusion_dd("search", "--dry-run", cwd=tmp_path)
    assert changed.returncode == 2
    assert "holds a search with a different definition (changed: rules)" in changed.stderr
    restart = run_fusion_dd("search", "--dry-run", "--restart", cwd=tmp_path)
    assert restart.returncode == 0, restart.stderr
    assert "with --restart, first moved aside (nothing deleted); a new search starts" in restart.stdout
    assert journal.read_bytes() == before and not (tmp_path / ".fusion-dd.1").exists()


def test_a_state_directory_given_on_the_command_line_replaces_the_configs_unchecked(tmp_path):
    """The config's own state_dir (here its folder, which holds other files) is never used when
    --state-dir gives one, so it is not refused."""
    write_config(tmp_path, "--culprits", CULPRIT)
    document = yaml.safe_load((tmp_path / "fusion-dd.yaml").read_text())
    document["state_dir"] = "."
    (tmp_path / "fusion-dd.yaml").write_text(yaml.safe_dump(document))
    (tmp_path / "notes.txt").write_text("not fusion-dd's\n")
    refused = run_fusion_dd("search", "--dry-run", cwd=tmp_path)
    assert refused.returncode == 2 and "is not empty (notes.txt)" in refused.stderr
    given = run_fusion_dd("search", "--dry-run", "--state-dir", "elsewhere", cwd=tmp_path)
    assert given.returncode == 0, given.stderr
    assert "elsewhere: does not exist yet: a new search creates it and starts there" in given.stdout


def test_a_dry_run_refuses_a_state_directory_the_search_could_not_create(tmp_path):
    """Under a read-only mount (root alone: chmod is no bar for root) the search would stop at once."""
    import subprocess

    if os.geteuid() != 0:
        pytest.skip("a read-only bind mount needs root")
    write_config(tmp_path, "--culprits", CULPRIT)
    locked = tmp_path / "locked"
    locked.mkdir()
    mount = subprocess.run(["mount", "--bind", "-o", "ro", str(locked), str(locked)], capture_output=True, text=True)
    if mount.returncode != 0:
        pytest.skip(f"cannot bind-mount read-only here: {mount.stderr.strip()}")
    try:
        dry = call_fusion_dd("search", "--dry-run", "--state-dir", "locked/state", cwd=tmp_path)
        assert dry.returncode == 2, dry.stdout + dry.stderr
        assert "cannot create the state directory" in dry.stderr and "is not writable" in dry.stderr
        real = call_fusion_dd("search", "--state-dir", "locked/state", cwd=tmp_path)
        assert real.returncode == 2 and "cannot create the state directory" in real.stderr
    finally:
        subprocess.run(["umount", str(locked)], capture_output=True)


def test_a_second_culprit_is_found_by_group_testing_and_only_the_fix_is_trained_twice(tmp_path):
    """Two culprits: after the first, the rest is searched by group testing; on a run without
    noise the only repeat is the fix's second training, which "verified" rests on."""
    second = GRAPH[20]
    write_config(tmp_path, "--culprits", f"{CULPRIT},{second}")
    result = run_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / ".fusion-dd" / "report.json").read_text())
    assert sorted(rule["name"] for culprit in report["culprits"] for rule in culprit["rules"]) == sorted(
        [CULPRIT, second]
    )
    assert report["fix_verified"] is True and report["fix_verified_by"] == 2 == report["fix_trainings"]
    assert "2 of 2 training(s) passed" in result.stdout
    trained = launches(tmp_path)
    assert len(set(trained)) == len(trained), "a configuration was trained twice"
    repeats = [on for on, repeat in trained if repeat]
    assert len(repeats) == 1 and len(repeats[0]) == len(GRAPH + UB) - 2  # the fix: both culprits off


def test_on_four_devices_the_first_question_trains_beside_the_references(tmp_path):
    """From the command line on four devices: the first round is the two references and the
    search's first question, on all four devices (the journal says so); nothing is trained twice."""
    write_config(tmp_path, "--culprits", CULPRIT, early_stop={"pass_at": "off"})
    result = run_fusion_dd("search", "--devices", "0,1,2,3", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / ".fusion-dd" / "report.json").read_text())
    assert report["status"] == "found" and report["switched_off"] == [CULPRIT] and report["fix_verified"] is True
    records = read_records(tmp_path / ".fusion-dd" / "journal.jsonl")
    first_end = next(index for index, record in enumerate(records) if record["type"] == "trial_finished")
    first_round = [record for record in records[:first_end] if record["type"] == "trial_started"]
    assert sorted(record["role"] for record in first_round) == ["all_on", "baseline", "search", "search"]
    assert {",".join(record["device"]) for record in first_round} == {"0", "1", "2", "3"}
    assert next(record for record in records if record["type"] == "question").get("opening") is True
    assert len(set(launches(tmp_path))) == len(launches(tmp_path)) == report["trainings"]
    # The fix candidate trains beside its repeat (a guess of three or more devices): both start
    # before either ends.
    fix = sorted(name for name in GRAPH + UB if name != CULPRIT)
    fix_ids = [t["trial_id"] for t in report["trials"] if t["configuration"] == fix]
    assert len(fix_ids) == 2
    starts = [i for i, r in enumerate(records) if r["type"] == "trial_started" and r["trial_id"] in fix_ids]
    ends = [i for i, r in enumerate(records) if r["type"] == "trial_finished" and r["trial_id"] in fix_ids]
    assert max(starts) < min(ends)


def test_the_dry_run_says_when_the_first_question_trains_beside_the_references(tmp_path):
    write_config(tmp_path, "--culprits", CULPRIT, early_stop={"pass_at": "off"})
    four = run_fusion_dd("search", "--dry-run", "--devices", "0,1,2,3", cwd=tmp_path)
    assert four.returncode == 0, four.stderr
    assert "first round: the 2 reference trainings and, on the 2 other device(s), the search's first question" in four.stdout
    two = run_fusion_dd("search", "--dry-run", cwd=tmp_path)
    assert two.returncode == 0 and "first round:" not in two.stdout
    write_config(tmp_path, "--culprits", CULPRIT)  # early passes possible (the default): after the references
    default = run_fusion_dd("search", "--dry-run", "--devices", "0,1,2,3", cwd=tmp_path)
    assert default.returncode == 0 and "first round:" not in default.stdout


def test_a_dry_run_counts_only_the_references_it_will_train(tmp_path):
    write_config(tmp_path, "--culprits", CULPRIT, score={"baseline_metric": 0.9, "all_on_metric": 0.5})
    dry = call_fusion_dd("search", "--dry-run", cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    assert "for one culprit (no reference (both given), the search, the fix check)" in dry.stdout
    write_config(tmp_path, "--culprits", CULPRIT, score={"all_on_metric": 0.5})
    assert "for one culprit (1 reference, the search" in call_fusion_dd("search", "--dry-run", cwd=tmp_path).stdout
