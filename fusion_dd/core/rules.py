"""Fusion rules and the catalog of known CANN pass names.

A rule is a (name, section) pair because CANN's switch file keeps GraphFusion and
UBFusion passes in separate sections and a rule written in the wrong section is
silently ignored. Names are case-sensitive and never normalised.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources


class Section(str, enum.Enum):
    """Where a rule is switched: the two sections of ``fusion_switch.cfg``, or AutoFuse.

    The value is CANN's spelling. ``AutoFuse`` is CANN's second fusion mechanism
    (8.3 and later), switched by the ``AUTOFUSE_FLAGS`` environment variable, not
    by the switch file; its switch points are ``AUTOFUSE_POINTS``.
    """

    GRAPH = "GraphFusion"
    UB = "UBFusion"
    AUTOFUSE = "AutoFuse"
    # Other compilers' groups (``rules.compiler``): ONNX Runtime's graph
    # transformers and rewrite rules are one group; XLA has HLO passes
    # (``--xla_disable_hlo_passes``) and boolean debug flags (``--xla_<flag>=false``).
    ONNXRUNTIME = "onnxruntime"
    XLA_PASS = "xla_pass"
    XLA_FLAG = "xla_flag"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, text: str) -> "Section":
        """Accept CANN's spelling and the ``fusion_result.json`` spelling."""
        aliases = {
            "GraphFusion": cls.GRAPH,
            "graph_fusion": cls.GRAPH,
            "UBFusion": cls.UB,
            "ub_fusion": cls.UB,
            "AutoFuse": cls.AUTOFUSE,
            "onnxruntime": cls.ONNXRUNTIME,
            "xla_pass": cls.XLA_PASS,
            "xla_flag": cls.XLA_FLAG,
        }
        try:
            return aliases[text]
        except KeyError:
            raise ValueError(
                f"unknown fusion section {text!r}: use GraphFusion, UBFusion or AutoFuse"
            ) from None


@dataclass(frozen=True, order=True)
class Rule:
    """One fusion pass as it is written into ``fusion_switch.cfg``."""

    name: str
    section: Section

    def __post_init__(self) -> None:
        # Rules are hashed millions of times in a long search (sets of them are the
        # configurations): computed once, the same value the dataclass would give.
        object.__setattr__(self, "_hash", hash((self.name, self.section)))

    def __hash__(self) -> int:
        return self._hash  # type: ignore[attr-defined, no-any-return]

    def __reduce__(self) -> tuple[type, tuple[str, Section]]:
        # String hashes differ between processes: a pickled rule is rebuilt, never its cached hash.
        return (Rule, (self.name, self.section))

    def __str__(self) -> str:
        return self.name

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "section": self.section.value}


# AutoFuse's switch points: ``elemwise`` is AutoFuse as a whole (--enable_autofuse,
# Elemwise and Broadcast fusion), ``reduce`` and ``concat`` its optional capabilities
# (--autofuse_enable_pass / --autofuse_disable_pass), which need ``elemwise`` on.
AUTOFUSE_POINTS = ("elemwise", "reduce", "concat")


_WHITE_SPACE = re.compile(r"\s")  # str.isspace()'s characters: Unicode white space
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def name_problem(name: object) -> str | None:
    """Why ``name`` cannot be a CANN pass name, or None when it can.

    Checked for hand-listed names and for names read from artifacts alike: an
    empty name, white space or a control character (NUL) would be written into
    ``fusion_switch.cfg`` where CANN ignores it silently, and ``ALL`` is the
    switch file's default entry, not a pass.
    """
    if not isinstance(name, str) or not name:
        return f"{name!r} is not a pass name (empty or not a string)"
    if _WHITE_SPACE.search(name):
        return f"{name!r} contains white space; CANN pass names never do"
    if _CONTROL.search(name):
        return f"{name!r} contains a control character; CANN pass names never do"
    if name == "ALL":
        return "'ALL' is the switch file's default entry, not a pass name"
    return None


_CATALOG_FILES = {Section.GRAPH: "graph_fusion.txt", Section.UB: "ub_fusion.txt"}


@lru_cache(maxsize=1)
def catalog() -> dict[str, Section]:
    """Known CANN pass names with their section.

    The list is incomplete (every CANN release adds passes), so absence from it is
    a reason to warn, never to refuse a name that fired in the user's artifacts.
    """
    known: dict[str, Section] = {}
    data = resources.files("fusion_dd") / "data"
    for section, filename in _CATALOG_FILES.items():
        for line in (data / filename).read_text(encoding="utf-8").splitlines():
            name = line.strip()
            if name and not name.startswith("#"):
                known.setdefault(name, section)
    return known


def catalog_section(name: str) -> Section | None:
    """The section of a known pass name, or None when the catalog lacks it."""
    return catalog().get(name)
