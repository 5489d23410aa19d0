"""The ONNX Runtime backend: ``disabled_optimizers`` through one environment variable, fired rules from its log.

ONNX Runtime switches graph transformers and rewrite rules off by name, per
session: ``InferenceSession(path, so, disabled_optimizers=[...])`` or the
session option ``optimization.disable_specified_optimizers`` (names joined by
``;``). A trial gets the names of the candidates switched off in
``FUSION_DD_DISABLED_OPTIMIZERS`` (joined by ``;``, set even when empty so an
inherited value never leaks in); the training passes
``**fusion_dd.integrations.ort_session_kwargs()`` to its sessions and needs
nothing else (``fusion_dd.integrations.ort``).

The proof: with its log at info level ONNX Runtime prints one line per graph
transformer it runs, ``GraphTransformer <name> modified: 0|1``; a transformer it
was told to skip is not run, so it is absent. The helper switches that log on
inside fusion-dd; the lines land in the trial's ``output.log``. ONNX Runtime
ignores an unknown name silently, so names are checked before launch against
the list shipped with fusion-dd (``data/onnxruntime_optimizers.txt``) and, when
one is given, against a log of the user's own run.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..core.hooks import TrialFiles
from ..core.rules import Rule, Section
from .base import FIX_NAMES, Rendered
from .common import PlainListBackend, shipped_names, shown_names, switches_applied, switches_ignored, switches_unverified

DISABLED_ENV = "FUSION_DD_DISABLED_OPTIMIZERS"
SEPARATOR = ";"  # what optimization.disable_specified_optimizers expects
SESSION_OPTION = "optimization.disable_specified_optimizers"
NAMES_FILE = "onnxruntime_optimizers.txt"
#: Inserted by the session itself after the optimizer levels ran (fp16 casts,
#: copies between devices): they run whatever ``disabled_optimizers`` says.
UNSWITCHABLE = frozenset({"CastFloat16Transformer", "RemoveDuplicateCastTransformer", "MemcpyTransformer"})
_LINE = re.compile(r"GraphTransformer (\S+) modified: ([01])\b")
#: Log files of a trial that may hold ONNX Runtime's lines: the training's
#: output, and any ``*.log`` the training wrote into its trial directory.
_LOG_NAMES = ("output.log",)
_READ_LIMIT = 512 * 1024 * 1024  # a log bigger than this is read only that far

HINT = (
    "pass **fusion_dd.integrations.ort_session_kwargs() to every InferenceSession that fusion-dd should "
    "control (or call ort_session_options(so) on its SessionOptions), see docs/compilers.md"
)


def known_names() -> frozenset[str]:
    """ONNX Runtime's optimizer names shipped with fusion-dd (transformers, EP variants, rewrite rules)."""
    return shipped_names(NAMES_FILE)


#: The layout transformer's per-execution-provider name (``TransposeOptimizer_`` + the EP's type).
_EP_VARIANT = re.compile(r"TransposeOptimizer_[A-Za-z0-9]+ExecutionProvider")


#: Rewrite rules whose name (what ``disabled_optimizers`` matches) is not their C++ class's:
#: the class name switches nothing (checked on ONNX Runtime 1.32 by the optimized graphs).
RULE_NAME_OF_CLASS = {
    "PadFusion": "Pad_Fusion",
    "MatmulBNFusion": "MatMul_BatchNormalization_Fusion",
    "ClipQuantFusion": "ClipQuantRewrite",
    "ReluQuantFusion": "ReluQuantRewrite",
}


def is_known(name: str) -> bool:
    """A name of fusion-dd's list, or the transpose optimizer of any execution provider."""
    return name in known_names() or _EP_VARIANT.fullmatch(name) is not None


def parse_log_lines(lines: Iterable[str]) -> tuple[set[str], dict[str, int]]:
    """(transformers that ran, how many times each modified the graph) from ONNX Runtime's log lines."""
    ran: set[str] = set()
    fired: dict[str, int] = {}
    for line in lines:
        if "GraphTransformer" not in line:
            continue
        match = _LINE.search(line)
        if match is None:
            continue
        name, modified = match.group(1), match.group(2) == "1"
        ran.add(name)
        if modified:
            fired[name] = fired.get(name, 0) + 1
    return ran, fired


