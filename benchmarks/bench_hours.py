"""What a search costs in training-steps with early passes, against training every configuration to its end.

    python benchmarks/bench_hours.py [--seeds 21] [--no-write]

Each search is the real engine in-process (default strategy, ``search.confirm:
auto``, one device as ``train.devices`` defaults to, the real early-stop judge and horizon) with the training
replaced by a stand-in that costs no time: it writes the loss curve of 1,000
steps a training of its configuration would report and its final accuracy,
and when the engine's monitor is created for it, the real judge
(``fusion_dd.runner.early_stop.decide``) is run over that whole curve; a
decision is written as the supervisor's stop would leave it (``early_stop.json``,
cancelled), so the engine sees exactly what a stopped training leaves. Time is
simulated: one step is one device-second.

The loss curve: ``2 * 0.99**s + 0.5``; a culprit that is on adds ``0.01`` per
step from its damage step on (drawn per seed between 100 and 300), and the
training's accuracy is 0.5 instead of 0.9. Cases (n = 256 candidates):

* ``1 culprit``: one culprit.
* ``3 independent``: three culprits, each failing alone.
* ``after the horizon``: one culprit as above, and one whose damage starts only
  at step 900, far past the horizon (2x the first one's): early passes vouch
  for configurations with it, and only the full training of the fix shows it.
* ``1 culprit, noisy loss``: the first case with each report's loss scattered as a
  minibatch's is, times ``1 + N(0, 0.1)`` (drawn per training): what the pass band's
  allowance for the baseline's scatter is for. ``auto + divergence`` reads raw
  reports against a 10 % band, as the pass band did before it allowed for scatter.

The default settings and ``pass_at: off`` are run again on 2 devices (reported
apart: a second device makes the search ask more questions per answer, so it costs
more steps and fewer rounds).

``--breakdown CASE SETTING SEED [--devices 2]`` prints one search's trainings (role, kind,
verdict, rules on, steps) instead: where the steps go.

Each case is run with default settings (``early_stop.pass_at: auto``) and with
``early_stop.pass_at: off`` (today's cost), on the same seeds, and again with
``early_stop.divergence: 0.1, relative: true`` (failures stopped as diverged
too, a setting the user opts into). Figures are medians over the seeds.

The markdown section is printed and written into benchmarks/RESULTS.md between
``<!-- bench_hours:begin -->`` and ``<!-- bench_hours:end -->``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from results_file import replace_section

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

BEGIN, END = "<!-- bench_hours:begin -->", "<!-- bench_hours:end -->"
STEPS = 1000
N = 256
LATE_DAMAGE = 900
NOISE = 0.1  # the noisy case: each report's loss scatters by this share (a standard deviation)


def _names(count: int) -> list[str]:
    return [f"HoursRule{index:05d}FusionPass" for index in range(count)]


def _loss(step: int, damage: int | None) -> float:
    loss = 2.0 * 0.99**step + 0.5
    if damage is not None and step >= damage:
        loss += 0.01 * (step - damage + 1)
    return loss


def _search(
    directory: Path, culprits: dict[str, int], early_stop: dict[str, Any], devices: int = 1, noise: float = 0.0
) -> dict[str, Any]:
    """One whole search in-process with stand-in trainings; returns its report. ``noise``: the share by
    which each report's loss scatters, drawn per training (the same on every run of the benchmark)."""
    from fusion_dd.coordinator import engine as engine_module
    from fusion_dd.config.settings import load_config
    from fusion_dd.runner import early_stop as early_stop_module
    from fusion_dd.runner import launcher as launcher_module
    from fusion_dd.runner.supervisor import LAUNCH_FILE, LOG_FILE, STATUS_FILE, write_json_atomic
    from fusion_dd.runner.trial import EARLY_STOP_FILE, METRICS_FILE, SWITCH_FILE, RunningTrial, TrialSpec

    def start_trial(spec: TrialSpec, forkserver: object = None) -> RunningTrial:
        trial_dir = Path(spec.trial_dir).resolve()
        trial_dir.mkdir(parents=True, exist_ok=True)
        (trial_dir / SWITCH_FILE).write_text(spec.switch_text, encoding="utf-8")
        switch = json.loads(spec.switch_text)["Switch"]
        on = {name for section in switch.values() for name, state in section.items() if state == "on"}
        damages = [step for name, step in culprits.items() if name in on]
        damage = min(damages) if damages else None
        scatter = random.Random(spec.trial_id)
        curve = [(step, _loss(step, damage) * (1.0 + scatter.gauss(0.0, noise))) for step in range(1, STEPS + 1)]
        (trial_dir / METRICS_FILE).write_text(
            "".join(json.dumps({"step": step, "loss": loss}) + "\n" for step, loss in curve), encoding="utf-8"
        )
        (trial_dir / LOG_FILE).write_text(f"accuracy: {0.5 if damages else 0.9}\n", encoding="utf-8")
        (trial_dir / LAUNCH_FILE).write_text(json.dumps({"trial_id": spec.trial_id, "timeout": None}), encoding="utf-8")
        now = time.time()
        status = {"exit_code": 0, "signal": None, "timed_out": False, "cancelled": False, "start": now - STEPS,
                  "end": now, "duration": float(STEPS), "error": None, "timeout": None, "trial_id": spec.trial_id}
        write_json_atomic(trial_dir / STATUS_FILE, status)
        return RunningTrial(spec.trial_id, trial_dir, pid=None, process=None)

    def make_monitor(trial_dir: Any, rule: Any, baseline: Any = ()) -> Any:
        """The real judge over the whole curve; its decision left as a stopped training leaves it."""
        if rule is not None and rule.active:
            reports = early_stop_module.ReportReader(trial_dir, rule.step_pattern).read_all()
            decision = early_stop_module.decide(rule, list(baseline), reports)
            if decision is not None and decision.step is not None:
                directory = Path(trial_dir)
                status = json.loads((directory / STATUS_FILE).read_text())
                write_json_atomic(directory / EARLY_STOP_FILE, {**decision.to_json(), "elapsed": float(decision.step)})
                status.update(cancelled=True, exit_code=None, signal=15, duration=float(decision.step))
                write_json_atomic(directory / STATUS_FILE, status)
        return None

    config = {
        "rules": {"GraphFusion": _names(N), "unknown": "ignore"},
        "train": {"command": [sys.executable, "-c", "pass"], "devices": list(range(devices)), "timeout": 10**6},
        "metric": {"pattern": r"accuracy[=:]\s*(\S+)"},
        "search": {"budget": 1000},
        "early_stop": early_stop,
    }
    (directory / "fusion-dd.yaml").write_text(json.dumps(config), encoding="utf-8")
    originals = launcher_module.start_trial, launcher_module.make_monitor
    launcher_module.start_trial, launcher_module.make_monitor = start_trial, make_monitor
    try:
        result = engine_module.Engine(load_config(directory / "fusion-dd.yaml")).run()
    finally:
        launcher_module.start_trial, launcher_module.make_monitor = originals
    return result.report


