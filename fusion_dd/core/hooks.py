"""Trial-artifact hooks: a trial's files become journaled facts the moment it ends.

Whatever the search or the report later uses from a trial's files (did the
compiler apply the switch file, how often each rule fused, later the tensor
dumps) is read once, right after the training ended, and written into the
journal with the trial's result. Resume replays the journal and never reads a
trial directory again, so a file that changed or vanished since cannot change
an answer, and a trial that ran on another host needs no shared disk for it.

A hook is small: a name (the key of its facts under ``artifacts`` in the
``trial_finished`` record) and ``collect``. Facts are plain JSON. Two keys have
a meaning for the engine, so that it needs to know no compiler:

* ``switch_check``: ``{"status": "applied" | "ignored" | "unverified", "message": str}``,
  the proof that the configuration reached the compiler;
* ``effects``: ``{rule name: count}``, how many places each rule changed in
  this training (the all-on run's counts steer which rule of an interacting
  set is switched off).

A hook that raises does not cost the trial: its facts become
``{"error": "..."}`` and the engine treats the proof as unverified.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from .errors import UsageError


@dataclass(frozen=True)
class TrialFiles:
    """What a hook may know about the trial whose files it reads."""

    trial_dir: Path
    enabled: frozenset[str]  # names of the candidate rules switched on
    role: str = "search"  # baseline, all_on, search, repeat, ...


class ArtifactHook(Protocol):
    name: str

    def collect(self, files: TrialFiles) -> dict[str, Any]:
        """Facts about the trial, JSON-serializable; raise ``UsageError`` for unreadable files."""
        ...


def collect_artifacts(hooks: Iterable[ArtifactHook], files: TrialFiles) -> dict[str, dict[str, Any]]:
    """Every hook's facts by hook name; a failing hook gives ``{"error": reason}``."""
    facts: dict[str, dict[str, Any]] = {}
    for hook in hooks:
        try:
            facts[hook.name] = dict(hook.collect(files))
        except UsageError as exc:
            facts[hook.name] = {"error": str(exc)}
        except Exception as exc:  # a bug in one hook must not lose a finished training
            facts[hook.name] = {"error": f"{type(exc).__name__}: {exc}"}
    return facts


def missing_message(name: str) -> str:
    """Why a trial's switch file is not known applied when the file that would tell was never written.

    The commonest case by far (a training wired to no compiler report), so the facts journal
    only the file's name (``missing``) and the sentence is made here, not repeated per trial.
    """
    return f"the training left no {name}, so fusion-dd could not verify that its switch file was applied"


def _message_of(check: Mapping[str, Any]) -> str | None:
    if "message" not in check and isinstance(check.get("missing"), str):
        return missing_message(check["missing"])
    return check.get("message")


def switch_check_of(artifacts: Mapping[str, Mapping[str, Any]] | None) -> tuple[str, str | None]:
    """The trial's switch check from its facts: ignored wins over applied; none is unverified."""
    checks = [
        facts["switch_check"]
        for facts in (artifacts or {}).values()
        if isinstance(facts, Mapping) and isinstance(facts.get("switch_check"), Mapping)
    ]
    errors = [
        str(facts["error"]) for facts in (artifacts or {}).values() if isinstance(facts, Mapping) and "error" in facts
    ]
    for wanted in ("ignored", "applied"):
        for check in checks:
            if check.get("status") == wanted:
                return wanted, _message_of(check)
    if checks:
        return "unverified", _message_of(checks[0])
    if errors:
        return "unverified", errors[0]
    return "unverified", None


def effects_of(artifacts: Mapping[str, Mapping[str, Any]] | None) -> dict[str, int]:
    """Summed ``effects`` of every hook's facts (rule name -> count)."""
    total: dict[str, int] = {}
    for facts in (artifacts or {}).values():
        if not isinstance(facts, Mapping):
            continue
        for name, count in (facts.get("effects") or {}).items():
            total[str(name)] = total.get(str(name), 0) + int(count)
    return total


def fired_although_off_of(artifacts: Mapping[str, Mapping[str, Any]] | None) -> list[str]:
    """Rule names a hook saw fire although the configuration switched them off (``fired_although_off``).

    Not a stop: compilers run some passes whatever their switch says (ONNX
    Runtime's cast transformers), or a pass fires only once others are off. The
    user must hear their names: an "all off" baseline with them is not fusion-free.
    """
    names: set[str] = set()
    for facts in (artifacts or {}).values():
        if isinstance(facts, Mapping):
            names |= {str(name) for name in facts.get("fired_although_off") or ()}
    return sorted(names)


def fired_of(artifacts: Mapping[str, Mapping[str, Any]] | None) -> set[str]:
    """Every rule name a hook saw change something (``fired``), candidates or not: what closure adds from."""
    names: set[str] = set()
    for facts in (artifacts or {}).values():
        if isinstance(facts, Mapping):
            names |= {str(name) for name in facts.get("fired") or ()}
    return names


def unknown_to_compiler_of(artifacts: Mapping[str, Mapping[str, Any]] | None) -> list[str]:
    """Candidate names a hook saw the compiler not know (``unknown_to_compiler``): they switch nothing."""
    names: set[str] = set()
    for facts in (artifacts or {}).values():
        if isinstance(facts, Mapping):
            names |= {str(name) for name in facts.get("unknown_to_compiler") or ()}
    return sorted(names)


def known_to_compiler_of(artifacts: Mapping[str, Mapping[str, Any]] | None) -> list[str]:
    """Candidate names missing from fusion-dd's shipped list that the compiler's own artifacts name
    (``known_to_compiler``): newer than the list, real in this build; the warning before launch does not apply."""
    names: set[str] = set()
    for facts in (artifacts or {}).values():
        if isinstance(facts, Mapping):
            names |= {str(name) for name in facts.get("known_to_compiler") or ()}
    return sorted(names)
