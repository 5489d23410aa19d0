"""fusion_dd.report.localize in-process: the plan, the journaled comparisons, and that a replay recomputes nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from fusion_dd.config.settings import LocalizeConfig
from fusion_dd.integrations import dump_tensors
from fusion_dd.report.localize import Localizer, attach, plan, summary_lines
from fusion_dd.store.state import SearchState, replay

RULES = ["A", "B", "C", "D"]


def test_plan_compares_each_culprit_set_switched_back_on_against_the_fix() -> None:
    targets = plan(RULES, [["B"], ["C", "D"]], ["B", "C"])
    fix = frozenset({"A", "D"})
    assert [(t.culprit, t.on, t.off) for t in targets] == [
        (("B",), fix | {"B"}, fix),
        (("C", "D"), fix | {"C"}, fix),
    ]
    assert targets[0].keys == ((fix | {"B"}, 0), (fix, 0))


class World:
    """A journal (a list of records), trials that dump like a training would, a budget."""

    def __init__(self, root: Path, budget: int) -> None:
        self.root = root
        self.records: list[dict[str, Any]] = []
        self.budget = budget
        self.launched: list[tuple[frozenset[str], int]] = []

    @property
    def state(self) -> SearchState:
        return replay(self.records)

    def append(self, record: dict[str, Any]) -> None:
        self.records.append(record)

    def launch(self, keys) -> None:
        for names, repeat in keys:
            self.launched.append((names, repeat))
            trial_id = f"{len(self.state.trials) + 1:04d}"
            self.append({"type": "trial_started", "trial_id": trial_id, "config": sorted(names), "repeat": repeat,
                         "trial_dir": f"trials/{trial_id}", "role": "localize"})  # fmt: skip
            x = np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8)
            for layer in range(3):
                x = np.tanh(x * 1.5 + (0.7 if ("B" in names and layer == 1) else 0.0))
                dump_tensors(f"layer_{layer}/out", x, self.root / "trials" / trial_id / "dump")
            self.append({"type": "trial_finished", "trial_id": trial_id, "kind": "metric", "value": 0.9})

    def localizer(self) -> Localizer:
        return Localizer(
            config=LocalizeConfig(env={"FUSION_DD_DUMP_DIR": "{dump_dir}"}),
            state=lambda: self.state,
            state_dir=self.root,
            launch=self.launch,
            append=self.append,
            remaining_budget=lambda: self.budget - len(self.state.trials),
            message=lambda text: None,
        )


def report_for(state: SearchState) -> dict[str, Any]:
    rules = [{"name": name, "section": "GraphFusion"} for name in RULES]
    return {
        "status": "found",
        "budget": 10,
        "candidates": rules,
        "culprits": [{"rules": [rules[1]]}, {"rules": [rules[2], rules[3]]}],
        "switched_off": ["B", "C"],
    }


def test_budget_then_resume_trains_and_compares_each_thing_once(tmp_path: Path) -> None:
    world = World(tmp_path, budget=2)
    targets = plan(RULES, [["B"], ["C", "D"]], ["B", "C"])
    assert world.localizer().run(targets) is False  # the fix and B's run fit, C+D's does not
    assert [names for names, _ in world.launched] == [frozenset({"A", "D"}), frozenset({"A", "B", "D"})]
    report = attach(report_for(world.state), world.state, True, "state")
    assert report["localization"]["status"] == "incomplete"
    assert report["localization"]["continue_with"] == "fusion-dd localize --state-dir state --budget 11"
    assert report["culprits"][0]["localization"]["op"] == "layer_1/out"
    assert report["culprits"][0]["localization"]["rules"] == ["B"]
    assert "reason" in report["culprits"][1]["localization"]
    assert any("localization incomplete" in line for line in summary_lines(report))

    world.budget = 10
    assert world.localizer().run(targets) is True
    assert len(world.launched) == 3  # only C+D's run: the fix is not trained again
    localized = [r for r in world.records if r["type"] == "localized"]
    assert [r["culprit"] for r in localized] == [["B"], ["C", "D"]]
    # C+D changes nothing in this training: localized with a reason, not an op.
    assert localized[1]["localization"] is None and "no op differs" in localized[1]["reason"]
    before = list(world.records)
    assert world.localizer().run(targets) is True  # a replay: nothing trained, nothing compared
    assert world.records == before
    final = attach(report_for(world.state), world.state, True)
    assert final["localization"] == {"status": "failed", "localized": 1, "failed": 1, "missing": 0, "trainings": 3}
    assert summary_lines(final)[0].startswith("  (1) B broke layer_1/out (")


def test_a_training_that_wrote_no_dump_is_a_reason_not_a_crash(tmp_path: Path) -> None:
    world = World(tmp_path, budget=5)
    targets = plan(RULES, [["B"]], ["B"])
    world.launch([targets[0].keys[1]])  # the fix dumps
    world.append({"type": "trial_started", "trial_id": "0002", "config": sorted(targets[0].on), "repeat": 0,
                  "trial_dir": "trials/0002", "role": "localize"})  # fmt: skip
    world.append({"type": "trial_finished", "trial_id": "0002", "kind": "crash", "reason": "exit code 1"})
    assert world.localizer().run(targets) is True
    record = world.records[-1]
    assert record["type"] == "localized" and record["localization"] is None
    assert "trial #0002 wrote no tensor dump" in record["reason"] and "crash (exit code 1)" in record["reason"]