def read_log(paths: Iterable[Path]) -> tuple[set[str], dict[str, int], bool]:
    """Parse the logs that exist (regular files only); the flag says whether any had ONNX Runtime's lines."""
    ran: set[str] = set()
    fired: dict[str, int] = {}
    for path in paths:
        if not path.is_file():
            continue  # never a FIFO or a device the training left behind
        with open(path, encoding="utf-8", errors="replace") as handle:
            read = 0
            lines = []
            for line in handle:
                read += len(line)
                if "GraphTransformer" in line:
                    lines.append(line)
                if read > _READ_LIMIT:
                    break
        more_ran, more_fired = parse_log_lines(lines)
        ran |= more_ran
        for name, count in more_fired.items():
            fired[name] = fired.get(name, 0) + count
    return ran, fired, bool(ran)


def trial_logs(trial_dir: Path) -> list[Path]:
    """The training's output and the ``*.log`` files at the top of its trial directory."""
    paths = [trial_dir / name for name in _LOG_NAMES]
    try:
        paths += sorted(path for path in trial_dir.glob("*.log") if path.name not in _LOG_NAMES and path.name != "supervisor.log")
    except OSError:
        pass
    return paths


class OrtLogHook:
    """ONNX Runtime's log of a trial: which switched-off optimizers still ran or fired, what fused how often."""

    name = "onnxruntime_log"

    def __init__(self, candidates: Sequence[Rule]) -> None:
        self.names = [rule.name for rule in candidates]

    def collect(self, files: TrialFiles) -> dict[str, Any]:
        ran, fired, found = read_log(trial_logs(files.trial_dir))
        facts = with_fired(check(self.names, files.enabled, ran, fired, found), fired)
        unknown = not_run(self.names, files.enabled, ran, found)
        if unknown:
            facts["unknown_to_compiler"] = unknown
        confirmed = [name for name in self.names if name in ran and not is_known(name)]
        if confirmed:
            facts["known_to_compiler"] = confirmed  # not in fusion-dd's list, but this build runs it
        return facts


def check(
    candidates: Sequence[str], enabled: Iterable[str], ran: set[str], fired: Mapping[str, int], found: bool
) -> dict[str, Any]:
    """The switch check of one ORT trial from what its log shows (pure)."""
    enabled_set = set(enabled)
    off = [name for name in candidates if name not in enabled_set]
    effects = {name: count for name, count in fired.items() if name in set(candidates)}
    if not found:
        return switches_unverified(
            "the training's log shows no 'GraphTransformer <name> modified:' lines of ONNX Runtime, so "
            f"fusion-dd could not verify that the disabled optimizers were applied; {HINT}",
        )
    # Rewrite rules run inside Level<n>_RuleBasedTransformer and never appear by name.
    visible = ran | _transformers()
    checkable = [name for name in off if name not in UNSWITCHABLE and name in visible]
    fired_off = [name for name in off if name in fired]
    if off and not checkable:
        return switches_unverified(
            "none of the optimizers switched off shows in ONNX Runtime's log by name (rewrite rules "
            "and the session's own cast transformers never do), so fusion-dd could not verify that they were applied",
            fired_off=fired_off,
            effects=effects,
        )
    if off and all(name in ran for name in checkable):
        names = shown_names(checkable)
        return switches_ignored(
            f"ONNX Runtime ran every optimizer fusion-dd switched off ({names}): the disabled list did "
            f"not reach the session; {HINT}",
            fired_off,
            effects,
        )
    return switches_applied(fired_off, effects)


def not_run(candidates: Sequence[str], enabled: Iterable[str], ran: set[str], found: bool) -> list[str]:
    """Transformer candidates switched on that the log does not list: this build never runs them.

    ONNX Runtime ignores an unknown name silently, and a transformer of another
    execution provider or build never runs here: searching it proves nothing.
    Rewrite rules never appear by name, so they are not judged.
    """
    if not found:
        return []
    enabled_set = set(enabled)
    return [name for name in candidates if name in enabled_set and name not in ran and name not in _REWRITE_RULES]


def with_fired(facts: dict[str, Any], fired: Mapping[str, int]) -> dict[str, Any]:
    """Add every transformer that modified the graph, candidate or not (closure adds from these)."""
    if fired:
        facts["fired"] = sorted(fired)
    return facts


def _transformers() -> frozenset[str]:
    """Shipped names that are graph transformers (they appear in the log when they run)."""
    return frozenset(name for name in known_names() if name not in _REWRITE_RULES)


_REWRITE_RULES = frozenset(
    {
        "EliminateIdentity", "EliminateSlice", "UnsqueezeElimination", "EliminateDropout", "ExpandElimination",
        "CastElimination", "CastChainElimination", "PreShapeNodeElimination", "NoopElimination", "DivMulFusion",
        "FuseReluClip", "GemmSumFusion", "GemmTransposeFusion", "NotWhereFusion", "ConvAddFusion", "ConvMulFusion",
        "ConvBNFusion", "Pad_Fusion", "MatMul_BatchNormalization_Fusion", "LabelEncoderFusion", "ClipQuantRewrite",
        "ReluQuantRewrite",
    }
)  # fmt: skip


