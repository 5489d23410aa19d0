"""Candidates that close over themselves: "all off" must really be free of the compiler's rules.

Switching some rules off lets others fire (ONNX Runtime: ``SimplifiedLayerNormFusion``
matches only once ``LayerNormFusionL1`` is off; CANN alike when a graph pass no
longer matches first). A baseline with such a rule is not fusion-free, and a
"verified" fix still differs from the unoptimized output. So, before a search:
train the baseline (all candidates off), read which rules fired although they
are no candidates, add them, and train the baseline again, until nothing new
fires or ``MAX_ROUNDS`` rounds ran (``rules.closure: true``, ``fusion-dd rules
--closure``). Rules the compiler runs whatever its switches say are named,
never added.

The rounds are recorded in ``closure.json`` in the state directory before the
search starts, so a resumed search uses the same candidates without training
again. The loop itself (``close``) is pure; ``run_closure`` trains.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .errors import UsageError
from .rules import Rule

MAX_ROUNDS = 5
CLOSURE_FILE = "closure.json"
CLOSURE_DIR = "closure"


@dataclass
class Closure:
    """What closing the candidates found: the rules added per round, and the ones that cannot be switched off."""

    added: list[Rule] = field(default_factory=list)
    rounds: list[dict[str, Any]] = field(default_factory=list)
    stuck: list[str] = field(default_factory=list)  # fired although switched off: cannot be switched off
    closed: bool = False  # the last baseline fired nothing new

    def to_json(self) -> dict[str, Any]:
        return {
            "added": [rule.to_json() for rule in self.added],
            "rounds": self.rounds,
            "stuck": self.stuck,
            "closed": self.closed,
        }


def close(
    candidates: Sequence[Rule],
    train_baseline: Callable[[list[Rule], int], tuple[Iterable[str], Iterable[str]]],
    group_of: Callable[[str], Any],
    max_rounds: int = MAX_ROUNDS,
) -> Closure:
    """Add what fires in the all-off baseline until nothing new does (pure but for ``train_baseline``).

    ``train_baseline(candidates, round)`` trains with every candidate off and
    returns (names that fired, names that fired although switched off).
    ``group_of(name)``: the rule of a fired name, or None when it can never be a
    candidate (the compiler runs it whatever the switches say).
    """
    result = Closure()
    current = list(candidates)
    for number in range(1, max_rounds + 1):
        fired, fired_off = train_baseline(list(current), number)
        known = {rule.name for rule in current}
        stuck = sorted(set(fired_off))
        new: list[Rule] = []
        for name in sorted(set(fired) - known):
            group = group_of(name)
            if group is None:
                stuck.append(name)
            else:
                new.append(Rule(name, group))
        result.stuck = sorted(set(result.stuck) | set(stuck))
        result.rounds.append({"round": number, "added": [rule.name for rule in new], "stuck": sorted(set(stuck))})
        if not new:
            result.closed = True
            return result
        current += new
        result.added += new
    return result


def _closure_group(backend: Any) -> Callable[[str], Any]:
    group = getattr(backend, "closure_group", None)
    if group is None:
        raise UsageError(
            f"rules.closure: the {backend.name} backend cannot tell which rules outside the candidates fired; "
            "closure works with rules.compiler: onnxruntime"
        )
    return group  # type: ignore[no-any-return]


def train_once(config: Any, candidates: list[Rule], enabled: list[Rule], trial_dir: Path, what: str) -> dict[str, Any]:
    """One training outside the search's journal (closure rounds, the all-on run of ``rules.from: all_on``):
    its artifact facts. Its files stay in ``trial_dir`` for the user to read."""
    from .backends import backend_for
    from .hooks import fired_of
    from .launcher import LocalLauncher, TrialRequest
    from .metrics import MetricSpec
    from .trial import TrialSpec

    backend = backend_for(config)
    rendered = backend.render(candidates, enabled)
    spec = TrialSpec(
        trial_id=trial_dir.name,
        trial_dir=trial_dir,
        command=config.train.command,
        workdir=config.train.workdir,
        base_dir=config.base_dir,
        env={**config.train.env, **rendered.env},
        device=tuple(config.train.devices[0]),
        device_env=config.train.device_env,
        timeout=config.train.timeout,
        repeat=0,
        switch_text=rendered.switch_text,
        env_defaults=rendered.env_defaults,
        grace=config.train.kill_grace,
    )
    metric = MetricSpec.from_text(config.metric.pattern, config.metric.key, config.metric.goal, config.metric.loss_pattern)
    request = TrialRequest(spec=spec, metric=metric, hooks=tuple(backend.hooks(candidates)), role="baseline")
    result = LocalLauncher().start(request).wait()
    if result.kind != "metric" and not fired_of(result.artifacts):
        raise UsageError(f"{what}: the training ended without a metric ({result.reason}); see {trial_dir / result.log}")
    return {name: dict(facts) for name, facts in result.artifacts.items()}


FROM_ALL_ON_FILE = "from_all_on.json"


def candidates_from_all_on(config: Any, say: Callable[[str], None]) -> Any:
    """``rules.from: all_on``: the rules that fired in one training with every rule on become the candidates.

    Recorded in ``from_all_on.json`` of the state directory before the search
    starts, so a resumed search has the same candidates without training again.
    """
    from .atomic import write_json_atomic
    from .backends import backend_for
    from .hooks import fired_of

    path = Path(config.state_dir) / FROM_ALL_ON_FILE
    backend = backend_for(config)
    group_of = getattr(backend, "candidate_group", None)
    if group_of is None:
        raise UsageError(f"rules.from: all_on works with rules.compiler: onnxruntime or xla, not {backend.name}")
    if path.exists():
        try:
            names = [str(name) for name in json.loads(path.read_text(encoding="utf-8"))["fired"]]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise UsageError(f"{path}: unreadable record ({exc}); move the state directory aside (--restart)") from None
    else:
        trial_dir = Path(config.state_dir) / CLOSURE_DIR / "all-on"
        say(f"rules.from: all_on: training once with every rule on to see which fire ({trial_dir})")
        Path(config.state_dir).mkdir(parents=True, exist_ok=True)
        names = sorted(fired_of(train_once(config, list(config.rules), list(config.rules), trial_dir, "rules.from: all_on")))
        write_json_atomic(path, {"fired": names})
    known = {rule.name for rule in config.rules}
    stuck = [name for name in names if group_of(name) is None]
    added = [Rule(name, group_of(name)) for name in names if name not in known and group_of(name) is not None]
    if stuck:
        say(f"warning: {', '.join(stuck)} fired and cannot be switched off: no candidate")
    if not config.rules and not added:
        raise UsageError(f"rules.from: all_on: no rule that can be switched off fired in {path.parent / CLOSURE_DIR / 'all-on'}")
    say(f"rules.from: all_on: {len(added)} candidate(s): {', '.join(rule.name for rule in added) or 'none new'}")
    return replace(config, rules=tuple(config.rules) + tuple(added))


def run_closure(config: Any, say: Callable[[str], None], max_rounds: int = MAX_ROUNDS) -> Closure:
    """Train the all-off baseline round by round (in ``<state_dir>/closure/``) and close the candidates."""
    from .backends import backend_for
    from .hooks import fired_although_off_of, fired_of

    backend = backend_for(config)
    group_of = _closure_group(backend)

    def train_baseline(candidates: list[Rule], number: int) -> tuple[list[str], list[str]]:
        trial_dir = config.state_dir / CLOSURE_DIR / f"round-{number:02d}"
        say(f"closure round {number}: training the baseline with {len(candidates)} candidates off ({trial_dir})")
        artifacts = train_once(config, candidates, [], trial_dir, f"closure round {number}")
        return sorted(fired_of(artifacts)), fired_although_off_of(artifacts)

    config.state_dir.mkdir(parents=True, exist_ok=True)
    closure = close(list(config.rules), train_baseline, group_of, max_rounds)
    for entry in closure.rounds:
        added = ", ".join(entry["added"]) or "nothing new"
        say(f"closure round {entry['round']}: fired although no candidate: {added}")
    if closure.stuck:
        say(f"warning: {', '.join(closure.stuck)} fired in the all-off baseline and cannot be switched off")
    if not closure.closed:
        say(f"warning: still new rules firing after {max_rounds} rounds; the baseline may not be fusion-free")
    return closure


def closed_config(config: Any, say: Callable[[str], None]) -> Any:
    """``rules.closure: true``: the config with the closure's rules added; closure.json makes it stable on resume."""
    path = Path(config.state_dir) / CLOSURE_FILE
    if path.exists():
        try:
            recorded = json.loads(path.read_text(encoding="utf-8"))
            added = [Rule(item["name"], _section(item["section"])) for item in recorded["added"]]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise UsageError(f"{path}: unreadable closure record ({exc}); move the state directory aside (--restart)") from None
    else:
        if (Path(config.state_dir) / "journal.jsonl").exists():
            return config  # a search started without closure: its candidates stay
        closure = run_closure(config, say)
        from .atomic import write_json_atomic

        write_json_atomic(path, closure.to_json())
        added = closure.added
    known = {rule.name for rule in config.rules}
    added = [rule for rule in added if rule.name not in known]  # listed by hand since: once is enough
    if not added:
        return config
    say(f"closure: {len(added)} rule(s) added to the candidates: {', '.join(rule.name for rule in added)}")
    return replace(config, rules=tuple(config.rules) + tuple(added))


def _section(text: str) -> Any:
    from .rules import Section

    return Section.parse(text)
