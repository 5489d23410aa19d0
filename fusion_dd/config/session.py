"""Where a search trains, remembered from one session to the next.

A search is started with ``--devices 0,1`` or ``--scheduler tcp://...`` more often
than with those values in its config, and a resume that forgot them would train on
the config's single device, or on the coordinator's machine instead of the cluster:
right answers, at a fraction of the parallelism or on the wrong machines. So every
``session_started`` journals the session's context, and the next session of the
same search (``resume``, or ``search`` again) takes it from there unless its
command line says otherwise.

The context is ``{"devices": [[id, ...], ...] | None, "launcher": {"launcher":
name, ...options}}``: ``devices`` None means "every device the launcher offers"
(a dask cluster's device workers when ``train.devices`` is not written); the
launcher's options are what it needs to reach the same machines (dask: its
``scheduler``), so another launcher adds its own without a new record.

The budget is remembered the same way: ``--budget 40`` caps the whole search,
resumes included, so a resume without ``--budget`` keeps the cap the last session
had (journaled in its ``session_started``), not the config's default; a
``search.budget`` written into the config file since the search started wins.

A config file edited since the search started (``fusion-dd search -c`` with other
devices or another launcher) and disagreeing with the journal is refused in one
line naming both: which one the user means is theirs to say, on the command line.
Pure functions; the CLI reads the journal and prints the line.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from .settings import SearchConfig, TrainConfig, parse_devices
from ..core.errors import UsageError


@dataclass(frozen=True)
class Given:
    """Which parts of the context this session's command line set (they win over the journal)."""

    devices: bool = False  # --devices or --jobs
    launcher: bool = False  # --launcher or --scheduler
    budget: bool = False  # --budget


def context_of(train: TrainConfig) -> dict[str, Any]:
    """The context a session journals in ``session_started``."""
    launcher: dict[str, Any] = {"launcher": train.launcher}
    if train.launcher == "dask" and train.scheduler is not None:
        launcher["scheduler"] = train.scheduler
    return {
        # A cluster launcher without train.devices takes every device it offers; a local one its default.
        "devices": [list(device) for device in train.devices]
        if train.devices_given or train.launcher == "local"
        else None,
        "launcher": launcher,
    }


def journaled_context(records: Iterable[Mapping[str, Any]]) -> tuple[dict[str, Any] | None, bool]:
    """(the last session's context, whether the search finished), from the journal's records.

    A session journaled before contexts were has its ``devices``; they are its
    context when they are plain device ids (a cluster's slots, ``HOST:ID/WORKER``,
    name workers, not devices to hand to a local launcher).
    """
    context: dict[str, Any] | None = None
    finished = False
    for record in records:
        kind = record.get("type")
        if kind == "session_started":
            if isinstance(record.get("context"), dict):
                context = record["context"]
            else:
                devices = record.get("devices") or []
                plain = devices and all("/" not in str(part) for device in devices for part in device)
                context = {"devices": devices, "launcher": {"launcher": "local"}} if plain else None
        elif kind == "search_finished":
            finished = True
    return context, finished


def journaled_budget(records: Iterable[Mapping[str, Any]]) -> int | None:
    """The budget the last session ran with (None: no session, or one journaled without it)."""
    budget = None
    for record in records:
        if record.get("type") == "session_started":
            value = record.get("budget")
            budget = value if isinstance(value, int) and not isinstance(value, bool) else None
    return budget


def describe_devices(devices: Any) -> str:
    """Devices as ``--devices`` spells them: ``0,1`` (one training each) or ``0,1;2,3`` (groups)."""
    if devices is None:
        return "every device worker"
    groups = [",".join(str(part) for part in device) for device in devices]
    return (";" if any(len(device) > 1 for device in devices) else ",").join(groups)


def describe_launcher(launcher: Mapping[str, Any]) -> str:
    name = str(launcher.get("launcher", "local"))
    options = ", ".join(f"{key} {value}" for key, value in sorted(launcher.items()) if key != "launcher")
    return f"the {name} launcher" + (f" ({options})" if options else "")


def _written(document: Any, key: str) -> Any:
    train = document.get("train") if isinstance(document, Mapping) else None
    return train.get(key) if isinstance(train, Mapping) else None


def _edited(config: SearchConfig, started_document: Any, keys: tuple[str, ...]) -> bool:
    """Whether the config file says something else than the one the search started with, at these keys."""
    return any(_written(config.document, key) != _written(started_document, key) for key in keys)


def _written_budget(document: Any) -> Any:
    search = document.get("search") if isinstance(document, Mapping) else None
    return search.get("budget") if isinstance(search, Mapping) else None