def _case(name: str, seed: int) -> dict[str, int]:
    rng = random.Random(f"{name.split(',')[0]}|{seed}")  # the noisy case plants what "1 culprit" does
    names = rng.sample(_names(N), 3)
    if name.startswith("1 culprit"):
        return {names[0]: rng.randint(100, 300)}
    if name == "3 independent":
        return {culprit: rng.randint(100, 300) for culprit in names}
    return {names[0]: rng.randint(100, 300), names[1]: LATE_DAMAGE}


def _noise(case: str) -> float:
    return NOISE if case.endswith("noisy loss") else 0.0


SETTINGS = {
    "off": {"pass_at": "off"},
    "auto": {},
    "auto + divergence": {"divergence": 0.1, "relative": True},
    "off + divergence": {"pass_at": "off", "divergence": 0.1, "relative": True},
}
CASES = ("1 culprit", "3 independent", "after the horizon", "1 culprit, noisy loss")


def run(seeds: int, devices: int = 1, settings: tuple[str, ...] = tuple(SETTINGS)) -> dict[tuple[str, str], dict[str, Any]]:
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for case in CASES:
        for setting in settings:
            if _noise(case) and setting == "off + divergence":
                continue  # a raw band on a noisy loss stops nearly every training: "auto + divergence" shows it
            early_stop = SETTINGS[setting]
            steps, trainings, rounds, correct, proven = [], [], [], 0, 0
            for seed in range(seeds):
                culprits = _case(case, seed)
                with tempfile.TemporaryDirectory() as work:
                    report = _search(Path(work), culprits, early_stop, devices, _noise(case))
                found = sorted(rule["name"] for culprit in report.get("culprits", []) for rule in culprit["rules"])
                correct += report["status"] == "found" and found == sorted(culprits) and bool(report["fix_verified"])
                # The handed-over fix has a full-length training that passed (never only early passes).
                fix = sorted(set(_names(N)) - set(report.get("switched_off") or []))
                proven += any(
                    trial["configuration"] == fix and trial.get("kind") == "metric" and trial.get("outcome") == "pass"
                    for trial in report["trials"]
                )
                steps.append(report["cost"]["training_steps"])
                trainings.append(report["cost"]["trainings"])
                rounds.append(report["rounds"])
            rows[(case, setting)] = {
                "steps": statistics.median(steps), "max_steps": max(steps), "trainings": statistics.median(trainings),
                "rounds": statistics.median(rounds), "correct": correct, "proven": proven, "seeds": seeds,
            }
            print(case, setting, f"{devices} device(s)", rows[(case, setting)], flush=True)
    return rows


