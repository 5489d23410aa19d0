"""The ``fusion-dd.yaml`` that ``fusion-dd demo`` writes for its built-in training.

The demo goes through the same config file, engine, trials, journal and report
as any search; writing the config out (into the demo's state directory) also
shows a newcomer a complete, working example to copy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ..backends.cann.autofuse import ENABLE, FLAGS_ENV
from ..config.settings import DEFAULT_CONFIG_NAME
from . import DEFAULT_SCENARIO, candidate_rules, train_command
from ..core.errors import UsageError
from ..core.rules import Section


#: Where the default scenario's demo search lives (the README's quick start shows it).
DEFAULT_DEMO_DIR = ".fusion-dd-demo"


def default_demo_dir(scenario: str) -> Path:
    """The state directory a scenario's demo uses without ``--state-dir``.

    One per scenario, so that trying the scenarios one after another resumes or
    shows each one's own search instead of meeting another scenario's journal
    (a different search definition, refused). The default scenario keeps the
    plain name.
    """
    return Path(DEFAULT_DEMO_DIR if scenario == DEFAULT_SCENARIO else f"{DEFAULT_DEMO_DIR}-{scenario}")


def write_demo_config(state_dir: Path, scenario: str, **options: Any) -> Path:
    """Write the demo's config into ``state_dir`` and return its path; ``options``: :func:`demo_document`'s."""
    return save_demo_config(state_dir, scenario, demo_document(scenario, **options))


def demo_document(
    scenario: str,
    *,
    steps: int | None = None,
    noise: float = 0.0,
    strategy: str | None = None,
    budget: int | None = None,
    localize: bool = True,
) -> dict:
    """The demo's config as a YAML document, written nowhere yet: checked before anything is written."""
    rules = candidate_rules(scenario)
    document = {
        "rules": {
            section.value: [rule.name for rule in rules if rule.section is section]
            for section in (Section.GRAPH, Section.UB, Section.AUTOFUSE)
            if section is not Section.AUTOFUSE or any(rule.section is section for rule in rules)
        },
        "train": {
            "command": train_command(scenario, steps=steps, noise=noise),
            "workdir": "{trial_dir}",
            "env": {"OPENBLAS_NUM_THREADS": "1"},
            "timeout": 300,
            "devices": [0, 1],
            "device_env": "ASCEND_DEVICE_ID",
        },
        "metric": {"pattern": r"accuracy[=:]\s*(\S+)", "goal": "max", "speed_pattern": r"speed (\S+) samples/s"},
        "search": {"budget": 200 if budget is None else budget},
        "state_dir": ".",
    }
    if any(rule.section is Section.AUTOFUSE for rule in rules):
        # The user's own AUTOFUSE_FLAGS: AutoFuse on, as the scenario's training was run.
        # Each trial's value is rendered from it (the candidate points set per trial).
        document["train"]["env"][FLAGS_ENV] = f"{ENABLE}=true"
    if localize:
        # The demo training dumps like CANN into FUSION_DD_DUMP_DIR (its scenario's dump
        # step), so the search ends by naming the op and layer each culprit broke.
        document["localize"] = {"env": {"FUSION_DD_DUMP_DIR": "{dump_dir}"}}
    if strategy is not None:
        document["search"]["strategy"] = strategy
    if noise > 0:
        # Noisy trainings: repeat the baseline so the report shows its spread and
        # near-threshold verdicts get a margin.
        document["score"] = {"baseline_repeats": 3}
    return document


def save_demo_config(state_dir: Path, scenario: str, document: dict) -> Path:
    """Write a demo config document (:func:`demo_document`) into ``state_dir`` and return its path."""
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{state_dir}: cannot create the demo's state directory ({exc})") from None
    path = state_dir / DEFAULT_CONFIG_NAME
    header = f"# Written by `fusion-dd demo --scenario {scenario}`: a complete fusion-dd.yaml to copy.\n"
    path.write_text(header + yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path
