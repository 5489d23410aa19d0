"""The prior of a guided search: the user's suspects and the references' tensor dumps.

The two reference trainings (all candidates off, all on) are trained anyway.
With ``search.guide: dumps`` they dump the tensors of one step too (or, when
``localize.command`` or ``localize.args`` may cut a dumping training short, two
extra dumped trainings of the same configurations do), and their comparison (``fusion_dd.compare``)
points at the fused ops whose numbers go wrong first. The graph dump names the
rules that made those ops, so the candidate rules can be ranked by suspicion:

1. the candidate rules of the first divergence (the op to blame for the first
   bad tensor); among them, a rule whose other fused ops stay good comes after
   one whose every op goes bad (it fuses correctly elsewhere), then candidate order;
2. the candidate rules of the other bad ops, by how early their first bad op
   comes (topological order of the fusion-on run), then by how badly it
   diverges (lowest cosine), then by the same share of good ops;
3. everything else is no suspect: the search keeps it in candidate order.

Beside the ranking, each of the first suspects gets *partners*: the candidate
rules of the ops around its bad op in the fusion-on graph (its producers and
consumers, then the ops that share one of them with it), rules that made no bad
op of their own first. That is where an interacting partner hides from the
dumps: a pass that removes a cast or changes a layout makes no op that goes
wrong, it changes what the suspect's fused kernel reads. When the suspect
passes alone, the search asks it with each partner (``fusion_dd.search.guided``).

A later search starts inside a failing fix candidate; when that training dumped
too, its comparison against the baseline's dump ranks the rules of the failure
that is left (``refined``): the culprit just switched off no longer hides the
ops behind it.

That ranking is a *prior*: ``fusion_dd.search.guided`` asks the suspects alone
first and proves every answer with trainings, so a wrong ranking costs a few
trainings and never a wrong answer. The worst op at step 0 is not always the
one that ruins accuracy after 10,000 steps.

Bookkeeping: the ranking, with its evidence, is journaled once as a ``guide``
record before the search asks its first question; resume reads that record and
never compares again (the search must replay the same questions). Reports and
``--dry-run`` show it from the record.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ..store.records import RecordType

#: How many suspects the report and the summary show with their evidence.
SHOWN = 8
#: How many suspects get partners, and how many partners each at most.
PARTNERED = 8
PARTNERS = 6


def _cosine(value: float) -> float:
    """Cosine for sorting: NaN (non-finite outputs) is the worst possible."""
    return -2.0 if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def rank(comparison: Any, candidates: Sequence[str]) -> tuple[list[str], list[dict[str, Any]]]:
    """The suspects (candidate rule names, most suspicious first) and the evidence for each.

    ``comparison`` is a ``fusion_dd.compare.Comparison`` of the all-on dump
    against the all-off dump. Pure: the same comparison gives the same ranking.
    """
    order = {name: index for index, name in enumerate(dict.fromkeys(candidates))}
    # A rule whose other fused ops stay good is less suspicious than one whose every op goes bad.
    ops: dict[str, list[int]] = {}
    for pair in comparison.pairs:
        for rule in pair.rules:
            ops.setdefault(rule, [0, 0])[bool(pair.bad)] += 1

    def exonerated(rule: str) -> float:
        good, bad = ops.get(rule, (0, 0))
        return good / (good + bad) if good + bad else 0.0

    evidence: dict[str, dict[str, Any]] = {}
    first = comparison.first_divergence
    leading: list[str] = []
    if first is not None:
        leading = sorted(
            {rule for rule in first.rules if rule in order}, key=lambda rule: (exonerated(rule), order[rule])
        )
        for rule in leading:
            evidence[rule] = {
                "rule": rule,
                "why": "first bad op",
                "op": first.op,
                "op_type": first.op_type,
                "layers": list(first.layers)[:4],
                "cosine": first.metrics.to_json().get("cosine"),
                "max_abs": first.metrics.to_json().get("max_abs"),
            }
    later: dict[str, tuple[int, float, Any]] = {}
    for pair in comparison.pairs:
        if not pair.bad:
            continue
        for rule in pair.rules:
            if rule not in order or rule in evidence:
                continue
            key = (pair.position, _cosine(pair.metrics.cosine))
            if rule not in later or key < later[rule][:2]:
                later[rule] = (key[0], key[1], pair)
    following = sorted(later, key=lambda rule: (later[rule][0], later[rule][1], exonerated(rule), order[rule]))
    for rule in following:
        pair = later[rule][2]
        metrics = pair.metrics.to_json()
        evidence[rule] = {
            "rule": rule,
            "why": "bad op",
            "op": pair.op,
            "op_type": pair.op_type,
            "position": pair.position,
            "layers": list(pair.layers)[:4],
            "cosine": metrics.get("cosine"),
            "max_abs": metrics.get("max_abs"),
        }
    for rule, entry in evidence.items():
        entry["good_ops"], entry["bad_ops"] = ops.get(rule, (0, 0))
    ranking = leading + following
    return ranking, [evidence[rule] for rule in ranking]


def partners(comparison: Any, candidates: Sequence[str], evidence: Sequence[Mapping[str, Any]]) -> dict[str, list[str]]:
    """Per suspect (the first ``PARTNERED``): the candidate rules of the ops around its bad op.

    Around means in the fusion-on graph: the op's producers and consumers first,
    then the ops that share a producer or a consumer with it, each group in
    graph order. Rules that made no bad op come first (a partner that made one
    is a suspect of its own). Empty without a graph dump (no edges, no rules).
    Pure: the same comparison gives the same partners.
    """
    graph = getattr(comparison, "graph_on", None)
    if graph is None:
        return {}
    order = {name: index for index, name in enumerate(dict.fromkeys(candidates))}
    ops = {op.name: op for op in graph.ops}
    index = {name: position for position, name in enumerate(ops)}
    producers: dict[str, list[str]] = {}
    consumers: dict[str, list[str]] = {}
    for op in graph.ops:
        for text in op.inputs:
            producer, _, slot = text.rpartition(":")
            producer = producer or text
            if slot == "-1" or producer not in ops or producer == op.name:
                continue
            producers.setdefault(op.name, []).append(producer)
            consumers.setdefault(producer, []).append(op.name)
    bad = {rule for pair in comparison.pairs if pair.bad for rule in pair.rules}

    def around(name: str) -> list[str]:
        near = list(dict.fromkeys(producers.get(name, []) + consumers.get(name, [])))
        shared = [
            other
            for hub in near
            for other in consumers.get(hub, []) + producers.get(hub, [])
            if other != name and other not in near
        ]
        return sorted(near, key=index.__getitem__) + sorted(dict.fromkeys(shared), key=index.__getitem__)

    found: dict[str, list[str]] = {}
    for entry in list(evidence)[:PARTNERED]:
        rule, op = entry.get("rule"), entry.get("op")
        if rule is None or op not in ops:
            continue
        mates: list[str] = []
        for name in around(op):
            graph_op = ops[name]
            for mate in graph_op.passes():
                if mate in order and mate != rule and mate not in mates:
                    mates.append(mate)
        mates.sort(key=lambda mate: mate in bad)  # stable: graph order within each group
        if mates:
            found[rule] = mates[:PARTNERS]
    return found


def refined(
    comparison: Any, candidates: Sequence[str], start: Sequence[str], suspects: Sequence[str]
) -> dict[str, Any]:
    """The ``guide_refined`` record of a later search: the dumps of its failing start against the baseline's.

    Only rules of the start are ranked (the others are off in it). The user's
    ``suspects`` stay first, as in the first search.
    """
    inside = [name for name in candidates if name in set(start)]
    ranking, why = rank(comparison, inside)
    mates = partners(comparison, inside, why)
    return {
        "type": RecordType.GUIDE_REFINED,
        "config": sorted(start),
        "ranking": list(dict.fromkeys([*(rule for rule in suspects if rule in set(start)), *ranking])),
        "evidence": why[:SHOWN],
        "partners": mates,
        "compared": len(comparison.pairs),
        "bad": len(comparison.bad),
    }


def record(
    suspects: Sequence[str],
    mode: str,
    dumps: Mapping[str, Any] | None,
    refine: bool = False,
) -> dict[str, Any]:
    """The ``guide`` journal record: the user's suspects first, then the dumps' ranking.

    ``dumps``: None when the guide does not use dumps, else
    ``{"ranking": [...], "evidence": [...], "partners": {...}, "trials": [off, on]}``
    or ``{"reason": why there is no ranking}``. ``refine``: later searches are
    ranked by their fix candidates' dumps (``guide_refined`` records); a search
    journaled without it replays without it.
    """
    ranking = list(dict.fromkeys(suspects))
    if dumps is not None:
        ranking += [rule for rule in dumps.get("ranking") or [] if rule not in ranking]
    return {
        "type": RecordType.GUIDE,
        "mode": mode,
        "suspects": list(suspects),
        "dumps": dict(dumps) if dumps is not None else None,
        "ranking": ranking,
        "refine": refine,
    }


def report_entry(
    guide: Mapping[str, Any] | None,
    refined: Sequence[Mapping[str, Any]] = (),
    candidates: Sequence[str] = (),
) -> dict[str, Any] | None:
    """``report.json``'s ``guide``: what guided the search, as journaled.

    ``refined``: the ``guide_refined`` records of later searches, shown by the
    rules switched off in their start (``off``, against ``candidates``).
    """
    if guide is None:
        return None
    dumps = guide.get("dumps")
    entry: dict[str, Any] = {
        "mode": guide.get("mode"),
        "suspects": list(guide.get("suspects") or []),
        "ranking": list(guide.get("ranking") or []),
    }
    if dumps is not None:
        entry["dumps"] = {
            key: dumps[key] for key in ("trials", "reason", "compared", "bad") if dumps.get(key) is not None
        }
        entry["evidence"] = list(dumps.get("evidence") or [])
        if dumps.get("partners"):
            entry["partners"] = dict(dumps["partners"])
    if refined:
        entry["refined"] = [
            {
                "off": [name for name in candidates if name not in set(found.get("config") or [])],
                **{
                    key: found[key]
                    for key in ("trials", "ranking", "evidence", "partners", "reason")
                    if found.get(key) is not None
                },
            }
            for found in refined
        ]
    return entry


def ranking_rows(guide: Mapping[str, Any], culprits: Sequence[Sequence[str]] = ()) -> list[dict[str, Any]]:
    """The first ``SHOWN`` suspects with why each was suspected, for the summary and the HTML table alike.

    One row per suspect: ``rank``, ``rule``, ``why`` (named by the user, or the
    bad op with its type and cosine), ``culprit`` (the search found it guilty).
    """
    ranking = list(guide.get("ranking") or [])
    dumps = guide.get("dumps") or {}
    listed = guide.get("evidence") or dumps.get("evidence") or []  # a report entry, or the journal record
    evidence = {entry["rule"]: entry for entry in listed}
    user = set(guide.get("suspects") or [])
    guilty = {rule for culprit in culprits for rule in culprit}
    rows = []
    for index, rule in enumerate(ranking[:SHOWN], start=1):
        detail = "named in search.suspects" if rule in user else ""
        found = evidence.get(rule)
        if found is not None and not detail:
            cosine = found.get("cosine")
            shown = f"{cosine:.4g}" if isinstance(cosine, (int, float)) else str(cosine)
            detail = f"{found['why']} {found['op']} ({found.get('op_type')}), cosine {shown}"
        rows.append({"rank": index, "rule": rule, "why": detail, "culprit": rule in guilty})
    return rows


def summary_lines(guide: Mapping[str, Any] | None, culprits: Sequence[Sequence[str]] = ()) -> list[str]:
    """How the search was guided, for the end-of-search summary and ``--dry-run``."""
    if guide is None:
        return []
    ranking = list(guide.get("ranking") or [])
    dumps = guide.get("dumps") or {}
    guilty = {rule for culprit in culprits for rule in culprit}
    if not ranking:
        reason = dumps.get("reason") or "no suspect"
        return [f"guide: none used ({reason})"]
    listed = guide.get("evidence") or dumps.get("evidence") or []  # a report entry, or the journal record
    evidence = {entry["rule"]: entry for entry in listed}
    user = set(guide.get("suspects") or [])
    source = " and ".join(
        part
        for part, present in (("search.suspects", bool(user)), ("the references' tensor dumps", bool(evidence)))
        if present
    )
    lines = [f"guide: suspects asked first (the top one alone, then the next ones together), ranked by {source}:"]
    for row in ranking_rows(guide, culprits):
        mark = "  <- culprit" if row["culprit"] else ""
        lines.append(f"  {row['rank']}. {row['rule']}: {row['why']}{mark}")
    if len(ranking) > SHOWN:
        lines.append(f"  ... {len(ranking) - SHOWN} more suspect(s) in report.json (guide.ranking)")
    for later in guide.get("refined") or []:
        if not later.get("ranking"):
            continue
        top = later["ranking"][0]
        why = next((entry for entry in later.get("evidence") or [] if entry.get("rule") == top), None)
        seen = f" ({why['why']} {why['op']})" if why else ""
        shown = ", ".join(f"{rule}{' <- culprit' if rule in guilty else ''}" for rule in later["ranking"][:3])
        off = ", ".join(later.get("off") or [])
        lines.append(f"  then inside the failing fix (off: {off}), its own dump{seen}: {shown}")
        named = later.get("partners") or {}
        lead = next((rule for rule in later["ranking"] if named.get(rule)), None)
        if lead is not None:
            marked = ", ".join(f"{rule}{' <- culprit' if rule in guilty else ''}" for rule in named[lead][:3])
            lines.append(f"    asked with {lead} when it passes alone: {marked}")
    return lines
