"""The XLA backend (JAX, TensorFlow, PyTorch/XLA): ``XLA_FLAGS``, fired passes from the pass dumps.

XLA reads its debug options from the environment variable ``XLA_FLAGS`` when
it starts, whatever framework sits on top, so a training needs no change at
all. A configuration becomes:

* ``--xla_disable_hlo_passes=a,b`` for the HLO passes switched off (comma, no
  spaces), merged with the passes the user's own ``XLA_FLAGS`` disables;
* ``--<flag>=false`` for each boolean-flag candidate switched off (a candidate
  named like a flag, ``xla_allow_excess_precision``); a flag switched on is left
  at XLA's default;
* for trials only: ``--xla_dump_to={trial_dir}/xla --xla_dump_hlo_pass_re=.*``,
  a dump after every pass that changed a module, named
  ``module_<id>.<module>.<seq>.<pipeline>.after_<pass>.before_<next>.txt``, and
  ``module_<id>.<module>.debug_options``: the non-default options XLA compiled
  with, the proof that the flags arrived.

Every other item of the user's ``XLA_FLAGS`` is kept. XLA ignores an unknown
pass name silently; names are checked against the passes of the dumps given in
``rules.from`` or else the list shipped with fusion-dd
(``data/xla_passes.txt``, recorded on XLA:CPU and incomplete by nature: an
unknown name is a warning by default).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..core.hooks import TrialFiles
from ..core.rules import Rule, Section
from .base import FIX_NAMES, Rendered
from .common import PlainListBackend, shipped_names, shown_names, switches_applied, switches_ignored, switches_unverified

FLAGS_ENV = "XLA_FLAGS"
DISABLE = "--xla_disable_hlo_passes"
DUMP_DIR = "xla"
DUMP_FLAGS = ("--xla_dump_to={trial_dir}/" + DUMP_DIR, "--xla_dump_hlo_pass_re=.*")
_OURS_IN_TRIALS = ("--xla_dump_to", "--xla_dump_hlo_pass_re")
NAMES_FILE = "xla_passes.txt"
#: A candidate with this shape is a boolean debug flag, not a pass.
FLAG_NAME = re.compile(r"xla_[a-z0-9_]+")
_PASS_FILE = re.compile(
    r"^module_\d+\.(?P<module>.+)\.(?P<seq>\d{4})\.(?P<pipeline>[^.]+)\.after_(?P<pass>[^.]+)\.before_(?P<next>[^.]+)\.txt$"
)
_OPTION = re.compile(r'^\s*(xla_[A-Za-z0-9_]+)\s*:\s*"?([^"]*)"?\s*$')
_NOT_PASSES = frozenset({"pipeline-start", "pipeline-end"})

HINT = (
    "fusion-dd hands XLA its switches in XLA_FLAGS: a training (or a launcher script) that sets XLA_FLAGS itself "
    "must append to it (os.environ['XLA_FLAGS'] += ' ...'), never replace it; see docs/compilers.md"
)


def known_passes() -> frozenset[str]:
    """XLA pass names shipped with fusion-dd (from dumps of XLA:CPU)."""
    return shipped_names(NAMES_FILE)


#: Passes XLA runs to make a program executable at all, not to optimize it: they
#: change the module in every all-off baseline (XLA:CPU, jaxlib 0.10.2: layout
#: assignment, shape canonicalization, copy insertion, measured on
#: examples/xla), and switching them off is no fix a user could keep (wrong
#: layouts or aliasing buffers at worst). Closure and ``rules.from: all_on``
#: name them and never make them candidates; listed by hand they stay candidates.
#: Everything else that fires in the all-off baseline is an optimization closure
#: adds (on examples/xla: dot-library-rewriter, then fusion, then fusion-wrapper).
STRUCTURAL = frozenset(
    {
        "layout-assignment", "copy-insertion", "shape-canonicalizer", "sub-byte-size-setter",
        "flatten-call-graph", "hlo-memory-scheduler", "literal-canonicalizer", "sharding-removal",
        "strip-memory-placement-annotations",
    }
)  # fmt: skip


def is_structural(name: str) -> bool:
    """A pass XLA needs to run the program (see ``STRUCTURAL``), never a candidate closure adds."""
    return name in STRUCTURAL


def is_flag(name: str) -> bool:
    return FLAG_NAME.fullmatch(name) is not None


def group_of(name: str) -> Section:
    """A candidate named like an XLA flag is a flag; anything else a pass."""
    return Section.XLA_FLAG if is_flag(name) else Section.XLA_PASS


def _key(token: str) -> str:
    return token.split("=", 1)[0]


def merge_flags(
    user_flags: str | None,
    candidates: Sequence[Rule],
    enabled: Iterable[Rule],
    *,
    dumps: bool,
) -> str:
    """The ``XLA_FLAGS`` value of one configuration (pure; see the module docstring)."""
    enabled_set = set(enabled)
    passes = {rule.name for rule in candidates if rule.section is Section.XLA_PASS}
    flags = {rule.name for rule in candidates if rule.section is Section.XLA_FLAG}
    off_passes = [rule.name for rule in candidates if rule.section is Section.XLA_PASS and rule not in enabled_set]
    off_flags = [rule.name for rule in candidates if rule.section is Section.XLA_FLAG and rule not in enabled_set]
    kept: list[str] = []
    user_disabled: list[str] = []
    for token in (user_flags or "").split():
        key = _key(token)
        if key == DISABLE:
            user_disabled += [name for name in token.partition("=")[2].split(",") if name and name not in passes]
        elif key.startswith("--") and key[2:] in flags:
            continue  # a candidate flag: the configuration decides
        elif dumps and key in _OURS_IN_TRIALS:
            continue  # a trial dumps into its own directory
        else:
            kept.append(token)
    disabled = list(dict.fromkeys(user_disabled + off_passes))
    if disabled:
        kept.append(f"{DISABLE}={','.join(disabled)}")
    kept += [f"--{name}=false" for name in off_flags]
    if dumps:
        kept += list(DUMP_FLAGS)
    return " ".join(kept)


def parse_dump(names: Iterable[str]) -> dict[str, int]:
    """How many times each pass changed a module, from the file names of a pass dump."""
    fired: dict[str, int] = {}
    for name in names:
        match = _PASS_FILE.match(name)
        if match is None or match.group("pass") in _NOT_PASSES:
            continue
        fired[match.group("pass")] = fired.get(match.group("pass"), 0) + 1
    return fired


def dumped_pass_names(names: Iterable[str]) -> set[str]:
    """Every pass a dump names (those that changed a module and the ones that ran after them).

    Pipelines count only where they are a pass of another pipeline (``simplification``):
    a top-level pipeline (``HLO_passes_through_layout_assignment``) cannot be disabled.
    """
    found: set[str] = set()
    for name in names:
        match = _PASS_FILE.match(name)
        if match is not None:
            found |= {match.group("pass"), match.group("next")}
    return found - _NOT_PASSES


def parse_debug_options(text: str) -> tuple[set[str], dict[str, str]]:
    """(passes XLA was told to disable, other non-default options) from a ``.debug_options`` dump."""
    disabled: set[str] = set()
    options: dict[str, str] = {}
    for line in text.splitlines():
        match = _OPTION.match(line)
        if match is None:
            continue
        key, value = match.group(1), match.group(2).strip()
        if key == "xla_disable_hlo_passes":
            disabled |= {name for name in value.split(",") if name}
        else:
            options[key] = value
    return disabled, options


def check(
    candidates: Sequence[Rule],
    enabled: Iterable[str],
    file_names: Sequence[str] | None,
    debug_options: Sequence[str],
) -> dict[str, Any]:
    """The switch check of one XLA trial from its dump (pure): file names and ``debug_options`` texts."""
    enabled_set = set(enabled)
    if file_names is None or not debug_options:
        return switches_unverified(
            f"the training left no XLA dump in its trial directory ({DUMP_DIR}/), so fusion-dd could "
            f"not verify that XLA_FLAGS reached XLA; {HINT}",
        )
    fired = parse_dump(file_names)
    disabled: set[str] = set()
    options: dict[str, str] = {}
    for text in debug_options:
        more_disabled, more_options = parse_debug_options(text)
        disabled |= more_disabled
        options.update(more_options)
    off = [rule for rule in candidates if rule.name not in enabled_set]
    arrived = [
        rule
        for rule in off
        if (rule.name in disabled if rule.section is Section.XLA_PASS else options.get(rule.name) == "false")
    ]
    names = {rule.name for rule in candidates}
    effects = {name: count for name, count in fired.items() if name in names}
    fired_off = [rule.name for rule in off if rule.section is Section.XLA_PASS and rule.name in fired]
    if off and not arrived:
        shown = shown_names([rule.name for rule in off])
        return switches_ignored(
            f"XLA compiled without the switches fusion-dd set ({shown} are not in its debug_options "
            f"dump): XLA_FLAGS did not reach XLA; {HINT}",
            fired_off,
            effects,
        )
    return switches_applied(fired_off, effects)


def read_dump(directory: Path) -> tuple[list[str] | None, list[str]]:
    """(file names, ``debug_options`` texts) of a trial's dump directory; None when there is none."""
    if not directory.is_dir():
        return None, []
    names: list[str] = []
    options: list[str] = []
    for path in sorted(directory.iterdir()):
        names.append(path.name)
        if path.name.endswith(".debug_options") and path.is_file():
            try:
                options.append(path.read_text(encoding="utf-8", errors="replace")[:1_000_000])
            except OSError:
                continue
    return names, options


