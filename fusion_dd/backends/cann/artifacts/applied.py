"""Proof that a trial's switch file reached the compiler.

CANN silently ignores a switch file that a training never loads, and then every
trial trains the same network: the search would "find" culprits in noise. The
``fusion_result.json`` a trial leaves behind says what the compiler really did,
so it is checked against what the trial's switch file asked for (docs/architecture.md 2.2).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ....core.errors import UsageError
from ....core.rules import Rule
from .discover import fusion_results_in
from .fusion_result import FusionResult, read_fusion_result

WIRING_HELP = (
    "check that the training hands $FUSION_DD_SWITCH_FILE to the compiler: "
    "TensorFlow 1.x custom_op.parameter_map[\"fusion_switch_file\"].s or "
    "NPURunConfig(fusion_switch_file=...), TensorFlow 2.x "
    "npu_device.global_options().fusion_switch_file before npu_device.open(), torchair "
    "config.fusion_config.fusion_switch_file, GE option ge.fusionSwitchFile, atc "
    "--fusion_switch_file (fusion_dd.integrations does this); and that no compile "
    "cache or prebuilt .om is reused between trials, since cached builds keep old "
    "fusion decisions"
)

Status = Literal["applied", "ignored", "unverified"]

#: The reason when a trial left no result at all (the report tells this case from an unreadable file).
NO_RESULT = (
    "the training left no fusion_result.json, so fusion-dd could not verify "
    "that its switch file was applied"
)


@dataclass(frozen=True)
class TrialResults:
    """The ``fusion_result.json`` files of one trial: those read, and those that could not be, with why."""

    results: tuple[FusionResult, ...]
    unreadable: tuple[tuple[str, str], ...] = ()  # (path, reason)


@dataclass(frozen=True)
class SwitchCheck:
    """The verdict on one trial; ``message`` is ready for users when not applied."""

    status: Status
    message: str
    fired_while_off: tuple[Rule, ...] = ()


def find_fusion_results(trial_dir: str | Path) -> list[Path]:
    """``fusion_result.json`` files a trial left (work dir or ``FE/<pid>/``)."""
    directory = Path(trial_dir)
    return fusion_results_in(directory) if directory.is_dir() else []


def check_switch_applied(
    results: Sequence[FusionResult],
    candidates: Iterable[Rule],
    enabled: Iterable[Rule],
    unreadable: Sequence[tuple[str, str]] = (),
) -> SwitchCheck:
    """Whether the compiler obeyed a configuration.

    Ignored when a candidate switched off fired, or when every candidate was on
    and none fired in a section the compiler reported on; unverified when there is
    no result (or it covers none of the candidates' sections). A result file that
    could not be read (``unreadable``: path and reason) may hide the graph where a
    switched-off rule fired, so it leaves the check unverified, naming the file,
    unless the readable ones already prove the switch file was ignored.
    """
    candidate_list = list(dict.fromkeys(candidates))
    enabled_set = set(enabled)
    if not results and not unreadable:
        return SwitchCheck("unverified", NO_RESULT)
    fired: set[Rule] = set()
    covered = set()
    for result in results:
        fired |= set(result.fired())
        covered |= result.sections()
    off_fired = tuple(
        rule for rule in candidate_list if rule not in enabled_set and rule in fired
    )
    if off_fired:
        names = ", ".join(f"{rule.name} ({rule.section})" for rule in off_fired)
        return SwitchCheck(
            "ignored",
            f"the switch file was not applied: {names} fired although switched off; "
            + WIRING_HELP,
            off_fired,
        )
    if unreadable:
        path, reason = unreadable[0]
        more = f" (and {len(unreadable) - 1} more unreadable)" if len(unreadable) > 1 else ""
        return SwitchCheck(
            "unverified",
            f"unreadable fusion_result.json {path}{more}: {reason}; so fusion-dd could not verify "
            "that its switch file was applied",
        )
    checkable = [rule for rule in candidate_list if rule.section in covered]
    if not checkable:
        return SwitchCheck(
            "unverified",
            "fusion_result.json reports none of the candidates' sections, so fusion-dd "
            "could not verify that its switch file was applied",
        )
    all_on = bool(candidate_list) and enabled_set.issuperset(candidate_list)
    if all_on and not any(rule in fired for rule in checkable):
        return SwitchCheck(
            "ignored",
            "every candidate rule was switched on but none fired: either the switch "
            "file was not applied or these rules do not act in this network; "
            + WIRING_HELP,
        )
    return SwitchCheck("applied", "the switch file was applied")


def read_trial_results(trial_dir: str | Path) -> TrialResults:
    """Every ``fusion_result.json`` of a trial; one that cannot be read is kept with its reason.

    A training can leave anything (a truncated file, a FIFO, a shape no CANN
    release writes): that costs the proof for this trial, never the search, and
    the user is told which file and why.
    """
    results: list[FusionResult] = []
    unreadable: list[tuple[str, str]] = []
    for path in find_fusion_results(trial_dir):
        try:
            results.append(read_fusion_result(path))
        except UsageError as exc:
            reason = str(exc)
            prefix = f"{path}: "
            unreadable.append((str(path), reason[len(prefix):] if reason.startswith(prefix) else reason))
    return TrialResults(tuple(results), tuple(unreadable))
