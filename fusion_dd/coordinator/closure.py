"""Candidates that close over themselves, and candidates from the first training.

Closure (``rules.closure: true``, ``fusion-dd rules --closure``). Switching some
rules off lets others fire (ONNX Runtime: ``SimplifiedLayerNormFusion`` matches
only once ``LayerNormFusionL1`` is off; XLA:CPU: ``fusion`` once
``dot-library-rewriter`` is off; CANN alike when a graph pass no longer matches
first). A baseline with such a rule is not fusion-free, and a "verified" fix
still differs from the unoptimized output. So, before a search: train the
baseline (all candidates off), read which rules fired although they are no
candidates, add them, and train the baseline again, until nothing new fires or
``MAX_ROUNDS`` rounds ran. What the backend says can never be a candidate is
named, never added: rules the compiler runs whatever its switches say (ONNX
Runtime's cast transformers, CANN's passes "forbidden to close": a rule closure
added that fires although switched off is dropped again), and XLA's structural
passes (layout assignment, copy insertion: they make the program executable,
their switch-off is no fix).

``rules.from: all_on``: the rules that fired in one training with every rule on
become the candidates; that training is also the search's all-on reference
(journaled as trial ``all-on`` of its journal), so the search trains all-on no
second time.

Records: before the journal exists, ``closure.json`` and ``from_all_on.json`` in
the state directory keep what the trainings found, so an interrupted start
trains them not again; once the search is journaled, its ``search_started``
record holds the candidates and a resume takes them from there, reading no
file of those trainings again. The loop itself (``close``) is pure;
``run_closure`` trains.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..core.errors import UsageError
from ..core.rules import Rule, Section
from ..store.records import RecordType

MAX_ROUNDS = 5
CLOSURE_FILE = "closure.json"
CLOSURE_DIR = "closure"
FROM_ALL_ON_FILE = "from_all_on.json"
#: The journal's id and directory (under the state directory) of the all-on training of ``rules.from: all_on``.
ALL_ON_TRIAL = "all-on"

GroupOf = Callable[[str], Any]


@dataclass
class Closure:
    """What closing the candidates found: the rules added per round, and the ones that can be no candidate."""

    added: list[Rule] = field(default_factory=list)
    rounds: list[dict[str, Any]] = field(default_factory=list)
    stuck: list[str] = field(default_factory=list)  # fired in the all-off baseline and can be no candidate
    closed: bool = False  # the last baseline fired nothing new
    dropped: list[str] = field(default_factory=list)  # candidates not given by hand that fire although off

    def to_json(self) -> dict[str, Any]:
        document = {
            "added": [rule.to_json() for rule in self.added],
            "rounds": self.rounds,
            "stuck": self.stuck,
            "closed": self.closed,
        }
        if self.dropped:
            document["dropped"] = self.dropped
        return document


def close(
    candidates: Sequence[Rule],
    train_baseline: Callable[[list[Rule], int], tuple[Iterable[str], Iterable[str]]],
    group_of: GroupOf,
    max_rounds: int = MAX_ROUNDS,
    given: Iterable[str] | None = None,
) -> Closure:
    """Add what fires in the all-off baseline until nothing new does (pure but for ``train_baseline``).

    ``train_baseline(candidates, round)`` trains with every candidate off and
    returns (names that fired, names that fired although switched off).
    ``group_of(name)``: the rule's group, or None when it can never be a
    candidate (the compiler runs it whatever the switches say, or it is
    structural). A rule closure added that fires although switched off cannot
    be switched off: it is dropped from the candidates again and never re-added;
    so is any other candidate not in ``given`` (the names the user listed; by
    default every candidate), e.g. one ``rules.from: all_on`` found.
    """
    result = Closure()
    given = set(given) if given is not None else {rule.name for rule in candidates}
    current = list(candidates)
    never: set[str] = set()  # named once as no candidate: never added again
    for number in range(1, max_rounds + 1):
        fired, fired_off = train_baseline(list(current), number)
        stuck = set(fired_off)
        dropped = [rule for rule in current if rule.name in stuck and rule.name not in given]
        if dropped:
            current = [rule for rule in current if rule not in dropped]
            result.added = [rule for rule in result.added if rule not in dropped]
            result.dropped += [rule.name for rule in dropped if rule.name not in result.dropped]
        known = {rule.name for rule in current}
        new: list[Rule] = []
        for name in sorted(set(fired) - known - never - stuck):
            group = group_of(name)
            if group is None:
                stuck.add(name)
            else:
                new.append(Rule(name, group))
        never |= stuck
        result.stuck = sorted(set(result.stuck) | stuck)
        entry: dict[str, Any] = {"round": number, "added": [rule.name for rule in new], "stuck": sorted(stuck)}
        if dropped:
            entry["dropped"] = [rule.name for rule in dropped]
        result.rounds.append(entry)
        if not new:
            result.closed = True
            return result
        current += new
        result.added += new
    return result


# -- what the backends' artifact facts say ---------------------------------------------------------


def fired_sections_of(artifacts: Mapping[str, Mapping[str, Any]] | None) -> dict[str, str]:
    """``fired_sections`` facts (CANN: the section each fired rule was reported in), by name."""
    sections: dict[str, str] = {}
    for facts in (artifacts or {}).values():
        if isinstance(facts, Mapping) and isinstance(facts.get("fired_sections"), Mapping):
            sections.update({str(name): str(section) for name, section in facts["fired_sections"].items()})
    return sections


def group_function(backend: Any, sections: Mapping[str, str]) -> GroupOf:
    """The group of a fired rule: its reported section (CANN), else the backend's ``closure_group``."""
    backend_group = getattr(backend, "closure_group", None)
    if backend_group is None:
        raise UsageError(f"the {backend.name} backend cannot tell which rules outside the candidates fired")

    def group_of(name: str) -> Any:
        if name in sections:
            return Section.parse(sections[name])
        return backend_group(name)

    return group_of


