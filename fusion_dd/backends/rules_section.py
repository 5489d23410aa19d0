"""``rules:`` of a compiler without CANN's sections (``rules.compiler: onnxruntime | xla``).

The candidates are a plain list, ``rules.names``, or the rules that fired in
the user's own artifacts, ``rules.from`` (ONNX Runtime: logs with its
``GraphTransformer <name> modified: 1`` lines; XLA: ``--xla_dump_to``
directories). Every name is checked before anything is launched, against the
artifacts (authoritative) or the list shipped with fusion-dd, because both
compilers ignore an unknown name silently and a search over it would "prove"
it harmless. The messages speak the compiler's language, never CANN's.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..core.errors import UsageError
from ..core.rules import Rule, Section

#: Keys of ``rules:`` that only CANN has.
CANN_KEYS = ("GraphFusion", "UBFusion", "AutoFuse", "base_cfg", "graphs")
#: The default of ``rules.unknown`` per compiler: ONNX Runtime's list is complete
#: for its release; XLA's shipped pass list comes from XLA:CPU dumps and lacks
#: GPU and TPU passes, so an unknown XLA pass is a warning.
DEFAULT_UNKNOWN = {"onnxruntime": "error", "xla": "warn"}
UNKNOWN_SHOWN = 10


def name_problem(name: object, compiler: str) -> str | None:
    """Why ``name`` cannot be one of the compiler's rule names, or None."""
    if not isinstance(name, str) or not name:
        return f"{name!r} is not a name (empty or not a string)"
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in name):
        return f"{name!r} contains white space or a control character"
    separators = ";" if compiler == "onnxruntime" else ",="
    if any(ch in separators for ch in name):
        return f"{name!r} contains {' or '.join(repr(ch) for ch in separators)}, which separates names"
    return None


def _group(name: str, compiler: str) -> Section:
    if compiler == "xla":
        from .xla import group_of

        return group_of(name)
    return Section.ONNXRUNTIME


def _known(compiler: str) -> frozenset[str]:
    if compiler == "onnxruntime":
        from .ort import known_names

        return known_names()
    from .xla import known_passes

    return known_passes()


def _ort_variant(name: str) -> bool:
    from .ort import is_known

    return is_known(name)


def _from_artifacts(reader: Any, raw: Any, base_dir: Path, compiler: str) -> tuple[list[str], set[str]]:
    """``rules.from``: (rules that fired, in order of first appearance; every name the artifacts know)."""
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list) or not raw or not all(isinstance(p, str) and p for p in raw):
        what = "ONNX Runtime log files" if compiler == "onnxruntime" else "XLA dump directories (--xla_dump_to)"
        raise reader.error("rules.from", f"must be a list of {what}")
    fired: dict[str, int] = {}
    known: set[str] = set()
    for text in raw:
        path = (base_dir / text).resolve()
        if not path.exists():
            raise reader.error("rules.from", f"not found: {path}")
        if compiler == "onnxruntime":
            from .ort import read_log

            if not path.is_file():
                raise reader.error("rules.from", f"{path}: not a log file (give the output of a run with ONNX Runtime's log at info level)")
            ran, more, found = read_log([path])
            if not found:
                raise reader.error(
                    "rules.from",
                    f"{path}: no 'GraphTransformer <name> modified:' lines; run once with "
                    "SessionOptions.log_severity_level = 1 (or inside fusion-dd, with ort_session_kwargs()) and give its log",
                )
            known |= ran
        else:
            from .xla import dumped_pass_names, parse_dump

            if not path.is_dir():
                raise reader.error("rules.from", f"{path}: not a directory (give an --xla_dump_to directory)")
            names = sorted(entry.name for entry in path.iterdir())
            more = parse_dump(names)
            if not more:
                raise reader.error(
                    "rules.from",
                    f"{path}: no pass dumps (module_*.after_<pass>.before_<next>.txt); run once with "
                    "XLA_FLAGS='--xla_dump_to=DIR --xla_dump_hlo_pass_re=.*' and give DIR",
                )
            known |= dumped_pass_names(names)
        for name, count in more.items():
            fired[name] = fired.get(name, 0) + count
    return list(fired), known | set(fired)