class XlaDumpHook:
    """A trial's XLA dump: did XLA_FLAGS arrive, which passes changed a module how often."""

    name = "xla_dump"

    def __init__(self, candidates: Sequence[Rule]) -> None:
        self.candidates = list(candidates)

    def collect(self, files: TrialFiles) -> dict[str, Any]:
        names, options = read_dump(files.trial_dir / DUMP_DIR)
        facts = check(self.candidates, files.enabled, names, options)
        fired = parse_dump(names or [])
        if fired:
            facts["fired"] = sorted(fired)  # every pass that changed a module, candidate or not
        dumped = dumped_pass_names(names or [])
        confirmed = [
            rule.name for rule in self.candidates
            if rule.section is Section.XLA_PASS and rule.name in dumped and rule.name not in known_passes()
        ]  # fmt: skip
        if confirmed:
            facts["known_to_compiler"] = confirmed  # not in fusion-dd's list, but this XLA runs it
        return facts


class XlaBackend(PlainListBackend):
    """XLA's HLO passes and boolean debug flags."""

    name = "xla"
    fix_name = FIX_NAMES["xla"]  # the fix's list of names switched off, in the state directory

    def __init__(self, user_env: Mapping[str, str] | None = None) -> None:
        # The XLA_FLAGS the training would get without us: the config's, else ours.
        self.user_flags = (user_env or {}).get(FLAGS_ENV, os.environ.get(FLAGS_ENV))

    def render(self, candidates: Sequence[Rule], enabled: Iterable[Rule]) -> Rendered:
        enabled = list(enabled)
        flags = merge_flags(self.user_flags, candidates, enabled, dumps=True)
        off = [rule.name for rule in candidates if rule not in set(enabled)]
        text = (
            "# XLA passes and flags switched off by fusion-dd, one a line; the training gets them in\n"
            f"# {FLAGS_ENV} (passes: {DISABLE}=..., flags: --<flag>=false)\n" + "".join(f"{name}\n" for name in off)
        )
        return Rendered(switch_text=text, env={FLAGS_ENV: flags})

    def hooks(self, candidates: Sequence[Rule]) -> Sequence[XlaDumpHook]:
        return [XlaDumpHook(candidates)]

    def closure_group(self, name: str) -> Section | None:
        """Closure and ``rules.from: all_on``: a pass that changed a module is a candidate, unless structural."""
        return None if is_structural(name) else group_of(name)

    candidate_group = closure_group

    def structural(self, name: str) -> bool:
        return is_structural(name)

    def fix_env(self, candidates: Sequence[Rule], enabled: Iterable[Rule]) -> dict[str, str]:
        """What the user exports for the fix: the same XLA_FLAGS without the trials' dump flags."""
        return {FLAGS_ENV: merge_flags(self.user_flags, candidates, list(enabled), dumps=False)}
