"""CANN artifacts written by hand, and a training whose compiler obeys (or ignores) its switch file."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from tests.support import FAKES

GRAPH_RULES = ["ConvToFullyConnectionFusionPass", "ARefreshCubeC0FusionPass", "FixPipeAbilityProcessPass"]
UB_RULE = "TbeEltwiseFusionPass"


def fusion_result(path: Path, fired: dict[str, str]) -> None:
    """A fusion_result.json in CANN's format: counts as strings, one key per graph."""
    graph, ub = {}, {}
    for name, section in fired.items():
        stats = {"match_times": "1", "effect_times": "1"}
        if section == "UBFusion":
            ub[name] = {**stats, "repository_hit_times": "0"}
        else:
            graph[name] = stats
    path.write_text(json.dumps({"session_and_graph_id_0_0": {"graph_fusion": graph, "ub_fusion": ub}}))


# The fake training's own reader of the switch file (tests/fakes/fake_train.py): a
# training script imports it with these lines instead of fusion-dd's reader, so it
# starts as a bare interpreter and reads what fusion-dd wrote independently of it.
READ_SWITCH = f"import sys; sys.path.insert(0, {str(FAKES)!r}); from fake_train import load_switch\n"

# A training that reports what its compiler fused; with --ignore-switch it fuses
# everything whatever the switch file says (the wiring bug fusion-dd must catch).
OBEDIENT_TRAINING = READ_SWITCH + textwrap.dedent(
    """
    import json, os, sys
    rules = json.loads(sys.argv[1])
    switch = load_switch(os.environ["FUSION_DD_SWITCH_FILE"])
    on = {name: section for name, section in rules.items()
          if "--ignore-switch" in sys.argv or switch.state(name, section) is not False}
    graph = {n: {"match_times": "1", "effect_times": "1"} for n, s in on.items() if s == "GraphFusion"}
    ub = {n: {"match_times": "5", "effect_times": "5", "repository_hit_times": "0"}
          for n, s in on.items() if s == "UBFusion"}
    # --shape=list|flat: the other two shapes CANN writes (a training's many graphs, atc's one graph);
    # --result-name=NAME: the file under another name, to be found by its content.
    options = dict(arg[2:].split("=", 1) for arg in sys.argv if arg.startswith(("--shape=", "--result-name=")))
    shape = options.get("shape", "keyed")
    if shape == "list":
        document = [{"graph_fusion": graph, "session_and_graph_id": "10_10"},
                    {"graph_fusion": {}, "ub_fusion": ub, "session_and_graph_id": "11_11"}]
    elif shape == "flat":
        document = {"graph_fusion": graph, "session_and_graph_id": "0_0", "ub_fusion": ub}
    else:
        document = {"session_and_graph_id_0_0": {"graph_fusion": graph, "ub_fusion": ub}}
    with open(os.path.join(os.environ["FUSION_DD_TRIAL_DIR"], options.get("result-name", "fusion_result.json")), "w") as f:
        json.dump(document, f)
    pair = "ConvToFullyConnectionFusionPass" in on and "TbeEltwiseFusionPass" in on
    print("accuracy: %s" % (0.5 if "FixPipeAbilityProcessPass" in on or pair else 0.9))
    """
)