def _structural(backend: Any, names: Iterable[str]) -> list[str]:
    is_structural = getattr(backend, "structural", None)
    return sorted(name for name in names if is_structural is not None and is_structural(name))


# -- trainings outside the journal ------------------------------------------------------------------


def closure_hooks(backend: Any, candidates: Sequence[Rule]) -> list[Any]:
    """The hooks of a closure or all-on training: the backend's, reporting every rule that fired.

    CANN's search trials journal only the candidates' counts (its journals stay
    as they were); these trainings also need the rules outside the candidates.
    """
    hooks = getattr(backend, "closure_hooks", None)
    return list(hooks(candidates) if hooks is not None else backend.hooks(candidates))


def train_once(config: Any, candidates: list[Rule], enabled: list[Rule], trial_dir: Path, what: str) -> Any:
    """One training outside the search's journal (closure rounds, the all-on run of ``rules.from: all_on``).

    Returns the launcher's ``TrialResult`` (its ``artifacts`` are the hooks'
    facts). Its files stay in ``trial_dir`` for the user to read. Runs through the
    launcher ``train.launcher`` names, as the search's trainings do (a cluster's
    trainings must not land on the coordinator's machine), on its first slot (the
    first device of ``train.devices`` for the local launcher).
    """
    from ..backends import backend_for
    from ..core.hooks import fired_of
    from ..runner.launcher import TrialRequest, call_hook
    from ..runner.registry import launcher_for
    from ..runner.metrics import MetricSpec
    from ..runner.trial import TrialSpec

    backend = backend_for(config)
    rendered = backend.render(candidates, enabled)
    launcher = launcher_for(config)
    slots = getattr(launcher, "slots", None)
    devices = slots() if slots is not None else config.train.devices
    spec = TrialSpec(
        trial_id=trial_dir.name,
        trial_dir=trial_dir,
        command=config.train.command,
        workdir=config.train.workdir,
        base_dir=config.base_dir,
        env={**config.train.env, **rendered.env},
        device=tuple(devices[0]) if devices else tuple(config.train.devices[0]),
        device_env=config.train.device_env,
        timeout=config.train.timeout,
        repeat=0,
        switch_text=rendered.switch_text,
        env_defaults=rendered.env_defaults,
        grace=config.train.kill_grace,
    )
    metric = MetricSpec.from_text(config.metric.pattern, config.metric.key, config.metric.goal, config.metric.loss_pattern)
    request = TrialRequest(
        spec=spec,
        metric=metric,
        hooks=tuple(closure_hooks(backend, candidates)),
        enabled=frozenset(rule.name for rule in enabled),
        role="all_on" if enabled else "baseline",
    )
    try:
        result = launcher.start(request).wait()
    finally:
        # This launcher lives for one training: what it keeps between trainings (the local
        # fork server, a cluster client) ends with it, not when it is collected.
        call_hook(launcher, "run_ended")
        call_hook(launcher, "close")
    if result.kind != "metric" and not fired_of(result.artifacts):
        raise UsageError(f"{what}: the training ended without a metric ({result.reason}); see {trial_dir / result.log}")
    return result


