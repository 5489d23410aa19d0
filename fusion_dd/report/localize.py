"""Localization after a search: which op, in which layer, each culprit set broke.

Once the culprit sets are known, fusion-dd trains with tensor dumps (the
``localize:`` section of the config says how a training dumps) the fix
configuration and, for each culprit set, the fix with that set switched back
on. Both runs differ only in that set's rules, so the first op whose outputs
differ (``fusion_dd.compare``) is where the culprit's fused kernel goes wrong;
its rules are intersected with the culprit set (an op carries the whole
``pass_name`` chain of the passes that made it) and its original layers are
what the report names.

Bookkeeping, and why:

* The dumped trainings are journaled trials with role ``localize``. A dumped
  training of a configuration is not the search's training of it (other
  arguments, other environment, possibly cut short after the dumped step), so
  they live in their own cache (``SearchState.localize_cache``) under the same
  (configuration, repeat 0) key: they never answer a search question and a
  search training never stands in for them. Repeat 0, like the search's first
  training, so a training seeded by ``FUSION_DD_REPEAT`` sees the same data in
  both runs of a comparison.
* They count toward the budget. A budget that runs out here does not fail the
  search: it finishes with its culprits and says localization is incomplete;
  ``fusion-dd localize --budget N`` goes on.
* Each comparison is computed once, when both of its trainings have finished,
  and journaled as a ``localized`` record (the localization, or why there is
  none). Reports are built from those records; resume never compares again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..config.settings import LocalizeConfig
from ..core.errors import UsageError
from ..store.state import LOCALIZE_ROLE, ConfigKey, SearchState, TrialState
from ..runner.trial import DUMP_PLACEHOLDERS, TrialSpec, substitute
from ..store.records import RecordType
from .trials import search_cost, switch_counts, trial_entry

#: How many of the worst ops ``culprits[i].localization.top`` lists.
TOP_OPS = 5
#: Where each comparison's compare.json/compare.csv go, below the state directory.
LOCALIZE_DIR = "localize"


@dataclasses.dataclass(frozen=True)
class Target:
    """One comparison: the fix with ``culprit`` switched back on, against the fix."""

    culprit: tuple[str, ...]  # sorted rule names: the key of its ``localized`` record
    on: frozenset[str]
    off: frozenset[str]

    @property
    def keys(self) -> tuple[ConfigKey, ConfigKey]:
        return (self.on, 0), (self.off, 0)


def plan(all_rules: Iterable[str], culprits: Sequence[Iterable[str]], switched_off: Iterable[str]) -> list[Target]:
    """The comparisons for these culprit sets: each against the fix (all rules but ``switched_off``)."""
    fix = frozenset(all_rules) - frozenset(switched_off)
    targets: list[Target] = []
    for culprit in culprits:
        names = frozenset(culprit)
        targets.append(Target(tuple(sorted(names)), fix | names, fix))
    return targets


def still_to_train(targets: Sequence[Target], state: SearchState) -> tuple[list[Target], list[ConfigKey]]:
    """The targets not localized yet, and the dumped trainings they still need, the fix first
    (every comparison needs it); each configuration once."""
    pending = [target for target in targets if target.culprit not in state.localized]
    cache = state.localize_cache()
    needed: list[ConfigKey] = []
    for target in pending:
        for key in reversed(target.keys):
            if key not in cache and key not in needed:
                needed.append(key)
    return pending, needed


def dumping_spec(spec: TrialSpec, localize: LocalizeConfig) -> TrialSpec:
    """The trial spec of a localization training: the dumping command and environment."""
    command = tuple(localize.command or spec.command) + tuple(localize.args)
    return dataclasses.replace(spec, command=command, env={**spec.env, **localize.env}, dumps=True)


def culprits_of(report: Mapping[str, Any]) -> tuple[list[tuple[str, ...]], list[str]]:
    """The culprit sets and switched-off rules of a finished search's report."""
    culprits = [tuple(sorted(rule["name"] for rule in entry["rules"])) for entry in report.get("culprits") or []]
    return culprits, list(report.get("switched_off") or [])