#: Containers: graph transformers that apply rewrite rules, one level each. A rule inside
#: is switched off by its own name in ``disabled_optimizers`` (the container then runs
#: without it), so a culprit container is searched inside for the rule (ONNX Runtime
#: 1.32's GenerateRewriteRules; DivMulFusion alone checked with the real runtime, see
#: examples/onnxruntime/level1.py). The log never names a rule, only its container.
CONTAINERS: dict[str, tuple[str, ...]] = {
    "Level1_RuleBasedTransformer": (
        "EliminateIdentity", "EliminateSlice", "UnsqueezeElimination", "EliminateDropout", "ExpandElimination",
        "CastElimination", "CastChainElimination", "PreShapeNodeElimination", "NoopElimination", "DivMulFusion",
        "FuseReluClip", "GemmSumFusion", "GemmTransposeFusion", "NotWhereFusion", "ConvAddFusion", "ConvMulFusion",
        "ConvBNFusion", "Pad_Fusion", "MatMul_BatchNormalization_Fusion", "LabelEncoderFusion",
    ),
    "Level2_RuleBasedTransformer": ("ClipQuantRewrite", "ReluQuantRewrite"),
}  # fmt: skip


def containers_of(candidates: Sequence[Rule]) -> dict[Rule, list[Rule]]:
    """Each candidate container with its rules that are candidates too (in candidate order)."""
    by_name = {rule.name: rule for rule in candidates}
    found: dict[Rule, list[Rule]] = {}
    for name, inner in CONTAINERS.items():
        rules = [by_name[rule] for rule in inner if rule in by_name]
        if name in by_name and rules:
            found[by_name[name]] = rules
    return found


def realize_containers(candidates: Sequence[Rule], enabled: Iterable[Rule]) -> frozenset[Rule]:
    """A container asked on alone runs all its rules; a rule asked on runs inside its container (pure).

    The top level of a search asks about containers only, so "container on"
    means every rule in it; the search inside one asks about its rules, each of
    which needs the container on to run.
    """
    enabled = frozenset(enabled)
    realized = set(enabled)
    for container, rules in containers_of(candidates).items():
        if any(rule in enabled for rule in rules):
            realized.add(container)
        elif container in enabled:
            realized.update(rules)
    return frozenset(realized)


def render_disabled(candidates: Sequence[Rule], enabled: Iterable[Rule]) -> list[str]:
    """The names to switch off, in candidate order (ONNX Runtime treats the list as a set)."""
    enabled_set = set(enabled)
    return [rule.name for rule in candidates if rule not in enabled_set]


class OrtBackend(PlainListBackend):
    """ONNX Runtime's graph optimizers (any execution provider)."""

    name = "onnxruntime"
    fix_name = FIX_NAMES["onnxruntime"]  # the fix's list of names switched off, in the state directory
    group = Section.ONNXRUNTIME

    def render(self, candidates: Sequence[Rule], enabled: Iterable[Rule]) -> Rendered:
        disabled = render_disabled(candidates, enabled)
        text = (
            "# ONNX Runtime optimizers switched off by fusion-dd (disabled_optimizers), one a line;\n"
            f"# the training reads them from {DISABLED_ENV} through fusion_dd.integrations.ort_session_kwargs()\n"
            + "".join(f"{name}\n" for name in disabled)
        )
        return Rendered(switch_text=text, env={DISABLED_ENV: SEPARATOR.join(disabled)})

    def hooks(self, candidates: Sequence[Rule]) -> Sequence[OrtLogHook]:
        return [OrtLogHook(candidates)]

    def realize(self, candidates: Sequence[Rule], enabled: Iterable[Rule]) -> frozenset[Rule]:
        return realize_containers(candidates, enabled)

    def containers(self, candidates: Sequence[Rule]) -> dict[Rule, list[Rule]]:
        """Candidate containers and the rules inside them that are candidates (searched inside)."""
        return containers_of(candidates)

    def fix_env(self, candidates: Sequence[Rule], enabled: Iterable[Rule]) -> dict[str, str]:
        return dict(self.render(candidates, enabled).env)

    def closure_group(self, name: str) -> Section | None:
        """The group of a rule closure may add; None for what the session runs whatever the switches say."""
        return None if name in UNSWITCHABLE else Section.ONNXRUNTIME

    candidate_group = closure_group  # rules.from: all_on