def _stop_if_unreadable(artifacts: Mapping[str, Any] | None, what: str) -> None:
    """Nothing fired, but a hook could not read its file: "nothing fired" would be a guess, so stop, naming it."""
    from ..core.hooks import fired_of

    errors = [str(facts["error"]) for facts in (artifacts or {}).values() if isinstance(facts, Mapping) and facts.get("error")]
    if errors and not fired_of(artifacts):
        raise UsageError(f"{what}: could not read which rules fired: {errors[0]}")


def _stop_if_ignored(artifacts: Mapping[str, Any], closure_added: set[str], what: str) -> None:
    """A training whose switches did not reach the compiler proves nothing: stop, with the backend's hint.

    CANN calls a trial "ignored" when any switched-off candidate fired; when
    those are all rules closure added, they are rules CANN cannot switch off
    (its "forbidden to close" list), which closure drops: no stop.
    """
    from ..core.hooks import fired_although_off_of, switch_check_of

    status, message = switch_check_of(artifacts)
    if status != "ignored":
        return
    fired_off = set(fired_although_off_of(artifacts))
    if fired_off and fired_off <= closure_added:
        return
    raise UsageError(f"{what}: {message}")


def run_closure(
    config: Any, say: Callable[[str], None], max_rounds: int = MAX_ROUNDS, given: Iterable[str] | None = None
) -> Closure:
    """Train the all-off baseline round by round (in ``<state_dir>/closure/``) and close the candidates.

    ``given``: the candidates the user listed (default: all of ``config.rules``); the others may be dropped.
    """
    from ..backends import backend_for
    from ..core.hooks import fired_although_off_of, fired_of

    backend = backend_for(config)
    sections: dict[str, str] = {}
    group_of = group_function(backend, sections)
    given = set(given) if given is not None else {rule.name for rule in config.rules}

    def train_baseline(candidates: list[Rule], number: int) -> tuple[list[str], list[str]]:
        trial_dir = config.state_dir / CLOSURE_DIR / f"round-{number:02d}"
        say(f"closure round {number}: training the baseline with {len(candidates)} candidates off ({trial_dir})")
        what = f"closure round {number}"
        artifacts = train_once(config, candidates, [], trial_dir, what).artifacts
        _stop_if_ignored(artifacts, {rule.name for rule in candidates} - given, what)
        _stop_if_unreadable(artifacts, what)
        sections.update(fired_sections_of(artifacts))
        return sorted(fired_of(artifacts)), fired_although_off_of(artifacts)

    config.state_dir.mkdir(parents=True, exist_ok=True)
    closure = close(list(config.rules), train_baseline, group_of, max_rounds, given)
    for entry in closure.rounds:
        added = ", ".join(entry["added"]) or "nothing new"
        dropped = f" (dropped again, they fire although switched off: {', '.join(entry['dropped'])})" if entry.get("dropped") else ""
        say(f"closure round {entry['round']}: fired although no candidate: {added}{dropped}")
    structural = _structural(backend, closure.stuck)
    others = [name for name in closure.stuck if name not in structural]
    if structural:
        say(
            f"closure: {', '.join(structural)} fired in the all-off baseline: structural passes the compiler "
            "needs to run the program, never candidates"
        )
    if others:
        say(f"warning: {', '.join(others)} fired in the all-off baseline and cannot be switched off")
    if not closure.closed:
        say(f"warning: still new rules firing after {max_rounds} rounds; the baseline may not be fusion-free")
    return closure


# -- before a search ------------------------------------------------------------------------------


def _read_record(path: Path, what: str) -> dict[str, Any]:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(record, dict):
            raise TypeError("not a JSON object")
        return record
    except (OSError, ValueError, TypeError) as exc:
        raise UsageError(f"{path}: unreadable {what} ({exc}); move the state directory aside (--restart)") from None


def _rules_of(items: Any, path: Path) -> list[Rule]:
    try:
        return [Rule(str(item["name"]), Section.parse(str(item["section"]))) for item in items]
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"{path}: unreadable record ({exc}); move the state directory aside (--restart)") from None


def journaled_rules(state_dir: Path) -> list[Rule] | None:
    """The candidates of the search journaled in ``state_dir``, None when none was journaled yet.

    An unreadable journal gives None: the engine reads it next and says what is wrong.
    """
    from ..store.journal import JOURNAL_NAME, read_records
    from ..store.state import replay

    path = Path(state_dir) / JOURNAL_NAME
    if not path.exists():
        return None
    try:
        definition = replay(read_records(path)).definition
        if definition is None:
            return None
        return _rules_of(definition.get("rules", []), path)
    except (UsageError, OSError, ValueError):
        return None


