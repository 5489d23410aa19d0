"""search.suspects and search.guide: the config, the ranking from dumps, the CLI and resume."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from fusion_dd.config.settings import parse_config
from fusion_dd.core.errors import UsageError
from fusion_dd.analysis.guide import partners, rank, record, refined, report_entry, summary_lines
from fusion_dd.store.journal import read_records
from tests.support.cli import CULPRIT, GRAPH, launches, write_config
from tests.support.dumping import DUMP_TRAIN, started, write
from tests.support.fake_training import call_fusion_dd, run_fusion_dd

LOCALIZE = {"env": {"FUSION_DD_DUMP_DIR": "{dump_dir}"}}


def config(tmp_path: Path, search: dict, localize: dict | None = None) -> object:
    document = {
        "rules": {"GraphFusion": GRAPH[:6]},
        "train": {"command": ["train"]},
        "metric": {"pattern": r"accuracy=(\S+)"},
        "search": search,
        "state_dir": "state",
    }
    if localize is not None:
        document["localize"] = localize
    return parse_config(document, tmp_path / "fusion-dd.yaml")


# --- config ---------------------------------------------------------------------------------


def test_guide_defaults_to_dumps_with_a_localize_section_and_none_without(tmp_path: Path) -> None:
    assert config(tmp_path, {}).search.guide == "none"
    assert config(tmp_path, {}, LOCALIZE).search.guide == "dumps"
    assert config(tmp_path, {"guide": "none"}, LOCALIZE).search.guide == "none"


def test_suspects_are_kept_in_order_without_duplicates(tmp_path: Path) -> None:
    settings = config(tmp_path, {"suspects": [GRAPH[3], GRAPH[1], GRAPH[3]]}).search
    assert settings.suspects == (GRAPH[3], GRAPH[1])


@pytest.mark.parametrize(
    "search,localize,message",
    [
        ({"suspects": ["NoSuchFusionPass"]}, None, "search.suspects: 'NoSuchFusionPass' is not a candidate rule"),
        ({"suspects": [GRAPH[1][:-1]]}, None, f"did you mean {GRAPH[1]}?"),
        ({"suspects": {"a": 1}}, None, "search.suspects: must be a list of candidate rule names"),
        ({"guide": "maybe"}, LOCALIZE, "search.guide: must be dumps or none, got 'maybe'"),
        ({"guide": "dumps"}, None, "search.guide: dumps needs a localize: section"),
    ],
)
def test_bad_guide_settings_name_the_key_and_the_fix(tmp_path: Path, search, localize, message: str) -> None:
    with pytest.raises(UsageError) as caught:
        config(tmp_path, search, localize)
    assert message in str(caught.value) and "fusion-dd.yaml" in str(caught.value)


def test_an_unknown_suspect_exits_2_with_one_line(tmp_path: Path) -> None:
    write_config(tmp_path, search={"suspects": ["NoSuchFusionPass"]})
    result = run_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        result.stderr.strip()
    ] and "search.suspects: 'NoSuchFusionPass' is not a candidate rule" in result.stderr


# --- the ranking from a comparison ------------------------------------------------------------


@dataclass
class Metrics:
    cosine: float
    max_abs: float = 1.0

    def to_json(self) -> dict:
        return {"cosine": self.cosine, "max_abs": self.max_abs}


@dataclass
class Pair:
    position: int
    op: str
    rules: tuple[str, ...]
    cosine: float
    bad: bool = True
    op_type: str = "Op"
    layers: tuple[str, ...] = ()

    @property
    def metrics(self) -> Metrics:
        return Metrics(self.cosine)


@dataclass
class Divergence:
    op: str
    rules: tuple[str, ...]
    op_type: str = "Fused"
    layers: tuple[str, ...] = ("ln",)
    metrics: Metrics = field(default_factory=lambda: Metrics(0.5))


@dataclass
class Comparison:
    pairs: list[Pair]
    first_divergence: Divergence | None
    graph_on: object = None

    @property
    def bad(self) -> list[Pair]:
        return [pair for pair in self.pairs if pair.bad]


def test_rules_of_the_first_bad_op_lead_then_earlier_and_worse_ops() -> None:
    candidates = ["A", "B", "C", "D", "E", "F"]
    comparison = Comparison(
        pairs=[
            Pair(0, "ok", ("F",), 1.0, bad=False),
            Pair(1, "x", ("E", "Z"), 0.9),
            Pair(2, "y", ("D",), 0.2),
            Pair(2, "y2", ("B",), 0.1),  # same position, worse cosine: before D
            Pair(3, "z", ("C", "E"), 0.0),
        ],
        first_divergence=Divergence("fused", ("C", "A", "NotACandidate")),
    )
    ranking, evidence = rank(comparison, candidates)
    assert ranking == ["A", "C", "E", "B", "D"]  # F made no bad op: no suspect
    assert [entry["why"] for entry in evidence] == ["first bad op"] * 2 + ["bad op"] * 3
    assert evidence[2]["op"] == "x" and evidence[3]["cosine"] == 0.1


def test_a_rule_that_also_fuses_good_ops_comes_after_one_whose_ops_all_go_bad() -> None:
    comparison = Comparison(
        pairs=[Pair(0, "fine", ("A",), 1.0, bad=False), Pair(1, "fused", ("A", "B"), 0.3)],
        first_divergence=Divergence("fused", ("A", "B")),
    )
    ranking, evidence = rank(comparison, ["A", "B"])
    assert ranking == ["B", "A"]
    assert (evidence[1]["good_ops"], evidence[1]["bad_ops"]) == (1, 1)


def test_no_divergence_means_no_suspect() -> None:
    assert rank(Comparison([Pair(0, "ok", ("A",), 1.0, bad=False)], None), ["A"]) == ([], [])


@dataclass
class Op:
    name: str
    inputs: tuple[str, ...] = ()
    rules: tuple[str, ...] = ()

    def passes(self) -> tuple[str, ...]:
        return self.rules


@dataclass
class Graph:
    ops: list[Op]


def layer_norm_graph() -> Graph:
    """x -> sub (made by Cast, M) -> rsqrt (made by Z, M) -> out (made by E); y (made by F) also reads x."""
    return Graph(
        [
            Op("x"),
            Op("far", ("x:0",), ("Far",)),
            Op("sub", ("x:0",), ("Cast", "M")),
            Op("rsqrt", ("sub:0", "x:0"), ("Z", "M")),
            Op("out", ("rsqrt:0", "c:-1"), ("E",)),
            Op("c", (), ("Control",)),
        ]
    )


def test_partners_are_the_rules_around_the_bad_op_those_without_a_bad_op_first() -> None:
    comparison = Comparison(
        pairs=[
            Pair(0, "sub", ("Cast", "M"), 1.0, bad=False),
            Pair(1, "rsqrt", ("Z", "M"), 0.5),
            Pair(2, "out", ("E",), 0.5),
            Pair(3, "far", ("Far",), 1.0, bad=False),
        ],
        first_divergence=Divergence("rsqrt", ("Z", "M")),
    )
    comparison.graph_on = layer_norm_graph()
    candidates = ["Z", "M", "Cast", "E", "Far", "Control"]
    ranking, evidence = rank(comparison, candidates)
    found = partners(comparison, candidates, evidence)
    # Producers and consumers first (sub, x, out), then what shares them (far reads x too); a
    # control edge is no data flow. Rules that made no bad op lead: Cast, then Far; M and E made bad ops.
    assert found["Z"] == ["Cast", "Far", "M", "E"]
    assert "Z" not in found["M"] and found["M"][0] == "Cast"
    assert partners(Comparison(comparison.pairs, comparison.first_divergence), candidates, evidence) == {}  # no graph


def test_a_refined_record_ranks_only_the_rules_of_the_start_users_suspects_first() -> None:
    comparison = Comparison(
        pairs=[Pair(0, "sub", ("Cast", "M"), 1.0, bad=False), Pair(1, "rsqrt", ("Z", "M"), 0.5)],
        first_divergence=Divergence("rsqrt", ("Z", "M")),
    )
    comparison.graph_on = layer_norm_graph()
    made = refined(comparison, ["Z", "M", "Cast", "LN"], ["Z", "Cast", "M"], suspects=["Cast", "LN"])
    assert made["type"] == "guide_refined" and made["config"] == ["Cast", "M", "Z"]
    assert made["ranking"] == ["Cast", "Z", "M"]  # LN is off in this start: not ranked
    assert made["partners"]["Z"] == ["Cast", "M"]
    entry = report_entry(record([], "dumps", {"ranking": ["LN"], "evidence": []}), [made], ["Z", "M", "Cast", "LN"])
    assert entry is not None and entry["refined"][0]["off"] == ["LN"]
    lines = summary_lines(entry, [["Z", "Cast"]])
    assert "  then inside the failing fix (off: LN), its own dump: Cast <- culprit, Z <- culprit, M" in lines
    assert "    asked with Z when it passes alone: Cast <- culprit, M" in lines  # the first with partners


def test_the_record_puts_the_users_suspects_first() -> None:
    made = record(["B"], "dumps", {"ranking": ["A", "B", "C"], "evidence": []})
    assert made["ranking"] == ["B", "A", "C"] and made["type"] == "guide"
    assert "named in search.suspects" in "\n".join(summary_lines(made))
    assert summary_lines(record([], "dumps", {"reason": "no dump"})) == ["guide: none used (no dump)"]


# --- through the CLI ----------------------------------------------------------------------------


def searched(tmp_path: Path) -> tuple[dict, list]:
    result = run_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    return json.loads((tmp_path / ".fusion-dd" / "report.json").read_text()), launches(tmp_path)


def test_suspects_are_asked_alone_first_and_cost_fewer_trainings(tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    write_config(tmp_path / "plain", "--culprits", CULPRIT)
    plain, _ = searched(tmp_path / "plain")
    (tmp_path / "guided").mkdir()
    write_config(tmp_path / "guided", "--culprits", CULPRIT, search={"suspects": [GRAPH[2], CULPRIT]})
    guided, launched = searched(tmp_path / "guided")
    assert [sorted(r["name"] for r in c["rules"]) for c in guided["culprits"]] == [[CULPRIT]]
    assert guided["fix_verified"] and guided["guide"]["ranking"] == [GRAPH[2], CULPRIT]
    # After the two references, one round of two devices: each suspect alone.
    assert sorted(launched[2:4]) == sorted([((GRAPH[2],), 0), ((CULPRIT,), 0)])
    assert guided["trainings"] < plain["trainings"]
    assert len(set(launched)) == len(launched)


def test_a_resumed_guided_search_replays_its_ranking_and_trains_nothing_twice(tmp_path: Path) -> None:
    suspects = [GRAPH[4], GRAPH[7], GRAPH[1]]
    write_config(tmp_path, "--culprits", CULPRIT, budget=4, search={"suspects": suspects})
    first = run_fusion_dd("search", cwd=tmp_path)
    assert first.returncode == 3, first.stderr  # budget: the references and one round of suspects
    # Changing the suspects now changes nothing: the journaled ranking is replayed.
    document = yaml.safe_load((tmp_path / "fusion-dd.yaml").read_text())
    document["search"]["suspects"] = [GRAPH[9]]
    (tmp_path / "fusion-dd.yaml").write_text(yaml.safe_dump(document))
    dry = call_fusion_dd("search", "--dry-run", cwd=tmp_path)  # the search and resume around it are real processes
    assert dry.returncode == 0, dry.stderr
    assert "journaled its guide" in dry.stdout and f"1. {GRAPH[4]}: named in search.suspects" in dry.stdout
    resumed = run_fusion_dd("resume", "--budget", "60", "-c", "fusion-dd.yaml", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "search.suspects changed since this search started" in resumed.stderr + resumed.stdout
    found = json.loads((tmp_path / ".fusion-dd" / "report.json").read_text())
    assert found["guide"]["ranking"] == suspects
    assert [sorted(r["name"] for r in c["rules"]) for c in found["culprits"]] == [[CULPRIT]]
    journal = read_records(tmp_path / ".fusion-dd" / "journal.jsonl")
    assert sum(1 for r in journal if r.get("type") == "guide") == 1
    launched = launches(tmp_path)
    assert not [key for key, count in Counter(launched).items() if count > 1]
    # the first round on 2 devices: the top suspect alone and the fence of the 3 suspects
    assert sorted(launched[2:4]) == sorted([((GRAPH[4],), 0), (tuple(sorted(suspects)), 0)])


def test_a_separate_dumping_command_trains_two_extra_dumped_references(tmp_path: Path) -> None:

    path = write(tmp_path)
    document = yaml.safe_load(path.read_text())
    command = document["train"]["command"]
    document["localize"] = {"command": command, "env": {"FUSION_DD_DUMP_DIR": "{dump_dir}"}}
    path.write_text(yaml.safe_dump(document))
    assert str(DUMP_TRAIN) in command
    done = run_fusion_dd("search", "-c", str(path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    found = json.loads((tmp_path / "state" / "report.json").read_text())
    trials = started(tmp_path)
    everything = tuple(sorted(GRAPH[:12]))
    # After the two references: the same two configurations again, dumped by localize.command.
    assert [(entry[0], entry[1]) for entry in trials[2:4]] == [((), "localize"), (everything, "localize")]
    assert found["guide"]["dumps"]["trials"] == ["0003", "0004"]
    assert found["trainings"] == len(trials)  # the dumped references count


def test_a_resumed_search_never_compares_the_references_again(tmp_path: Path) -> None:
    """The journaled guide is replayed: with the references' dumps gone, resume still says the same."""
    import shutil


    path = write(tmp_path, budget=3)
    first = run_fusion_dd("search", "-c", str(path), cwd=tmp_path)
    assert first.returncode == 3, first.stderr  # the budget ran out after the references
    journal = tmp_path / "state" / "journal.jsonl"
    guides = [r for r in read_records(journal) if r.get("type") == "guide"]
    assert len(guides) == 1 and guides[0]["dumps"]["trials"] == ["0001", "0002"]
    assert guides[0]["dumps"]["compared"] > 0
    for trial in ("0001", "0002"):
        shutil.rmtree(tmp_path / "state" / "trials" / trial / "dump")
    resumed = run_fusion_dd("resume", "--state-dir", "state", "--budget", "60", "-c", str(path), cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert [r for r in read_records(journal) if r.get("type") == "guide"] == guides
    found = json.loads((tmp_path / "state" / "report.json").read_text())
    assert found["guide"]["dumps"]["trials"] == ["0001", "0002"] and found["status"] == "found"