class Localizer:
    """Trains the dumped runs and journals one ``localized`` record per culprit set.

    It knows the engine only through these callables, so that the engine keeps
    one way of launching and journaling trials:

    * ``launch(keys)`` trains these keys with role ``localize`` (results land in the journal);
    * ``append(record)`` journals a record;
    * ``remaining_budget()``.
    """

    def __init__(
        self,
        *,
        config: LocalizeConfig,
        state: Callable[[], SearchState],
        state_dir: Path,
        launch: Callable[[Sequence[ConfigKey]], None],
        append: Callable[[dict[str, Any]], None],
        remaining_budget: Callable[[], int],
        message: Callable[[str], None],
    ) -> None:
        self.config = config
        self._state = state
        self.state_dir = state_dir
        self._launch = launch
        self._append = append
        self._remaining = remaining_budget
        self._message = message

    def run(self, targets: Sequence[Target]) -> bool:
        """Localize every target not yet journaled; True when all are done, False when the budget ran out."""
        pending, needed = still_to_train(targets, self._state())
        if not pending:
            return True
        affordable = needed[: max(0, self._remaining())]
        if needed:
            self._message(
                f"localizing {len(pending)} culprit set(s): {len(needed)} training(s) with tensor dumps"
                + (f", {len(affordable)} within the budget" if len(affordable) < len(needed) else "")
            )
        if affordable:
            self._launch(affordable)
        cache = self._state().localize_cache()
        complete = True
        for target in pending:
            on, off = (cache.get(key) for key in target.keys)
            if on is None or off is None:
                complete = False  # not trained (budget, or cancelled): the next session goes on
                continue
            self._append(self._compare(target, on, off))
        return complete

    def _compare(self, target: Target, on: TrialState, off: TrialState) -> dict[str, Any]:
        """Compare the two dumps; the ``localized`` record (a reason instead when it could not be done)."""
        record: dict[str, Any] = {
            "type": RecordType.LOCALIZED,
            "culprit": list(target.culprit),
            "on_trial": on.trial_id,
            "off_trial": off.trial_id,
            "localization": None,
            "reason": None,
        }
        try:
            comparison = self._comparison(on, off)
        except UsageError as exc:
            record["reason"] = f"{exc}{_trial_note(on, off)}"
            return record
        except Exception as exc:  # a comparison must never lose the search's answer
            record["reason"] = f"the comparison failed ({type(exc).__name__}: {exc})"
            return record
        record["compared"] = len(comparison.pairs)
        record["problems"] = len(comparison.problems)
        out = self.state_dir / LOCALIZE_DIR / on.trial_id
        try:
            from ..compare.render import write_reports

            write_reports(comparison, out)
            record["compare"] = str(out.relative_to(self.state_dir))
        except OSError:
            pass  # the journaled localization stands without the files
        found = comparison.localization(TOP_OPS)
        if found is None:
            record["reason"] = (
                f"no op differs beyond the thresholds between the dumps of trials #{on.trial_id} and "
                f"#{off.trial_id} ({len(comparison.pairs)} tensors compared); dump the step where the "
                "culprit's training first goes wrong (localize.step and the training's dump options)"
            )
            return record
        # ``rules`` of the op is the whole pass_name chain that made it: keep the culprit's. An op
        # without rules (no graph dump, or an op fusion did not touch) diverges because of the
        # only difference between the two runs: the culprit set.
        op_rules = list(found["rules"])
        found["op_rules"] = op_rules
        found["rules"] = [name for name in op_rules if name in target.culprit] or (
            op_rules if op_rules else list(target.culprit)
        )
        for pair in found.get("top") or []:  # the report names files inside the state directory by their place in it
            for key in ("on_file", "off_file"):
                pair[key] = _inside(self.state_dir, pair.get(key))
        record["localization"] = found
        return record

    def compare(self, on: TrialState, off: TrialState) -> Any:
        """The comparison of two dumped trials (``UsageError`` when a dump is missing or unusable)."""
        return self._comparison(on, off)

    def _comparison(self, on: TrialState, off: TrialState) -> Any:
        from ..compare import compare_dumps

        dirs = []
        for trial in (on, off):
            dump = self.state_dir / trial.trial_dir / DUMP_PLACEHOLDERS["dump_dir"]
            if not dump.is_dir() or not any(dump.iterdir()):
                raise UsageError(
                    f"trial #{trial.trial_id} wrote no tensor dump into {trial.trial_dir}/"
                    f"{DUMP_PLACEHOLDERS['dump_dir']} (check that localize.env/args/command make the "
                    "training dump into {dump_dir})"
                )
            dirs.append(dump)
        graphs = [self._graphs(trial, dump) for trial, dump in zip((on, off), dirs)]
        # jobs: compare_dumps decides (one process for small dumps, workers for big ones).
        return compare_dumps(dirs[0], dirs[1], graphs[0], graphs[1], self.config.step)

    def _graphs(self, trial: TrialState, dump: Path) -> Any:
        from ..backends.cann.artifacts import graph_paths
        from ..backends.cann.artifacts.discover import graph_dumps_in
        from ..compare import load_graph_dumps

        trial_dir = self.state_dir / trial.trial_dir
        if self.config.graphs is None:
            found = graph_dumps_in(dump)
            return load_graph_dumps(found) if found else None
        values = {"trial_dir": str(trial_dir), "dump_dir": str(dump), "trial_id": trial.trial_id}
        patterns = [substitute(pattern, values) for pattern in self.config.graphs]
        patterns = [pattern if Path(pattern).is_absolute() else str(trial_dir / pattern) for pattern in patterns]
        try:
            return load_graph_dumps(graph_paths(patterns))
        except UsageError as exc:
            raise UsageError(f"localize.graphs of trial #{trial.trial_id}: {exc}") from None


