"""What every compiler backend shares: the interface, the rendering of a configuration, the fix file's name.

Apart from the package's ``backend_for`` so that each backend imports it without importing the
registry of all of them (see the package docstring for what a backend does).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ..core.hooks import ArtifactHook
from ..core.rules import Rule
from ..search.choose_off import Chooser


#: The values of ``rules.compiler``.
COMPILERS = ("cann", "onnxruntime", "xla")

#: The file the fix of a search is saved as, in the state directory, per compiler: a name
#: that says what it holds (CANN reads ``fusion_switch.cfg`` itself; the others' lists are
#: what the training hands to the compiler, see the exported variable beside it).
FIX_NAMES = {
    "cann": "fusion_switch.cfg",
    "onnxruntime": "ort_disabled_optimizers.txt",
    "xla": "xla_disabled_passes.txt",
}


def fix_name_of(compiler: str | None) -> str:
    """The fix file's name for ``rules.compiler`` (CANN's when absent or unknown)."""
    return FIX_NAMES.get(compiler or "cann", FIX_NAMES["cann"])


@dataclass(frozen=True)
class Rendered:
    """One configuration as the compiler reads it.

    ``switch_text`` is written to the trial's switch file (``{switch_file}``);
    ``env_defaults`` are set in the training's environment unless the user set
    them (values may hold placeholders such as ``{trial_dir}``); ``env`` is set
    whatever the user set (it already merges the user's value where one
    variable carries both, CANN's ``AUTOFUSE_FLAGS``). For the fix, ``env`` is
    what the user must export beside the switch file.
    """

    switch_text: str
    env_defaults: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)


class CompilerBackend(Protocol):
    """What the engine needs from a compiler; see the module docstring."""

    name: str

    def render(self, candidates: Sequence[Rule], enabled: Iterable[Rule]) -> Rendered: ...

    def realize(self, candidates: Sequence[Rule], enabled: Iterable[Rule]) -> frozenset[Rule]:
        """The configuration the compiler really trains when ``enabled`` is asked for
        (the search's cache and journal key on it)."""
        ...

    def hooks(self, candidates: Sequence[Rule]) -> Sequence[ArtifactHook]: ...

    def chooser(self, effects: Mapping[Rule, int]) -> Chooser: ...


def fix_env_of(backend: CompilerBackend, candidates: Sequence[Rule], enabled: Iterable[Rule]) -> dict[str, str]:
    """What the user exports beside the fix: the backend's ``fix_env`` when it has one
    (XLA leaves out the trials' dump flags), else the environment of its rendering."""
    fix_env = getattr(backend, "fix_env", None)
    if fix_env is not None:
        return dict(fix_env(candidates, enabled))
    return dict(backend.render(candidates, enabled).env)


__all__ = ["COMPILERS", "FIX_NAMES", "CompilerBackend", "Rendered", "fix_env_of", "fix_name_of"]