def read_compiler_rules(
    reader: Any, section: Mapping[str, Any], base_dir: Path, compiler: str
) -> tuple[tuple[Rule, ...], tuple[str, ...]]:
    """The candidates of ``rules:`` for ONNX Runtime or XLA, and the warnings about their names."""
    for key in CANN_KEYS:
        if section.get(key) is not None:
            raise reader.error(
                f"rules.{key}",
                f"is CANN's; with rules.compiler: {compiler} list the candidates under rules.names "
                "(or take them from rules.from)",
            )
    policy = section.get("unknown", DEFAULT_UNKNOWN[compiler])
    if policy not in ("error", "warn", "ignore"):
        raise reader.error("rules.unknown", f"must be error, warn or ignore, got {policy!r}")
    if section.get("keep_unfired") is not None:
        reader.boolean(section["keep_unfired"], "rules.keep_unfired")
    warnings: list[str] = []
    names: list[str] = []
    keys: dict[str, str] = {}
    artifact_names: set[str] | None = None
    from_all_on = section.get("from") == "all_on"
    if section.get("from") is not None and not from_all_on:
        fired, artifact_names = _from_artifacts(reader, section["from"], base_dir, compiler)
        for name in fired:
            if name_problem(name, compiler) is None:
                names.append(name)
                keys[name] = "rules.from"
    listed = section.get("names")
    if listed is not None:
        if not isinstance(listed, list):
            raise reader.error("rules.names", "must be a list of names")
        for index, name in enumerate(listed):
            key = f"rules.names[{index}]"
            problem = name_problem(name, compiler)
            if problem is not None:
                raise reader.error(key, f"must be a {_what(compiler)} name: {problem}")
            if name in keys and keys[name] != "rules.from":
                raise reader.error("rules.names", f"duplicate name {name!r} (also in {keys[name]})")
            if name not in keys:
                names.append(name)
            keys[name] = key
    if not names and not from_all_on:
        raise reader.error("rules", f"no candidate rules: {_where(compiler)}")
    known = set(_known(compiler)) | (artifact_names or set())
    unknown: list[tuple[str, str]] = []
    for name in names:
        if compiler == "xla" and _group(name, compiler) is Section.XLA_FLAG:
            continue  # a boolean debug flag: XLA's flag list is not shipped; its debug_options dump proves it arrived
        if name in known or (compiler == "onnxruntime" and _ort_variant(name)):
            continue
        close = difflib.get_close_matches(name, sorted(known), n=1) if policy != "ignore" else []
        hint = f"; did you mean {close[0]}?" if close else ""
        if compiler == "onnxruntime":
            from .ort import RULE_NAME_OF_CLASS

            if name in RULE_NAME_OF_CLASS:  # the rewrite rule's class, not its name
                hint = f"; did you mean {RULE_NAME_OF_CLASS[name]}? ({name} is the rule's C++ class, its name differs)"
        source = "the artifacts of rules.from" if artifact_names is not None else f"fusion-dd's list of {_what(compiler)} names"
        unknown.append((keys[name], f"{name!r} is unknown to {source}{hint}"))
    warnings.extend(_unknown(reader, unknown, policy, compiler))
    if compiler == "onnxruntime":
        from .ort import CONTAINERS

        # A container's rules join the candidates, to be searched inside it once it is a culprit.
        names += [rule for name in list(names) for rule in CONTAINERS.get(name, ()) if rule not in names]
    rules = [Rule(name, _group(name, compiler)) for name in names]
    if compiler == "onnxruntime":
        from .ort import UNSWITCHABLE

        stuck = [rule.name for rule in rules if rule.name in UNSWITCHABLE]
        if stuck:
            warnings.append(
                f"{', '.join(stuck)}: ONNX Runtime runs {'it' if len(stuck) == 1 else 'them'} whatever "
                "disabled_optimizers says (the session inserts them after the optimizer levels), so "
                f"{'it is' if len(stuck) == 1 else 'they are'} no candidate"
            )
            rules = [rule for rule in rules if rule.name not in UNSWITCHABLE]
            if not rules and not from_all_on:
                raise reader.error("rules", f"no candidate rules that can be switched off: {_where(compiler)}")
    return tuple(rules), tuple(warnings)


def _what(compiler: str) -> str:
    return "ONNX Runtime optimizer" if compiler == "onnxruntime" else "XLA pass or flag"


def _where(compiler: str) -> str:
    if compiler == "onnxruntime":
        return (
            "list ONNX Runtime optimizer names under rules.names (e.g. [GeluFusionL2, LayerNormFusionL1]), "
            "or give a log of a run with its info log on under rules.from"
        )
    return (
        "list XLA pass names (e.g. algsimp) or boolean flags (e.g. xla_allow_excess_precision) under rules.names, "
        "or give an --xla_dump_to directory of a run under rules.from"
    )


def _unknown(reader: Any, unknown: Sequence[tuple[str, str]], policy: str, compiler: str) -> list[str]:
    """``rules.unknown`` for these compilers: both ignore an unknown name silently."""
    if not unknown or policy == "ignore":
        return []
    if policy == "error":
        key, message = unknown[0]
        more = len(unknown) - 1
        rest = f"; and {more} more unknown name(s)" if more else ""
        source = (
            "names ONNX Runtime prints as 'GraphTransformer <name> modified' in its info log"
            if compiler == "onnxruntime"
            else "pass names from a dump: `fusion-dd rules --compiler xla DIR`"
        )
        raise UsageError(
            f"{reader.source}: {key}: {message}{rest}; {compiler} ignores an unknown name silently, so fix the "
            f"spelling (take {source}), or set rules.unknown: warn for names newer than fusion-dd's list"
        )
    confirm = (
        "its log in every trial tells: a name it lists is confirmed, one it never lists is reported unknown to it"
        if compiler == "onnxruntime"
        else "a trial's dump that names it confirms it"
    )
    shown = [
        f"{message} ({compiler} ignores an unknown name silently; kept as a candidate: {confirm})"
        for _, message in unknown[:UNKNOWN_SHOWN]
    ]
    if len(unknown) > UNKNOWN_SHOWN:
        shown.append(f"and {len(unknown) - UNKNOWN_SHOWN} more unknown names (rules.unknown: warn; kept as candidates)")
    return shown
