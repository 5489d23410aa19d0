"""``python -m fusion_dd.demo.train``: one demo training, launched like a user's own.

It honours the training contract of docs/architecture.md 4.3 the way a real NPU training
does: the compiler reads ``fusion_switch.cfg`` (``--fusion-switch`` or
``FUSION_DD_SWITCH_FILE``) with CANN's precedence (an exact name beats ``ALL``; a
pass the file does not mention stays at CANN's default, on; without a file every
pass is on) and AutoFuse reads ``AUTOFUSE_FLAGS`` like CANN's (default off;
passes_autofuse.py), prints ``step N loss X`` lines and a final ``accuracy: X``, appends
JSON records to ``FUSION_DD_METRICS_FILE`` and writes ``fusion_result.json`` into
``FUSION_DD_TRIAL_DIR`` (else the working directory).

Only numpy and small fusion_dd modules are imported: the whole process must stay
well under two seconds of one core.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
from pathlib import Path

from fusion_dd.core.errors import UsageError
from fusion_dd.core.rules import Rule
from fusion_dd.backends.cann.switch import SwitchFile, load_switch_file

from .passes_autofuse import AutoFuseSwitch
from .scenarios import DEFAULT_SCENARIO, SCENARIOS, get_scenario

SWITCH_ENV = "FUSION_DD_SWITCH_FILE"
TRIAL_DIR_ENV = "FUSION_DD_TRIAL_DIR"
METRICS_ENV = "FUSION_DD_METRICS_FILE"
REPEAT_ENV = "FUSION_DD_REPEAT"
DUMP_ENV = "FUSION_DD_DUMP_DIR"


def switch_decision(switch: SwitchFile | None):
    """CANN's decision for one rule: the file's state, or on when it is silent."""

    def decide(rule: Rule) -> bool:
        if switch is None:
            return True
        state = switch.state(rule.name, rule.section)
        return True if state is None else state

    return decide


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m fusion_dd.demo.train",
        description="Train the fusion-dd demo network on a simulated NPU.",
    )
    parser.add_argument("--scenario", default=DEFAULT_SCENARIO, help="planted-fault scenario")
    parser.add_argument("--fusion-switch", metavar="PATH", help="fusion_switch.cfg to apply")
    parser.add_argument("--steps", type=_positive_int, help="training steps (scenario default)")
    parser.add_argument("--seed", type=int, default=0, help="data and initialisation seed")
    parser.add_argument(
        "--noise",
        type=_non_negative_float,
        default=0.0,
        help="run-to-run jitter: relative init noise, and a reshuffled data order when > 0 "
        "(seeded by --seed and FUSION_DD_REPEAT)",
    )
    parser.add_argument("--log-every", type=_positive_int, default=10, metavar="N")
    parser.add_argument(
        "--dump-dir",
        metavar="DIR",
        help=f"write an Ascend-style tensor dump of one step and the GE graph here (or {DUMP_ENV})",
    )
    parser.add_argument(
        "--dump-step", type=_positive_int, metavar="N", help="step to dump (default: the scenario's, usually 1)"
    )
    parser.add_argument(
        "--list-scenarios", action="store_true", help="describe the scenarios and exit"
    )
    return parser


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0.0:
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text}")
    return value


def _repeat() -> int:
    text = os.environ.get(REPEAT_ENV, "0").strip() or "0"
    try:
        return int(text)
    except ValueError:
        raise UsageError(
            f"{REPEAT_ENV}={text!r} is not an integer; unset it or use 0, 1, 2, ..."
        ) from None


def _append_metric(path: Path | None, record: dict[str, float | int]) -> None:
    if path is None:
        return
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")
        handle.flush()


def run(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.list_scenarios:
        for name, scenario in SCENARIOS.items():
            marker = " (default)" if name == DEFAULT_SCENARIO else ""
            print(f"{name}{marker}: {scenario.description}")
        return 0
    scenario = get_scenario(args.scenario)
    switch_path = args.fusion_switch or os.environ.get(SWITCH_ENV) or None
    switch = load_switch_file(switch_path) if switch_path else None
    autofuse = AutoFuseSwitch.from_env(os.environ)
    repeat = _repeat()
    metrics_env = os.environ.get(METRICS_ENV)
    metrics_path = Path(metrics_env) if metrics_env else None
    trial_dir = Path(os.environ.get(TRIAL_DIR_ENV) or ".")
    if not trial_dir.is_dir():
        raise UsageError(f"{TRIAL_DIR_ENV}={trial_dir}: not a directory; create it or unset it")

    # numpy is imported only once the arguments are known to be good.
    from .fusion_result import write_fusion_result
    from .pipeline import known_rules
    from .trainer import TrainConfig, run_training

    config = TrainConfig(
        steps=args.steps or scenario.steps,
        seed=args.seed,
        noise=args.noise,
        repeat=repeat,
        log_every=args.log_every,
    )

    def on_step(step: int, loss: float) -> None:
        print(f"step {step} loss {loss:.6f}", flush=True)
        _append_metric(metrics_path, {"step": step, "loss": loss})

    decide = switch_decision(switch)
    rules = known_rules()
    switched_on = sum(1 for rule in rules if decide(rule))
    print(
        f"demo scenario {scenario.name}: {switched_on} of {len(rules)} fusion rules on, "
        f"{autofuse.describe()}, {config.steps} steps",
        flush=True,
    )
    dump_dir = args.dump_dir or os.environ.get(DUMP_ENV) or None
    on_forward = None
    if dump_dir:
        from .dump import DemoDumper

        on_forward = DemoDumper(Path(dump_dir), args.dump_step or scenario.dump_step)
    result = run_training(config, decide, scenario.faults, on_step, on_forward, autofuse=autofuse)
    write_fusion_result(trial_dir, result.stats.values())
    from .trainer import simulated_samples_per_second

    # Simulated time (fused kernels are faster), printed as a real training prints its throughput.
    print(f"speed {simulated_samples_per_second(result.kernels, config.batch):.6g} samples/s (simulated)", flush=True)
    print(f"accuracy: {result.accuracy:.6f}", flush=True)
    _append_metric(metrics_path, {"step": config.steps, "accuracy": result.accuracy})
    return 0


def main(argv: list[str] | None = None) -> int:
    try:
        return run(argv)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    code = main()
    # The exit's full collections would traverse every object numpy left: not needed at exit
    # (see fusion_dd.cli.main); a demo search runs dozens of these trainings.
    gc.freeze()
    sys.exit(code)