@dataclass
class Prepared:
    """The search's config with its candidates complete, and reference trainings to journal with it."""

    config: Any
    adopted: list[dict[str, Any]] = field(default_factory=list)  # journal records (trial_started, trial_finished)


def prepare(config: Any, say: Callable[[str], None]) -> Prepared:
    """``rules.from: all_on`` and ``rules.closure`` before the journal: the candidates the search uses.

    A search already journaled keeps its journaled candidates (nothing is
    trained or read again); the engine then checks the rest of the definition.
    """
    if not (config.from_all_on or config.closure):
        return Prepared(config)
    journaled = journaled_rules(config.state_dir)
    if journaled is not None:
        listed = set(config.rules)
        if listed <= set(journaled):
            if len(journaled) > len(listed):
                say(f"candidates as journaled ({len(journaled) - len(listed)} from rules.from: all_on or closure)")
            return Prepared(replace(config, rules=tuple(journaled)))
        return Prepared(config)  # other rules than journaled: the engine names the change
    all_on: dict[str, Any] | None = None
    listed = [rule.name for rule in config.rules]
    if config.from_all_on:
        config, all_on = candidates_from_all_on(config, say)
    if config.closure:
        config = closed_config(config, say, given=listed)
    adopted = _adopted_all_on(config, all_on, say) if all_on is not None else []
    return Prepared(config, adopted)


def candidates_from_all_on(config: Any, say: Callable[[str], None]) -> tuple[Any, dict[str, Any]]:
    """``rules.from: all_on``: the rules that fired in one training with every rule on become the candidates.

    Recorded in ``from_all_on.json`` of the state directory (what fired, the
    rendering and the training's result) before the search starts, so an
    interrupted start trains it not again. Returns the config and that record.
    """
    from ..store.atomic import write_json_atomic
    from ..backends import backend_for
    from ..core.hooks import fired_of

    path = Path(config.state_dir) / FROM_ALL_ON_FILE
    backend = backend_for(config)
    trial_dir = Path(config.state_dir) / CLOSURE_DIR / ALL_ON_TRIAL
    if path.exists():
        record = _read_record(path, "record of rules.from: all_on")
    else:
        say(f"rules.from: all_on: training once with every rule on to see which fire ({trial_dir})")
        Path(config.state_dir).mkdir(parents=True, exist_ok=True)
        listed = list(config.rules)
        started = time.time()
        result = train_once(config, listed, listed, trial_dir, "rules.from: all_on")
        _stop_if_ignored(result.artifacts, set(), "rules.from: all_on")
        _stop_if_unreadable(result.artifacts, "rules.from: all_on")
        rendered = backend.render(listed, listed)
        record = {
            "fired": sorted(fired_of(result.artifacts)),
            "sections": fired_sections_of(result.artifacts),
            "rendered": _rendered_json(rendered),
            "device": list(config.train.devices[0]),
            "started": started,
            "result": result.record_fields(),
            "log": f"{CLOSURE_DIR}/{ALL_ON_TRIAL}/{result.log}",
        }
        write_json_atomic(path, record)
    try:
        names = [str(name) for name in record["fired"]]
        sections = {str(k): str(v) for k, v in dict(record.get("sections") or {}).items()}
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"{path}: unreadable record ({exc}); move the state directory aside (--restart)") from None
    group_of = getattr(backend, "candidate_group", None) or group_function(backend, {})
    known = {rule.name for rule in config.rules}
    stuck: list[str] = []
    added: list[Rule] = []
    for name in names:
        group = Section.parse(sections[name]) if name in sections else group_of(name)
        if group is None:
            stuck.append(name)
        elif name not in known:
            added.append(Rule(name, group))
    structural = _structural(backend, stuck)
    others = [name for name in stuck if name not in structural]
    if structural:
        say(f"rules.from: all_on: {', '.join(structural)} fired: structural passes, never candidates")
    if others:
        say(f"warning: {', '.join(others)} fired and cannot be switched off: no candidate")
    if not config.rules and not added:
        raise UsageError(f"rules.from: all_on: no rule that can be switched off fired in {trial_dir}")
    say(f"rules.from: all_on: {len(added)} candidate(s): {', '.join(rule.name for rule in added) or 'none new'}")
    return replace(config, rules=tuple(config.rules) + tuple(added)), record