def _trial_note(on: TrialState, off: TrialState) -> str:
    """What the dumped trainings themselves said, when they did not end well."""
    notes = []
    for trial in (on, off):
        finished = trial.finished or {}
        if finished.get("kind") not in ("metric", "no_metric", None):
            notes.append(f"trial #{trial.trial_id}: {finished.get('kind')} ({finished.get('reason', '')})")
    return f"; {'; '.join(notes)}" if notes else ""


def attach(
    report: dict[str, Any], state: SearchState, configured: bool, state_dir: str | None = None
) -> dict[str, Any]:
    """Put the journaled localizations into a report (``culprits[i].localization``, ``localization``).

    Built from ``localized`` records only: a report rebuilt later says the same.
    A culprit set without one gets ``{"reason": ...}``: not configured, or not
    finished (the budget ran out, the search was interrupted).
    """
    culprits = report.get("culprits") or []
    if not culprits or report.get("status") != "found" or (not configured and not state.localized):
        return report  # localization follows a found answer only
    done = failed = 0
    for entry in culprits:
        key = tuple(sorted(rule["name"] for rule in entry["rules"]))
        record = state.localized.get(key)
        if record is None:
            entry["localization"] = {
                "reason": "not localized yet: the budget ran out or the session stopped first (see "
                "localization.continue_with)"
                if configured
                else "not localized: the config has no localize: section"
            }
            continue
        if record.get("localization") is not None:
            entry["localization"] = {**record["localization"], "trials": [record["on_trial"], record["off_trial"]]}
            done += 1
        else:
            entry["localization"] = {"reason": record.get("reason"), "trials": [record["on_trial"], record["off_trial"]]}
            failed += 1
        if record.get("compare"):
            entry["localization"]["compare"] = record["compare"]
    missing = len(culprits) - done - failed
    # A report journaled when the search finished predates its localization's trainings.
    report["trainings"] = state.launched
    if "switch_check" in report:
        report["switch_check"] = switch_counts(state)
    if "cost" in report:
        report["cost"] = {**report["cost"], **search_cost(state)}
    listed = {entry.get("trial_id") for entry in report.get("trials") or []}
    if "trials" in report:
        report["trials"] = list(report["trials"]) + [
            trial_entry(trial, None, False) for trial in state.trials.values() if trial.trial_id not in listed
        ]
    status = "complete" if not missing and not failed else ("incomplete" if missing else "failed")
    report["localization"] = {
        "status": status,
        "localized": done,
        "failed": failed,
        "missing": missing,
        "trainings": sum(1 for trial in state.trials.values() if trial.role == LOCALIZE_ROLE and trial.costs_budget),
    }
    if missing and configured:
        culprit_sets, switched_off = culprits_of(report)
        names = [rule["name"] for rule in report.get("candidates") or []]
        cache = state.localize_cache()
        needed = {
            key
            for target in plan(names, culprit_sets, switched_off)
            if target.culprit not in state.localized
            for key in target.keys
            if key not in cache
        }
        budget = max(int(report.get("budget") or 0), state.launched) + len(needed)
        where = f" --state-dir {state_dir}" if state_dir else ""
        report["localization"]["continue_with"] = f"fusion-dd localize{where} --budget {budget}"
    return report


