"""Which launchers ``train.launcher`` may name: the built-in ones and those other packages register.

A third-party launcher registers a factory under the entry point group
``fusion_dd.launchers`` in its own package's metadata::

    [project.entry-points."fusion_dd.launchers"]
    mycluster = "my_package.launcher:launcher_for"

The factory is called with the search's configuration (``SearchConfig``) and
returns an object with the launcher calls of :class:`fusion_dd.runner.launcher.Launcher`
(``start``, ``adopt``, ``ever_started``; optionally ``slots``, ``close``,
``run_started``, ``run_ended``). Built-in names cannot be replaced, so that a
stray package never changes where an existing configuration trains.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import metadata
from typing import Any

from ..core.errors import UsageError

ENTRY_POINT_GROUP = "fusion_dd.launchers"
BUILT_IN = ("local", "dask", "slurm")


def _entry_points() -> dict[str, Any]:
    try:
        found = metadata.entry_points(group=ENTRY_POINT_GROUP)
    except Exception:  # noqa: BLE001 - broken metadata of another package must not stop a search
        return {}
    return {entry.name: entry for entry in found if entry.name not in BUILT_IN}


def launcher_names() -> tuple[str, ...]:
    """Every name ``train.launcher`` accepts, the built-in ones first."""
    return BUILT_IN + tuple(sorted(_entry_points()))


def _built_in(name: str) -> Callable[[Any], Any]:
    if name == "local":
        from .launcher import LocalLauncher

        return lambda config: LocalLauncher()
    if name == "dask":
        from .dask_launcher import dask_launcher_for

        return dask_launcher_for
    from .slurm_launcher import slurm_launcher_for

    return slurm_launcher_for


def launcher_for(config: Any) -> Any:
    """The launcher ``train.launcher`` names, built for this search's configuration: this
    machine, a dask cluster, Slurm jobs (optional extras), or one another package registers."""
    name = getattr(config.train, "launcher", "local")
    if name in BUILT_IN:
        return _built_in(name)(config)
    entry = _entry_points().get(name)
    if entry is None:
        raise UsageError(f"train.launcher: no launcher named {name!r} (known: {', '.join(launcher_names())})")
    try:
        factory = entry.load()
    except Exception as exc:  # noqa: BLE001 - a third party's import error, said in one line
        raise UsageError(
            f"train.launcher {name}: its entry point {entry.value} ({ENTRY_POINT_GROUP}) cannot be loaded: "
            f"{type(exc).__name__}: {exc}"
        ) from None
    return factory(config)


__all__ = ["BUILT_IN", "ENTRY_POINT_GROUP", "launcher_names", "launcher_for"]