def _remembered_budget(config: SearchConfig, budget: int | None, started_document: Any, given: Given) -> int | None:
    """The last session's budget where this one should keep it: not given, not written anew into the file."""
    if given.budget or budget is None or budget == config.search.budget:
        return None
    if _written_budget(config.document) != _written_budget(started_document):
        return None  # search.budget edited in the config file since the start: the file says it
    return budget


def remembered(
    config: SearchConfig,
    journaled: Mapping[str, Any] | None,
    started_document: Any,
    given: Given,
    budget: int | None = None,
) -> tuple[SearchConfig, str | None]:
    """The config this session trains with, and the one line that says what came from the journal.

    ``budget``: the last session's (:func:`journaled_budget`). Raises UsageError
    (one line naming both) when the config file was changed to other devices or
    another launcher than the journal's and the command line does not say which to use.
    """
    kept_budget = _remembered_budget(config, budget, started_document, given)
    if kept_budget is not None:
        config = replace(config, search=replace(config.search, budget=kept_budget))
    if journaled is None:
        return config, None
    train = config.train
    taken: list[str] = []
    overrides: list[str] = []
    current = context_of(train)
    launcher = dict(journaled.get("launcher") or {"launcher": "local"})
    if not given.launcher and launcher != current["launcher"]:
        if _edited(config, started_document, ("launcher", "scheduler")):
            raise UsageError(
                f"{config.source}: train.launcher says {describe_launcher(current['launcher'])}, but this search "
                f"ran on {describe_launcher(launcher)} (its journal); say which on the command line "
                f"(--launcher, --scheduler)"
            )
        name = str(launcher.get("launcher", "local"))
        train = replace(train, launcher=name, scheduler=launcher.get("scheduler") if name == "dask" else train.scheduler)
    if not given.launcher:
        if train.launcher != "local":
            taken.append(f"with {describe_launcher(launcher)}")
            overrides.append("--launcher" if train.launcher != "dask" else "--scheduler or --launcher local")
    devices = journaled.get("devices")
    if not given.devices:
        if devices != current["devices"]:
            if _edited(config, started_document, ("devices",)):
                raise UsageError(
                    f"{config.source}: train.devices says {describe_devices(current['devices'])}, but this search "
                    f"ran on devices {describe_devices(devices)} (its journal); say which on the command line "
                    "(--devices or --jobs)"
                )
            if devices is None:
                train = replace(train, devices_given=False)
            else:
                train = replace(train, devices=parse_devices(devices, "the journal's devices"), devices_given=True)
        taken.insert(0, f"on devices {describe_devices(devices)}" if devices is not None else "on every device worker")
        overrides.insert(0, "--devices")
    if kept_budget is not None:
        taken.append(f"with a budget of {kept_budget} trainings")
        overrides.append("--budget")
    if not taken:
        return replace(config, train=train), None
    line = f"resuming {' '.join(taken)} (from the journal); {', '.join(overrides)} override{'s' if len(overrides) == 1 else ''}"
    return replace(config, train=train), line


def resume_flags(train: TrainConfig, document: Any, budget: int | None = None) -> list[str]:
    """What ``fusion-dd resume`` needs besides ``--state-dir`` to continue where this session trains
    (``budget``: this session's, said whenever given)."""
    return hint_flags(context_of(train), document, budget)


def hint_flags(context: Mapping[str, Any] | None, document: Any, budget: int | None = None) -> list[str]:
    """The flags of a "continue with" hint for a session of this context, against the config it started with.

    The journal remembers the context and the budget too; the hint says them
    anyway, so that the line a user copies shows where the search goes on and
    how far. Where the search trains is said only where the config document
    says otherwise; the budget, when given, always: a later session may set
    another cap (``resume --budget 5``), and a hint printed before it must still
    go on as the session that printed it would have.
    """
    flags: list[str] = ["--budget", str(budget)] if budget is not None else []
    known = isinstance(document, Mapping)  # without the config it started with, nothing to compare to
    if context is None:
        return flags
    launcher = context.get("launcher") or {}
    name = str(launcher.get("launcher", "local"))
    if name == "dask" and launcher.get("scheduler") is not None:
        if launcher.get("scheduler") != _written(document, "scheduler") or _written(document, "launcher") != "dask":
            flags += ["--scheduler", str(launcher["scheduler"])]
    elif name != (_written(document, "launcher") or "local"):
        flags += ["--launcher", name]
    devices = context.get("devices")
    written = _written(document, "devices")
    try:
        own = [list(device) for device in parse_devices(written)] if written is not None else [["0"]]
    except UsageError:
        own = None
    if known and devices is not None and [list(device) for device in devices] != own:
        flags += ["--devices", describe_devices(devices)]
    return flags


def flags_text(flags: list[str]) -> str:
    return "".join(f" {shlex.quote(flag)}" for flag in flags)
