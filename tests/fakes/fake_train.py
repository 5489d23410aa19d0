#!/usr/bin/env python3
"""A fake training for fusion-dd's tests: fast, scriptable, and honest about its inputs.

It behaves like the user's training as fusion-dd sees it (docs/architecture.md 4.3): it
prints ``step N loss X`` lines and a final ``accuracy: X`` to stdout, appends
``{"step": .., "loss": .., "accuracy": ..}`` records to ``$FUSION_DD_METRICS_FILE``,
and reads its ``fusion_switch.cfg`` to decide how well it trained.

Run it as ``[sys.executable, "-S", FAKE_TRAIN, ...options]`` (``fake_command`` in
tests/support/fake_training.py; ``-S`` because it needs only the standard library).

It imports nothing of fusion-dd: it reads the switch file with its own small
reader of CANN's format (``load_switch``; JSON sections or the old line format),
so a training costs one bare interpreter start and the tests check what
fusion-dd writes against the format, not against fusion-dd's own reader.

Simulated fusion bugs (read from ``--switch-file``, default ``$FUSION_DD_SWITCH_FILE``):

  --culprits A,B         each of these rules alone breaks the training when on ("OR")
  --pair C+D             the training breaks only when C and D are both on ("AND");
                         repeatable, any number of names joined by "+"

  A rule is on when the file's state for it is True, or None (silent file =
  CANN's default, which is on). Its section is taken from the file's entries
  (else from the catalog, else GraphFusion). Each item may end with
  ``:EFFECT``: ``low`` (accuracy drops to --bad-accuracy; the default), ``nan``
  (loss diverges to NaN), ``crash`` (exit code 3 before the metric), ``hang``
  (never finishes). E.g. ``--culprits A:nan,B --pair C+D:crash``. When several
  effects apply, the worst wins (hang > crash > nan > low).

Whole-run behaviour, independent of the switch file:

  --accuracy X           accuracy of a healthy run (default 0.9)
  --bad-accuracy X       accuracy of a broken run (default 0.5)
  --steps N              number of step lines (default 5)
  --sleep S              seconds of "training", spread over the steps (default 0)
  --nan                  the loss becomes NaN halfway through
  --nan-at-step N        the loss is NaN from step N on (for early stopping)
  --loss-curve SHAPE     the (finite) loss of step s; SHAPE is one of
                           decay          2 * 0.7**s + 0.1 (the default)
                           offset:D       decay + D at every step
                           diverge:K[:R]  decay up to step K, then + R per step
                                          after it (R defaults to 1.0)
  --step-sleep S         seconds to sleep after each step line, on top of --sleep
                         (with --nan-at-step: a long run that early stopping cuts)
  --damage-from N        a run broken by a ``low`` bug shows it in its loss too: from
                         step N on, + --damage-rate per step on top of its curve (a
                         culprit whose damage appears part-way, for early passes)
  --damage-at NAME:N     the damage of the bugs naming NAME starts at step N instead
                         (repeatable; with several bugs, the earliest start counts)
  --damage-rate R        loss added per step of damage (default 0.05)
  --curve-damage NAME:N  with NAME on, the loss rises from step N on as a culprit's would,
                         but the metric stays good (repeatable): a curve that lies
  --speed X              print ``speed X samples/s`` after each step line: the training's
                         throughput with every fusion on ...
  --slow-when-off NAME:F ... and F (a fraction) slower for each such rule switched off
                         (repeatable; rules not named cost nothing)
                         (with --nan-at-step: a long run that early stopping cuts)
  --exit-code N          exit with N after the steps, before the metric (a crash)
  --hang                 after the steps, sleep until killed
  --ignore-sigterm       ignore SIGTERM (printing ``SIGTERM ignored``), so only the
                         supervisor's SIGKILL ends it
  --spawn-child          start a grandchild in the same process group that sleeps
                         (and ignores SIGTERM too with --ignore-sigterm); its pid is
                         printed as ``child pid N``
  --setsid-child         start a grandchild that leaves the process group and the
                         session (``setsid``), like a daemonized worker, and sleeps
                         (ignoring SIGTERM with --ignore-sigterm); its pid is printed
                         as ``setsid child pid N``
  --clean-env-child      with --setsid-child: the grandchild starts with an empty
                         environment, so only its ancestry ties it to the trial
  --no-metric            print no metric and write no metric record
  --metric-times K       print the metric K times; only the last is the real value
  --metric-name NAME     metric label and metrics-file key (default "accuracy")
  --no-metrics-file      do not touch $FUSION_DD_METRICS_FILE
  --noise SIGMA          add Gaussian noise to the accuracy, seeded by --seed, the
                         configuration and $FUSION_DD_REPEAT (so it is reproducible)
  --loss-noise SIGMA     scatter each step's loss as a minibatch's does: times
                         1 + N(0, SIGMA), seeded the same way
  --flip-repeats 0,2     on these $FUSION_DD_REPEAT values the verdict flips
                         (healthy reports --bad-accuracy and broken reports
                         --accuracy): a deterministic flaky training
  --flip-config ON@R,S   flip the verdict only for the configuration whose switched-on
                         rules are ON ("+"-joined sorted names; "none" for the baseline)
                         on these $FUSION_DD_REPEAT values; repeatable
  --flip-rate P          the verdict flips with probability P, drawn from --seed, the
                         configuration and $FUSION_DD_REPEAT (a seeded flaky schedule)

Observability for tests:

  --launch-log PATH      append one JSON line per launch, at start:
                         {"on": [sorted names switched on by exact entries],
                          "repeat": R, "trial_id": ID, "device": D}
                         (D from ASCEND_DEVICE_ID, ASCEND_RT_VISIBLE_DEVICES or
                         CUDA_VISIBLE_DEVICES, the first one set)
                         (flock + O_APPEND: parallel launches never interleave)
  --print-env NAME       print ``env NAME=value`` (``<unset>`` when unset); repeatable
  --print-cwd            print ``cwd PATH``
  --print-argv           print ``argv JSON``

Any other argument is ignored, like a real training's own flags.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import signal
import sys
import time

# random, subprocess and the catalog's pathlib are imported where an option needs
# them: most trainings never do, and every import is paid by each of them.

_SEVERITY = {"low": 1, "nan": 2, "crash": 3, "hang": 4}
CRASH_EXIT_CODE = 3


def _parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="fake training for fusion-dd tests")
    parser.add_argument("--switch-file", default=os.environ.get("FUSION_DD_SWITCH_FILE"))
    parser.add_argument("--culprits", default="")
    parser.add_argument("--pair", action="append", default=[])
    parser.add_argument("--accuracy", type=float, default=0.9)
    parser.add_argument("--bad-accuracy", type=float, default=0.5)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--nan", action="store_true")
    parser.add_argument("--nan-at-step", type=int, default=None)
    parser.add_argument("--loss-curve", default="decay")
    parser.add_argument("--step-sleep", type=float, default=0.0)
    parser.add_argument("--damage-from", type=int, default=None)
    parser.add_argument("--damage-at", action="append", default=[])
    parser.add_argument("--damage-rate", type=float, default=0.05)
    parser.add_argument("--curve-damage", action="append", default=[])
    parser.add_argument("--speed", type=float, default=None)
    parser.add_argument("--slow-when-off", action="append", default=[])
    parser.add_argument("--exit-code", type=int, default=None)
    parser.add_argument("--hang", action="store_true")
    parser.add_argument("--ignore-sigterm", action="store_true")
    parser.add_argument("--spawn-child", action="store_true")
    parser.add_argument("--setsid-child", action="store_true")
    parser.add_argument("--clean-env-child", action="store_true")
    parser.add_argument("--no-metric", action="store_true")
    parser.add_argument("--metric-times", type=int, default=1)
    parser.add_argument("--metric-name", default="accuracy")
    parser.add_argument("--no-metrics-file", action="store_true")
    parser.add_argument("--noise", type=float, default=0.0)
    parser.add_argument("--loss-noise", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--flip-repeats", default="")
    parser.add_argument("--flip-config", action="append", default=[])
    parser.add_argument("--flip-rate", type=float, default=0.0)
    parser.add_argument("--launch-log", default=None)
    parser.add_argument("--print-env", action="append", default=[])
    parser.add_argument("--print-cwd", action="store_true")
    parser.add_argument("--print-argv", action="store_true")
    # Unknown arguments are ignored, as a real training's own flags would be
    # (tests pass placeholders such as --cfg={switch_file} and read them back
    # with --print-argv).
    args, _unknown = parser.parse_known_args(argv)
    return args


def _split_effect(item: str) -> tuple[str, str]:
    body, sep, effect = item.rpartition(":")
    if not sep:
        return item, "low"
    if effect not in _SEVERITY:
        raise SystemExit(f"fake_train: unknown effect {effect!r} in {item!r}")
    return body, effect


def _bug_groups(args: argparse.Namespace) -> list[tuple[list[str], str]]:
    """Each simulated bug as (rules that must all be on, effect)."""
    groups: list[tuple[list[str], str]] = []
    for item in filter(None, (part.strip() for part in args.culprits.split(","))):
        name, effect = _split_effect(item)
        groups.append(([name], effect))
    for item in args.pair:
        body, effect = _split_effect(item.strip())
        groups.append(([name for name in body.split("+") if name], effect))
    return groups


class Switch:
    """A fusion_switch.cfg as CANN applies it (docs/architecture.md 2.1), read with the standard library only.

    The fake reads the file on its own, not with fusion-dd's reader, so that the
    tests check what fusion-dd writes against the format itself, and so that a
    training costs an interpreter start, not fusion-dd's imports.
    ``entries`` maps a section (GraphFusion, UBFusion) to its exact entries
    (``ALL`` included) as booleans, in file order.
    """

    def __init__(self, entries: dict[str, dict[str, bool]], kept_on: frozenset[str] = frozenset()) -> None:
        self.entries = entries
        self.kept_on = kept_on  # ExceptionalPassOfO1Level: FE keeps these on whatever the switches say

    def state(self, name: str, section: str) -> bool | None:
        """An exact entry beats ``ALL``; None when the file is silent (CANN's default: on)."""
        section_entries = self.entries.get(section, {})
        return section_entries.get(name, section_entries.get("ALL"))

    def names(self) -> list[tuple[str, str]]:
        """Every exact (non-``ALL``) entry with its section, in file order."""
        return [(name, section) for section, entries in self.entries.items() for name in entries if name != "ALL"]


_SECTIONS = ("GraphFusion", "UBFusion")
_TOP_LEVEL = ("Switch", "Priority", "ExceptionalPassOfO1Level")
_VALUES = {"on": True, "off": False}


def _bad_switch(path: str, problem: str) -> SystemExit:
    """CANN refuses a malformed switch file, so the fake training does not run either."""
    return SystemExit(f"fake_train: {path}: {problem}")


def load_switch(path: str | None) -> Switch | None:
    """The switch file at ``path``: CANN's JSON sections, or the old ``PassName:on`` lines (both sections)."""
    if not path:
        return None
    with open(path, encoding="utf-8") as handle:
        return load_switch_text(handle.read(), path)


def load_switch_text(text: str, path: str) -> Switch:
    """A switch file's ``text``; ``path`` names it in the refusal of a malformed one."""
    body = text[1:] if text.startswith("\ufeff") else text  # CANN's JSON parser skips a byte-order mark
    if not text:
        raise _bad_switch(path, "the file is empty")
    if not body.lstrip().startswith("{"):
        seen: dict[str, bool] = {}  # the line format keeps it, as part of the first name
        for number, raw in enumerate(text.split("\n"), start=1):
            line = raw.strip()
            if not raw:
                continue  # only a truly empty line: one of spaces holds no ':' and is refused
            name, sep, value = (part.strip() for part in line.partition(":"))  # CANN: first colon, trimmed
            if not sep or not name or value not in _VALUES or name in seen:
                raise _bad_switch(path, f"line {number}: {line!r}")
            seen[name] = _VALUES[value]
        return Switch({section: dict(seen) for section in _SECTIONS})
    try:
        document = json.loads(body)
    except ValueError as exc:
        raise _bad_switch(path, f"not JSON ({exc})") from None
    if not isinstance(document, dict) or any(key not in _TOP_LEVEL for key in document):
        raise _bad_switch(path, f"top-level keys other than {', '.join(_TOP_LEVEL)}")
    switch = document.get("Switch", {})
    if not isinstance(switch, dict):
        raise _bad_switch(path, "'Switch' is not an object")
    entries: dict[str, dict[str, bool]] = {}
    for section, section_entries in switch.items():
        if section not in _SECTIONS or not isinstance(section_entries, dict):
            raise _bad_switch(path, f"'Switch.{section}' is not a GraphFusion or UBFusion object")
        for name, value in section_entries.items():
            if not isinstance(value, str) or value not in _VALUES:
                raise _bad_switch(path, f"'Switch.{section}.{name}' is {value!r}, not \"on\" or \"off\"")
        entries[section] = {name: _VALUES[value] for name, value in section_entries.items()}
    kept_on = document.get("ExceptionalPassOfO1Level", [])
    if not isinstance(kept_on, list) or not all(isinstance(name, str) for name in kept_on):
        raise _bad_switch(path, "'ExceptionalPassOfO1Level' is not a list of pass names")
    if not isinstance(document.get("Priority", {}), dict):
        raise _bad_switch(path, "'Priority' is not an object")
    return Switch(entries, frozenset(kept_on))


def _catalog_section(name: str) -> str:
    """The section of a pass name the file does not mention: fusion-dd's catalog data, else GraphFusion."""
    from pathlib import Path

    data = Path(__file__).resolve().parents[2] / "fusion_dd" / "data"
    for section, filename in (("GraphFusion", "graph_fusion.txt"), ("UBFusion", "ub_fusion.txt")):
        catalog = data / filename
        if catalog.exists() and name in {line.strip() for line in catalog.read_text(encoding="utf-8").splitlines()}:
            return section
    return "GraphFusion"


def _is_on(switch: Switch, name: str) -> bool:
    """CANN's view: on unless the file switches it off (silence means default on)."""
    if name in switch.kept_on:
        return True
    sections = [section for entry, section in switch.names() if entry == name] or [_catalog_section(name)]
    return any(switch.state(name, section) is not False for section in sections)


def _enabled_names(switch: Switch | None) -> list[str]:
    """Names switched on by an exact entry: the configuration fusion-dd wrote."""
    if switch is None:
        return []
    return sorted({name for name, section in switch.names() if switch.state(name, section)})


def _append_line(path: str, line: str) -> None:
    """One whole line per writer, even with many trainings appending at once."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, (line + "\n").encode("utf-8"))
    finally:
        os.close(fd)  # closing releases the lock


def _loss_curve(shape: str):
    """The loss of step s for a --loss-curve SHAPE (see the module docstring)."""
    name, _, rest = shape.partition(":")
    params = [float(part) for part in rest.split(":") if part] if rest else []

    def decay(step: int) -> float:
        return 2.0 * 0.7**step + 0.1

    if name == "decay" and not params:
        return decay
    if name == "offset" and len(params) == 1:
        return lambda step: decay(step) + params[0]
    if name == "diverge" and len(params) in (1, 2):
        start, rate = params[0], params[1] if len(params) == 2 else 1.0
        return lambda step: decay(step) + max(step - start, 0.0) * rate
    raise SystemExit(f"fake_train: unknown --loss-curve {shape!r}")


def _device() -> str | None:
    for variable in ("ASCEND_DEVICE_ID", "ASCEND_RT_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
        if variable in os.environ:
            return os.environ[variable]
    return None


def _spawn_child(ignore_sigterm: bool, setsid: bool = False, clean_env: bool = False) -> int:
    import subprocess

    code = "import signal, time\n"
    if ignore_sigterm:
        code += "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    code += "time.sleep(3600)\n"
    child = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.DEVNULL,
        # A daemon lets go of the training's output, as a real one would.
        stdout=subprocess.DEVNULL if setsid else None,
        stderr=subprocess.DEVNULL if setsid else None,
        start_new_session=setsid,
        env={} if clean_env else None,
    )
    return child.pid


def _random(seed: str):
    """A seeded generator (random imported only by the trainings that draw)."""
    import random

    return random.Random(seed)


def _say_sigterm_ignored(signum: int, frame: object) -> None:
    """Ignore SIGTERM, and say so: a test waits for this line to know that the stop has begun."""
    print("SIGTERM ignored", flush=True)


def _sleep_forever() -> None:
    while True:
        time.sleep(3600)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(sys.argv[1:] if argv is None else argv)
    if args.ignore_sigterm:
        signal.signal(signal.SIGTERM, _say_sigterm_ignored)
    repeat = int(os.environ.get("FUSION_DD_REPEAT", "0") or 0)

    switch = load_switch(args.switch_file)
    effect = None
    damage_starts = {name: int(step) for name, _, step in (item.rpartition(":") for item in args.damage_at)}
    damage_from = None  # the step from which the loss shows a "low" bug
    if switch is not None:
        for names, bug_effect in _bug_groups(args):
            if all(_is_on(switch, name) for name in names):
                if effect is None or _SEVERITY[bug_effect] > _SEVERITY[effect]:
                    effect = bug_effect
                starts = [damage_starts[name] for name in names if name in damage_starts]
                start = min(starts) if starts else args.damage_from
                if bug_effect == "low" and start is not None:
                    damage_from = start if damage_from is None else min(damage_from, start)
    if switch is not None:
        for name, _, step in (item.rpartition(":") for item in args.curve_damage):
            if _is_on(switch, name):
                damage_from = int(step) if damage_from is None else min(damage_from, int(step))
    enabled = _enabled_names(switch)

    if args.launch_log:
        _append_line(
            args.launch_log,
            json.dumps(
                {
                    "on": enabled,
                    "repeat": repeat,
                    "trial_id": os.environ.get("FUSION_DD_TRIAL_ID"),
                    "device": _device(),
                },
                sort_keys=True,
            ),
        )

    if args.spawn_child:
        print(f"child pid {_spawn_child(args.ignore_sigterm)}", flush=True)
    if args.setsid_child:
        pid = _spawn_child(args.ignore_sigterm, setsid=True, clean_env=args.clean_env_child)
        print(f"setsid child pid {pid}", flush=True)
    for name in args.print_env:
        print(f"env {name}={os.environ.get(name, '<unset>')}", flush=True)
    if args.print_cwd:
        print(f"cwd {os.getcwd()}", flush=True)
    if args.print_argv:
        print(f"argv {json.dumps(sys.argv)}", flush=True)

    metrics_path = None if args.no_metrics_file else os.environ.get("FUSION_DD_METRICS_FILE")
    metrics = open(metrics_path, "a", encoding="utf-8") if metrics_path else None

    def record(entry: dict) -> None:
        if metrics is not None:
            metrics.write(json.dumps(entry) + "\n")  # NaN as the bare JSON token
            metrics.flush()

    speed = args.speed
    if speed is not None and switch is not None:
        for item in args.slow_when_off:
            name, _, fraction = item.rpartition(":")
            if not _is_on(switch, name):
                speed *= 1.0 - float(fraction)
    diverges = args.nan or effect == "nan"
    curve = _loss_curve(args.loss_curve)
    scatter = _random(f"loss|{args.seed}|{repeat}|{','.join(enabled)}") if args.loss_noise > 0 else None
    loss = float("nan")
    for step in range(1, args.steps + 1):
        loss = curve(step)
        if damage_from is not None and step >= damage_from:
            loss += args.damage_rate * (step - damage_from + 1)
        if scatter is not None:
            loss *= 1.0 + scatter.gauss(0.0, args.loss_noise)
        if diverges and step > args.steps // 2:
            loss = float("nan")
        if args.nan_at_step is not None and step >= args.nan_at_step:
            loss = float("nan")
        print(f"step {step} loss {loss:.4f}", flush=True)
        if speed is not None:
            print(f"speed {speed:.6g} samples/s", flush=True)
        record({"step": step, "loss": loss})
        if args.sleep > 0:
            time.sleep(args.sleep / max(args.steps, 1))
        if args.step_sleep > 0:
            time.sleep(args.step_sleep)

    if args.hang or effect == "hang":
        print("hanging", flush=True)
        _sleep_forever()
    if effect == "crash":
        print("Traceback (most recent call last):\nRuntimeError: simulated fused-kernel crash",
              file=sys.stderr, flush=True)
        return CRASH_EXIT_CODE
    if args.exit_code is not None:
        print(f"simulated crash, exit code {args.exit_code}", file=sys.stderr, flush=True)
        return args.exit_code
    if args.no_metric:
        print("done (no metric)", flush=True)
        return 0

    broken = effect is not None
    flips = {int(part) for part in args.flip_repeats.split(",") if part.strip()}
    if repeat in flips:
        broken = not broken
    for spec in args.flip_config:
        on, _, repeats = spec.partition("@")
        wanted = [] if on == "none" else sorted(on.split("+"))
        if wanted == enabled and repeat in {int(part) for part in repeats.split(",") if part.strip()}:
            broken = not broken
    if args.flip_rate > 0 and _random(f"flip|{args.seed}|{repeat}|{','.join(enabled)}").random() < args.flip_rate:
        broken = not broken
    accuracy = args.bad_accuracy if broken else args.accuracy
    if args.noise > 0:
        rng = _random(f"{args.seed}|{repeat}|{','.join(enabled)}")
        accuracy += rng.gauss(0.0, args.noise)
    for decoy in range(args.metric_times - 1, 0, -1):
        value = accuracy - 0.1 * decoy
        print(f"{args.metric_name}: {value:.6g}", flush=True)
        record({"step": args.steps, args.metric_name: value})
    print(f"{args.metric_name}: {accuracy:.6g}", flush=True)
    record({"step": args.steps, "loss": loss, args.metric_name: accuracy})
    return 0


if __name__ == "__main__":
    sys.exit(main())