def culprit_sentence(culprit: Mapping[str, Any]) -> str | None:
    """Where one culprit set broke the network, in words: the op, its type, its layers, the numbers.

    ``LayerNormFusionPass broke ln_a/add_beta (LayerNorm; layers ...; cosine 0.61, max abs 1184)``.
    The one text of a localization: the terminal summary and the HTML report both
    show it, so a reader sees the same claim in either. None when the culprit has
    no localization entry (the config has none and nothing was journaled).
    """
    found = culprit.get("localization")
    if not isinstance(found, Mapping):
        return None
    if found.get("op") is None:
        return f"not localized: {found.get('reason')}"
    names = {rule["name"] for rule in culprit.get("rules") or []}
    ours = [rule for rule in found.get("rules") or [] if rule in names]
    layers = list(found.get("layers") or [])
    shown = ", ".join(layers[:6]) + (f" (+{len(layers) - 6} more)" if len(layers) > 6 else "")
    metrics = found.get("metrics") or {}
    numbers = f"cosine {_short(metrics.get('cosine'))}, max abs {_short(metrics.get('max_abs'))}"
    where = f"{found['op']} ({found.get('op_type')}; layers {shown or 'none named'}; {numbers})"
    if found.get("seen_at") and found["seen_at"] != found["op"]:
        where += f", seen at {found['seen_at']}"
    if ours:
        return f"{' + '.join(ours)} broke {where}"
    made_by = " + ".join(found.get("op_rules") or found.get("rules") or []) or "no fusion rule"
    return f"first divergence at {where}, made by {made_by}, not by this set's rules"


def incomplete_note(report: Mapping[str, Any]) -> str | None:
    """What to run when some culprit sets are not localized yet (budget or interruption), else None."""
    summary = report.get("localization") or {}
    if summary.get("status") != "incomplete":
        return None
    return (
        "localization incomplete (budget or interruption); continue with: "
        f"{summary.get('continue_with') or 'fusion-dd localize --budget N'}"
    )


def summary_lines(report: Mapping[str, Any]) -> list[str]:
    """``(1) LayerNormFusionPass broke ln_a/add_beta (layers ...; cosine 0.61, max abs 1184)``, per culprit."""
    lines: list[str] = []
    for index, culprit in enumerate(report.get("culprits") or [], start=1):
        sentence = culprit_sentence(culprit)
        if sentence is not None:
            lines.append(f"  ({index}) {sentence}")
    note = incomplete_note(report)
    if note is not None:
        lines.append(f"  {note}")
    return lines


def _short(value: Any) -> str:
    if isinstance(value, (int, float)):
        return f"{value:.4g}"
    return str(value)


def _inside(state_dir: Path, name: Any) -> Any:
    """``name`` relative to the state directory when it lies inside it (a moved state directory keeps
    its report right), else as it is."""
    if not isinstance(name, str):
        return name
    try:
        return str(Path(name).relative_to(state_dir))
    except ValueError:
        return name


def layer_scopes(localization: Mapping[str, Any]) -> list[str]:
    """The top-level name scopes of a localization's layers (``ln_a/mean`` -> ``ln_a``)."""
    return list(dict.fromkeys(str(layer).split("/")[0] for layer in localization.get("layers") or []))