def _table(rows: dict[tuple[str, str], dict[str, Any]]) -> list[str]:
    """One markdown table of searches: a row per (case, early_stop setting)."""
    lines = [
        "| case | early_stop | training-steps (median) | max | trainings (median) | rounds (median) | correct |",
        "|---|---|---|---|---|---|---|",
    ]
    for (case, setting), row in rows.items():
        lines.append(
            f"| {case} | {setting} | {row['steps']:,.0f} | {row['max_steps']:,} | {row['trainings']:g} | "
            f"{row['rounds']:g} | {row['correct']}/{row['seeds']} |"
        )
    return lines


def render(
    rows: dict[tuple[str, str], dict[str, Any]],
    wide: dict[tuple[str, str], dict[str, Any]],
    seeds: int,
    seconds: float,
) -> str:
    """The RESULTS.md section: ``rows`` on one device (the targets), ``wide`` the same searches on two."""
    def steps(case: str, setting: str) -> float:
        return rows[(case, setting)]["steps"]

    one = steps("1 culprit", "auto")
    three = steps("3 independent", "auto") / steps("3 independent", "off")
    late = steps("after the horizon", "auto") / steps("after the horizon", "off")
    one_div = steps("1 culprit", "auto + divergence")
    three_div = steps("3 independent", "auto + divergence") / steps("3 independent", "off")
    # The raw band on a noisy loss is there to show what the pass band's scatter allowance prevents.
    raw_noisy = ("1 culprit, noisy loss", "auto + divergence")
    all_correct = all(
        row["correct"] == row["seeds"] for key, row in [*rows.items(), *wide.items()] if key != raw_noisy
    )
    all_proven = all(row["proven"] == row["seeds"] for row in [*rows.values(), *wide.values()])
    damage = statistics.median(step for seed in range(seeds) for step in _case("1 culprit", seed).values())
    lines = [
        BEGIN,
        "## Accelerator time: early passes (benchmarks/bench_hours.py)",
        "",
        f"Generated by `python benchmarks/bench_hours.py --seeds {seeds}` in {seconds:.0f} s: the real engine in-process "
        "(default strategy, confirm auto, one device as `train.devices` defaults to, the real horizon and early-stop "
        "judge), the training replaced by "
        "a stand-in that writes a 1,000-step loss curve and its accuracy (damage from a step drawn in 100..300; "
        f"the late culprit's from step {LATE_DAMAGE}); simulated time, one step = one device-second. n = 256. Medians "
        f"over {seeds} seeds. Training-steps count every training: the references, the search, the fix's proof.",
        "",
        "| target | value | limit | met |",
        "|---|---|---|---|",
        f"| 1 culprit, default settings, training-steps | {one:,.0f} | 5,500 | {'yes' if one <= 5500 else 'no'} |",
        f"| 1 culprit, with early_stop.divergence 0.1 relative, training-steps | {one_div:,.0f} | 5,500 | "
        f"{'yes' if one_div <= 5500 else 'no'} |",
        f"| 3 independent, default settings, share of pass_at: off | {three:.0%} | 40% | {'yes' if three <= 0.4 else 'no'} |",
        f"| 3 independent, with divergence, share of pass_at: off | {three_div:.0%} | 40% | "
        f"{'yes' if three_div <= 0.4 else 'no'} |",
        f"| damage after the horizon, cost against pass_at: off | {late:.2f}x | 1.5x | {'yes' if late <= 1.5 else 'no'} |",
        f"| right answer and verified fix on every seed (all rows but the raw band on a noisy loss) | "
        f"{'yes' if all_correct else 'no'} | yes | "
        f"{'yes' if all_correct else 'no'} |",
        f"| every handed-over fix passed a full-length training (all rows) | {'yes' if all_proven else 'no'} "
        f"| yes | {'yes' if all_proven else 'no'} |",
        "",
        *_table(rows),
        "",
        "The same searches on 2 devices (`train.devices: [0, 1]`):",
        "",
        *_table(wide),
    ]
    lines += [
        "",
        "With default settings a search training stops as an early pass at the horizon (twice the all-on run's "
        "departure from the band, at least 20 % of the training) or as an early failure when its loss leaves the "
        "band; both are speculative. The references run in full, and so does each fix candidate's first training "
        "unless its loss leaves the band: a passing candidate is the fix's proof. A candidate that fails only after "
        "the horizon (the late culprit) ends the search's round at once and the search asks again with full "
        "trainings. With several culprit sets, each set alone is trained in full (with one, the all-on training "
        "and the fix's full training back it); once a fix candidate has failed, a rule asked alone never fails "
        "early, so the sets found after the first are proven by the training that found them.",
        "",
        "Where the steps go (`--breakdown '1 culprit' auto 0`: damage at step 113, horizon 248): the two "
        "references 2,000; the fix candidate's full training 1,000; 6 early passes of 248 (1,488, the fix's "
        "second training among them); 4 early failures of 126 (504): 4,992 in 13 trainings (on 2 devices "
        "5,492 in 16: the second device's questions are asked before the first one's answer is known). The pass "
        "band reads each curve as the median of its last three reports, so a departure is seen one report later "
        "than a raw reading would see it: 2 steps more per early pass, 1 per early failure (4,976 before).",
        "",
        "Why the 1-culprit target is out of reach with these guards: one culprit among 256 takes 8 bisection "
        "questions (log2 256, none fewer), the culprit alone, the fix in full and the fix's second training. A "
        "failing question stops where the loss leaves the band (the departure D), a passing one at the horizon, "
        "2 D, and about half the bisection's answers pass, so the search costs 3,000 + 12 D + D + 2 D = "
        f"3,000 + 15 D steps. The median damage step of the seeds is {damage:g} (D about 10 steps later): "
        f"about {3000 + 15 * (damage + 10):,.0f} steps, against 5,500. Meeting it at that D means dropping the fix's second training (the "
        "guard of a verified fix, docs/strategies.md, \"How sure a verified is\": 2 D) or the horizon's safety "
        "factor; splitting unevenly so that more answers fail (a failure costs half a pass; the best split puts "
        "62 % of the candidates on) saves under 4 % of the bisection's 12 D, about 90 steps.",
        "",
        "Three independent culprits: the full trainings no early verdict can stand in for are the references, "
        "the fix and each culprit set alone (its proof), 6,000 steps; the rest are about 26 early verdicts. "
        "Only the first set's proof is a training of its own (it was asked alone before a fix candidate failed, "
        "and stopped early there); training the later sets' own questions on saved 2 trainings and about "
        "490 steps a search (13,477 steps in 34 trainings before). "
        f"On one device pass_at: off asks {rows[('3 independent', 'off')]['trainings']:g} trainings, on two "
        f"{wide[('3 independent', 'off')]['trainings']:g} (more questions asked before their answers are known), "
        "while the 6,000 stay: so the share is higher on one device "
        f"({three:.0%}) than on two ({wide[('3 independent', 'auto')]['steps'] / wide[('3 independent', 'off')]['steps']:.0%}), "
        "although one device spends fewer steps.",
        "",
        "A loss that scatters per report (`1 culprit, noisy loss`: each report times 1 + N(0, "
        f"{NOISE:g})): the default's pass band allows for the baseline's own scatter, and its search costs "
        f"{steps('1 culprit, noisy loss', 'auto'):,.0f} steps against "
        f"{steps('1 culprit, noisy loss', 'off'):,.0f} with pass_at: off "
        f"({steps('1 culprit, noisy loss', 'auto') / steps('1 culprit, noisy loss', 'off'):.0%}; smooth curves: "
        f"{one / steps('1 culprit', 'off'):.0%}): the damage must rise above the scatter before it is seen, so the "
        "horizon comes later. `auto + divergence` reads raw reports against a 10 % band, as the pass band did before "
        f"it allowed for scatter: {steps('1 culprit, noisy loss', 'auto + divergence'):,.0f} steps in "
        f"{rows[('1 culprit, noisy loss', 'auto + divergence')]['trainings']:g} trainings, "
        f"{rows[('1 culprit, noisy loss', 'auto + divergence')]['correct']} of {seeds} right (every rule looks "
        "like a culprit: every training is stopped as diverged). A search with such a band warns of it after the "
        "references and names a width that is not narrower than the scatter.",
        "",
        "Before fix candidates trained to their end (an earlier run of this benchmark, on 2 devices, same seeds): "
        "1 culprit "
        "6,416 steps in 16 trainings (the fix was trained three times: an early pass, its repeat, then its proof); "
        "3 independent 40.5 % of pass_at: off; after the horizon 1.10x (auto) and 25,388 steps with divergence.",
        END,
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=21)
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--breakdown", nargs=3, metavar=("CASE", "SETTING", "SEED"))
    parser.add_argument("--devices", type=int, default=1, help="devices of the --breakdown search")
    args = parser.parse_args()
    if args.breakdown:
        case, setting, seed = args.breakdown
        with tempfile.TemporaryDirectory() as work:
            report = _search(Path(work), _case(case, int(seed)), SETTINGS[setting], args.devices, _noise(case))
        for trial in report["trials"]:
            print(trial["trial_id"], trial.get("role"), trial.get("kind"), trial.get("outcome"),
                  len(trial["configuration"]), trial.get("steps"))
        print(report["cost"])
        return 0
    began = time.monotonic()
    rows = run(args.seeds)
    wide = run(args.seeds, devices=2, settings=("off", "auto"))
    section = render(rows, wide, args.seeds, time.monotonic() - began)
    print(section)
    if not args.no_write:
        replace_section(section, BEGIN, END)
    return 0


if __name__ == "__main__":
    sys.exit(main())