def _rendered_json(rendered: Any) -> dict[str, Any]:
    return {
        "switch_text": rendered.switch_text,
        "env": dict(sorted(rendered.env.items())),
        "env_defaults": dict(sorted(rendered.env_defaults.items())),
    }


def _adopted_all_on(config: Any, record: Mapping[str, Any], say: Callable[[str], None]) -> list[dict[str, Any]]:
    """The all-on training of ``rules.from: all_on`` as the search's all-on reference: its journal records.

    Only when that training is the all-on configuration of the final candidates:
    the same environment, and the same switch file or one that differs only by
    explicit "on" entries for rules that fired at the compiler's default (CANN:
    ``all_on_by_default``). Its hook facts are collected again for the final
    candidates now, before the journal exists, so that the fusion counts that
    steer the search's choices cover every candidate.
    """
    from ..backends import backend_for
    from ..core.hooks import TrialFiles, collect_artifacts, switch_check_of

    if config.score.all_on_metric is not None or not isinstance(record.get("result"), Mapping):
        return []  # no all-on training needed, or a record of an older fusion-dd without the result
    backend = backend_for(config)
    rules = list(config.rules)
    now = _rendered_json(backend.render(rules, rules))
    then = record.get("rendered") or {}
    same_env = now["env"] == then.get("env") and now["env_defaults"] == then.get("env_defaults")
    same_switch = now["switch_text"] == then.get("switch_text") or getattr(backend, "all_on_by_default", False)
    if not (same_env and same_switch):
        say("rules.from: all_on: the search's all-on configuration differs from that training's: all-on trains again")
        return []
    result = dict(record["result"])
    trial_dir = Path(config.state_dir) / CLOSURE_DIR / ALL_ON_TRIAL
    names = frozenset(rule.name for rule in rules)
    if trial_dir.is_dir():
        result["artifacts"] = collect_artifacts(backend.hooks(rules), TrialFiles(trial_dir, names, "all_on"))
    switch_check, reason = switch_check_of(result.get("artifacts"))
    if switch_check == "ignored":
        return []  # let the search train it and stop on it with its message
    started = float(record.get("started") or time.time())
    return [
        {
            "type": RecordType.TRIAL_STARTED,
            "trial_id": ALL_ON_TRIAL,
            "config": sorted(names),
            "repeat": 0,
            "attempt": 1,
            "device": list(record.get("device") or []),
            "trial_dir": f"{CLOSURE_DIR}/{ALL_ON_TRIAL}",
            "role": "all_on",
            "time": started,
            "adopted": "rules.from: all_on",
        },
        {
            "type": RecordType.TRIAL_FINISHED,
            "trial_id": ALL_ON_TRIAL,
            **result,
            "log": str(record.get("log") or f"{CLOSURE_DIR}/{ALL_ON_TRIAL}/output.log"),
            "switch_check": switch_check,
            "switch_check_reason": reason if switch_check != "applied" else None,
            "time": started + float(result.get("duration") or 0.0),
        },
    ]


def closed_config(config: Any, say: Callable[[str], None], given: Iterable[str] | None = None) -> Any:
    """``rules.closure: true``: the config with the closure's rules added (and the candidates not
    ``given`` by hand that fire although switched off dropped); closure.json makes it stable on resume."""
    from ..store.atomic import write_json_atomic

    given = set(given) if given is not None else {rule.name for rule in config.rules}
    path = Path(config.state_dir) / CLOSURE_FILE
    if path.exists():
        recorded = _read_record(path, "closure record")
        added = _rules_of(recorded.get("added"), path)
        dropped = {str(name) for name in recorded.get("dropped") or ()}
    else:
        closure = run_closure(config, say, given=given)
        write_json_atomic(path, closure.to_json())
        added, dropped = closure.added, set(closure.dropped)
    kept = [rule for rule in config.rules if rule.name not in dropped or rule.name in given]
    known = {rule.name for rule in kept}
    added = [rule for rule in added if rule.name not in known]  # listed by hand since: once is enough
    if len(kept) < len(config.rules):
        gone = [rule.name for rule in config.rules if rule not in kept]
        say(f"closure: {', '.join(gone)} fire although switched off: no candidates")
    if added:
        say(f"closure: {len(added)} rule(s) added to the candidates: {', '.join(rule.name for rule in added)}")
    return replace(config, rules=tuple(kept) + tuple(added))
