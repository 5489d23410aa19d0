"""A search over the dumping fake training (tests/fakes/dump_train.py), for localization and the guide.

Four layers; ``SINGLE`` breaks layer_1 alone and the ``PAIR`` breaks layer_3
together; ``FUSION_DD_DUMP_DIR`` (``LOCALIZE``) makes every trial dump each
layer as ``.npy``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

from tests.support import FAKES
from tests.support.cli import GRAPH
from tests.support.journal_configs import decoded

DUMP_TRAIN = FAKES / "dump_train.py"
SINGLE = GRAPH[5]  # breaks layer_1 alone
PAIR = (GRAPH[2], GRAPH[9])  # break layer_3 together
LOCALIZE = {"env": {"FUSION_DD_DUMP_DIR": "{dump_dir}"}}


def write(
    tmp_path: Path, *, budget: int = 60, localize: dict | None = LOCALIZE, name: str = "fusion-dd.yaml", guide: str | None = None
) -> Path:
    document = {
        "rules": {"GraphFusion": GRAPH[:12]},
        "train": {
            "command": [
                sys.executable, str(DUMP_TRAIN), "--dump-log", str(tmp_path / "dumps.log"),
                "--breaks", f"{SINGLE}@1", "--breaks", f"{PAIR[0]}+{PAIR[1]}@3",
            ],
            "devices": [0, 1],
            "timeout": 60,
        },
        "metric": {"pattern": r"accuracy[=:]\s*(\S+)"},
        "search": {"budget": budget} | ({"guide": guide} if guide else {}),
        "state_dir": "state",
    }  # fmt: skip
    if localize is not None:
        document["localize"] = localize
    path = tmp_path / name
    path.write_text(yaml.safe_dump(document))
    return path


def started(tmp_path: Path) -> list[tuple[tuple[str, ...], str, int]]:
    lines = (tmp_path / "state" / "journal.jsonl").read_text().splitlines()
    records = decoded(json.loads(line) for line in lines)
    return [(tuple(r["config"]), r["role"], r["repeat"]) for r in records if r.get("type") == "trial_started"]
