"""A search over the fake training through the CLI: its config, its candidates, its launches.

``write_config`` is the config most CLI tests start from: 24 GraphFusion and 6
UBFusion rules of CANN's catalog, the fake training on two devices, the launch
log the fake writes (``launches`` reads it back).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from fusion_dd.core.rules import catalog
from tests.support.fake_training import FAKE_TRAIN, fake_command, read_launches, start_fusion_dd, wrapper_script

# Named here rather than taken from the head of the catalog: the fake training seeds its noise
# and flaky schedules with the names switched on, so a catalog that grows must not change them.
GRAPH = [
    "AAAAAASwinAttentionScoreFusionPass", "AABiasaddConvFusion", "AAMatMulNzToNdFusionPass",
    "AASquareSumMaximumRsqrtMulFusionPass", "AArgMaxV2FusionPass", "ABatchnormFusionPass",
    "AConcatV2MeanMulGatherV2FusionPass", "AConv2dMulFusion", "AConv2dbackpropFusionPass",
    "ADeconvGroupFusionPass", "ADeformableConv2dPass", "ADepthwiseFusionPass", "AFullyConnectionReshapePass",
    "ALSTMFusionPass", "APadDRemoveFusionPass", "AReduceAllFusionPass", "AReduceAnyFusionPass",
    "AReduceMaxFusionPass", "AReduceMeanFusionPass", "AReduceMinFusionPass", "AReduceProdFusionPass",
    "AReduceSumFusionPass", "ARefreshCubeC0FusionPass", "ARemoveNodeFusionPass",
]
UB = [
    "ATbeMatmulElemwiseFusionPass", "AutomaticUbFusion", "BNUpdateEltwiseEltwiseFusionPass",
    "BNUpdateEltwiseFusionPass", "BatchMatmulConfusiontransposeUbFusion", "BatchMatmulDropOutDoMaskV3DFusionPass",
]
assert all(catalog().get(name) is not None for name in GRAPH + UB), "the CLI tests' rules must be real catalog names"
CULPRIT = GRAPH[13]


def write_config(tmp_path: Path, *train_args: str, budget: int = 100, **sections) -> Path:
    """``tmp_path/fusion-dd.yaml``: the fake training with ``train_args``; ``sections`` update the rest."""
    document = {
        "rules": {"GraphFusion": GRAPH, "UBFusion": UB},
        "train": {
            "command": fake_command("--launch-log", "launch.log", *train_args),
            "devices": [0, 1],
            "timeout": 120,
        },
        "metric": {"pattern": r"accuracy[=:]\s*(\S+)"},
        "search": {"budget": budget},
    }
    for key, value in sections.items():
        document.setdefault(key, {}).update(value)
    path = tmp_path / "fusion-dd.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def wrap_fake_train(tmp_path: Path, name: str, prelude: str, *train_args: str) -> Path:
    """A config whose training is the fake training behind ``prelude``: Python lines that run
    first in the same process (and may exit), to make some trials misbehave."""
    wrapper = wrapper_script(tmp_path / name, prelude)
    config = write_config(tmp_path, *train_args)
    document = yaml.safe_load(config.read_text())
    command = document["train"]["command"]
    command[command.index(str(FAKE_TRAIN))] = str(wrapper)
    config.write_text(yaml.safe_dump(document))
    return config


def start_search(tmp_path: Path, output: int) -> subprocess.Popen[str]:
    """`fusion-dd search` in the background, for tests that signal or kill the coordinator."""
    return start_fusion_dd(tmp_path, "search", stdout=output, stderr=output)


def launches(tmp_path: Path) -> list[tuple[tuple[str, ...], int]]:
    """(rules on, repeat) of every training the fake logged in ``tmp_path/launch.log``, in order."""
    return read_launches(tmp_path / "launch.log")
