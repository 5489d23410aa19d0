"""Localization after a search, through the CLI: dumped trainings name the layer each culprit broke.

The training is ``tests/fakes/dump_train.py``: four layers, a planted rule adds an
error to one layer's output, and ``FUSION_DD_DUMP_DIR`` makes it dump every
layer as ``.npy`` (``fusion_dd.integrations.dump_tensors``).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import yaml

from fusion_dd.config.settings import load_config
from fusion_dd.core.errors import UsageError
from tests.support.cli import GRAPH
from tests.support.dumping import PAIR, SINGLE, started, write
from tests.support.fake_training import call_fusion_dd, run_fusion_dd


def report(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "state" / "report.json").read_text())


def by_culprit(found: dict) -> dict[frozenset[str], dict]:
    return {frozenset(rule["name"] for rule in c["rules"]): c.get("localization") for c in found["culprits"]}


def assert_localized(found: dict) -> None:
    localized = by_culprit(found)
    single, pair = localized[frozenset({SINGLE})], localized[frozenset(PAIR)]
    assert single["op"] == "layer_1/out" and single["layers"] == ["layer_1/out"], single
    assert pair["op"] == "layer_3/out", pair
    assert set(single) >= {"op", "op_type", "rules", "layers", "metrics", "seen_at", "top"}
    assert single["rules"] == [SINGLE]  # npy dumps carry no rules: the only difference is the set
    assert single["metrics"]["cosine"] < 0.99 and single["top"][0]["op"] in ("layer_1/out", "layer_2/out", "layer_3/out")
    assert found["localization"]["status"] == "complete"
    for pair in single["top"]:  # files named by their place in the state directory: a moved one stays right
        assert pair["on_file"].startswith("trials/") and pair["off_file"].startswith("trials/"), pair


def test_a_search_localizes_every_culprit_set_in_the_report_and_the_summary(tmp_path: Path) -> None:
    done = run_fusion_dd("search", "-c", str(write(tmp_path)), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    found = report(tmp_path)
    assert found["status"] == "found"
    assert_localized(found)
    assert f"{SINGLE} broke layer_1/out" in done.stdout
    assert f"{' + '.join(sorted(PAIR))} broke layer_3/out" in done.stdout
    # The fix, and the fix with each set back on, dumped. With search.guide: dumps (the default
    # with a localize: section) the references and the fix candidates dump as they train, so
    # localization trains only the comparisons' runs that no search training dumped.
    dumped = [entry for entry in started(tmp_path) if entry[1] == "localize"]
    dumps = sorted(Path(line).parent.name for line in (tmp_path / "dumps.log").read_text().splitlines())
    records = [json.loads(line) for line in (tmp_path / "state" / "journal.jsonl").read_text().splitlines()]
    dumping = sorted(r["trial_id"] for r in records if r.get("type") == "trial_started" and (
        r.get("dumps") or r["role"] == "localize"))  # fmt: skip
    assert dumps == dumping and dumps[:2] == ["0001", "0002"]
    assert 1 <= len(dumped) < 3 and found["localization"]["trainings"] == len(dumped) and found["trainings"] <= 60
    compared = {trial for culprit in found["culprits"] for trial in culprit["localization"]["trials"]}
    assert compared <= set(dumps) and len(compared) == 3  # the fix and each set back on
    # A dumped training never stands in for a search answer: the fix is backed by search trainings only.
    assert found["fix_trainings"] == sum(1 for t in found["trials"] if t["role"] != "localize"
                                         and set(t["configuration"]) == set(GRAPH[:12]) - set(found["switched_off"]))  # fmt: skip
    compare = tmp_path / "state" / by_culprit(found)[frozenset({SINGLE})]["compare"] / "compare.json"
    assert json.loads(compare.read_text())["first_divergence"]["op"] == "layer_1/out"
    # The finished search shows the same answer again, from the journal alone.
    again = run_fusion_dd("resume", "--state-dir", "state", cwd=tmp_path)
    assert again.returncode == 0 and f"{SINGLE} broke layer_1/out" in again.stdout
    assert len(started(tmp_path)) == len(found["trials"])


def localize_later(tmp_path: Path) -> None:
    """fusion-dd localize on a search that finished without a localize: section."""
    assert "localization" not in report(tmp_path)["culprits"][0]
    refused = call_fusion_dd("localize", "--state-dir", "state", cwd=tmp_path)  # refused before any training
    assert refused.returncode == 2 and "no localize: section" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    with_section = write(tmp_path, name="with-localize.yaml")
    done = run_fusion_dd("localize", "--state-dir", "state", "-c", str(with_section), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert_localized(report(tmp_path))
    assert f"{SINGLE} broke layer_1/out" in done.stdout
    assert max(Counter(started(tmp_path)).values()) == 1


def test_budget_stop_in_the_localization_phase_then_localize_repeats_no_training(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    assert run_fusion_dd("search", "-c", str(write(plain, localize=None)), cwd=plain).returncode == 0
    search_cost = report(plain)["trainings"]
    localize_later(plain)
    # Budget for the search and the fix's dumped training only. Unguided, so that the search asks
    # the same questions as the plain one and its trainings do not dump (localization trains all three).
    done = run_fusion_dd("search", "-c", str(write(tmp_path, budget=search_cost + 1, guide="none")), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    first = report(tmp_path)
    assert first["status"] == "found" and first["localization"]["status"] == "incomplete"
    assert all("reason" in c["localization"] for c in first["culprits"])
    assert "localization incomplete" in done.stdout and "fusion-dd localize" in done.stdout
    command = first["localization"]["continue_with"]
    assert command == f"fusion-dd localize --state-dir state --budget {search_cost + 3}"
    assert command in done.stdout
    # resume of the finished search goes on with its localization too, where it stopped.
    more = run_fusion_dd("resume", "--state-dir", "state", "--budget", str(search_cost + 3), cwd=tmp_path)
    assert more.returncode == 0, more.stderr
    assert_localized(report(tmp_path))
    assert f"{SINGLE} broke layer_1/out" in more.stdout
    trainings = Counter(started(tmp_path))
    assert max(trainings.values()) == 1, [key for key, count in trainings.items() if count > 1]
    assert sum(1 for key in trainings if key[1] == "localize") == 3
    # Once done, localize again trains and compares nothing.
    journal = (tmp_path / "state" / "journal.jsonl").read_text()
    again = run_fusion_dd("localize", "--state-dir", "state", cwd=tmp_path)
    assert again.returncode == 0 and f"{SINGLE} broke layer_1/out" in again.stdout
    after = (tmp_path / "state" / "journal.jsonl").read_text()
    assert after == journal and Counter(started(tmp_path)) == trainings  # no session journaled: nothing to do
    assert "early passes" not in again.stderr


def test_an_interrupt_during_localization_keeps_the_answer_and_resume_localizes(tmp_path: Path) -> None:
    """Ctrl-C while the dumped trainings run: the search's answer is journaled and handed over already."""
    from tests.support.fake_training import interrupt_when_journaled

    journal = tmp_path / "state" / "journal.jsonl"
    stopped = interrupt_when_journaled(tmp_path, ["search", "-c", str(write(tmp_path))], journal, '"role":"localize"')
    assert stopped.returncode == 130, stopped.stderr
    assert "Traceback" not in stopped.stderr
    assert "fusion-dd: culprits found" in stopped.stdout and "localization incomplete" in stopped.stdout
    first = report(tmp_path)
    assert first["status"] == "found" and first["fix_verified"] is True
    assert set(by_culprit(first)) == {frozenset({SINGLE}), frozenset(PAIR)}
    assert (tmp_path / "state" / "fusion_switch.cfg").is_file()
    assert '"type":"search_finished"' in journal.read_text()
    finished = {(tuple(sorted(trial["configuration"])), trial["role"], trial["repeat"])
                for trial in first["trials"] if trial["outcome"] != "cancelled"}  # fmt: skip
    before = len(started(tmp_path))
    resumed = run_fusion_dd("resume", "--state-dir", "state", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert_localized(report(tmp_path))
    again = [(tuple(sorted(on)), role, repeat) for on, role, repeat in started(tmp_path)[before:]]
    assert not set(again) & finished, "a finished training was trained again"


def test_localize_without_a_finished_search_is_one_line(tmp_path: Path) -> None:
    missing = run_fusion_dd("localize", "--state-dir", "nothing", "-c", str(write(tmp_path)), cwd=tmp_path)
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1
    assert "no search here" in missing.stderr
    shown = call_fusion_dd("search", "--dry-run", "-c", str(write(tmp_path)), cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    dump_dir = tmp_path / "state" / "trials" / "0001" / "dump"
    assert f"FUSION_DD_DUMP_DIR={dump_dir} " in shown.stdout and "localization trains with tensor dumps" in shown.stdout


def test_bad_localize_keys_are_one_line_errors_naming_the_key(tmp_path: Path) -> None:
    cases = [
        ({"env": {"X": "{dump_dir}"}, "stepp": 3}, "localize.stepp: unknown key; did you mean 'localize.step'?"),
        ({"env": {"X": "{dump_dri}"}}, "localize.env.X: unknown placeholder {dump_dri}; did you mean {dump_dir}?"),
        ({"args": ["--dump", "{dumpdir}"]}, "localize.args[1]: unknown placeholder {dumpdir}"),
        ({"env": {"X": "{dump_dir}"}, "step": -1}, "localize.step: must be at least 0"),
        ({"env": {"X": "{dump_dir}"}, "graphs": [3]}, "localize.graphs: must be a list"),
        ({"command": []}, "localize.command: is empty"),
        ({"step": 2}, "localize: says nothing about how a training dumps"),
        ("yes", "localize: must be a mapping"),
    ]
    for section, expected in cases:
        path = write(tmp_path, localize=section)
        with pytest.raises(UsageError) as error:
            load_config(path)
        assert expected in str(error.value) and "\n" not in str(error.value), (section, str(error.value))
    # {dump_dir} belongs to localization trainings only; through the CLI: one line, exit 2.
    path = write(tmp_path)
    document = yaml.safe_load(path.read_text())
    document["train"]["env"] = {"D": "{dump_dir}"}
    path.write_text(yaml.safe_dump(document))
    done = run_fusion_dd("search", "--dry-run", "-c", str(path), cwd=tmp_path)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert "train.env.D: unknown placeholder {dump_dir}; it exists only in the localize:" in done.stderr


def test_a_report_of_a_localizing_search_killed_before_its_answer_was_journaled_replays_to_it(tmp_path: Path) -> None:
    """The replay reaches the answer itself; localization, which follows it, trains nothing in a replay."""
    assert run_fusion_dd("search", "-c", str(write(tmp_path)), cwd=tmp_path).returncode == 0
    journal = tmp_path / "state" / "journal.jsonl"
    lines = journal.read_text().splitlines(keepends=True)
    cut = next(index for index, line in enumerate(lines) if json.loads(line)["type"] == "search_finished")
    journal.write_text("".join(lines[:cut]))
    shown = call_fusion_dd("report", "--json", "--state-dir", "state", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    rebuilt = json.loads(shown.stdout)
    assert rebuilt["status"] == "found" and set(by_culprit(rebuilt)) == {frozenset({SINGLE}), frozenset(PAIR)}
