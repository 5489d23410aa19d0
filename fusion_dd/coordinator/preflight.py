"""Pre-flight: can the training command run at all? Checked before the first training.

A training that cannot start costs nothing to detect here and hours to detect
later (a baseline that "fails" is otherwise taken for an answer about fusion).
So ``fusion-dd search --dry-run`` shows these checks, and ``fusion-dd search``
stops with status ``training_broken`` (exit 2) before launching anything when
one fails:

* the working directory trials will use exists (or is the trial directory,
  which fusion-dd creates);
* the program resolves: on ``PATH`` (the one the training will get), or as a
  relative path beside the config file or in the workdir, and is executable;
* a script argument that looks like a path (``*.py``, ``*.sh``) exists beside
  the config file or in the workdir (the same rule the launch applies, see
  :func:`fusion_dd.runner.trial.resolve_relative`).

Arguments built from a per-trial placeholder (``{trial_dir}/run.sh``) are not
checked: their files only exist once the trial does.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from ..config.settings import SearchConfig
from ..runner.trial import looks_like_script, resolve_relative, substitute

_PER_TRIAL = ("{trial_dir}", "{switch_file}", "{metrics_file}")


@dataclass
class PreflightResult:
    """What the checks found; ``errors`` are one line each, naming the config file and key."""

    argv: list[str]
    workdir: str
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


def trial_values(config: SearchConfig, device: tuple[str, ...] | None = None, number: int = 1) -> dict[str, str]:
    """Placeholder values of trial ``number`` (the first by default), as the launch would set them."""
    trial_id = f"{number:04d}"
    trial_dir = config.state_dir / "trials" / trial_id
    return {
        "switch_file": str(trial_dir / "fusion_switch.cfg"),
        "trial_dir": str(trial_dir),
        "metrics_file": str(trial_dir / "metrics.jsonl"),
        "device": ",".join(device or config.train.devices[0]),
        "trial_id": trial_id,
    }


def preflight(config: SearchConfig) -> PreflightResult:
    """Check the command the first trial would run; nothing is launched or written."""
    values = trial_values(config)
    trial_dir = Path(values["trial_dir"])
    raw_workdir = substitute(config.train.workdir, values)
    workdir = Path(os.path.expanduser(raw_workdir))
    if not workdir.is_absolute():
        workdir = config.base_dir / workdir
    workdir = Path(os.path.normpath(workdir))
    argv = resolve_relative([substitute(part, values) for part in config.train.command], config.base_dir)
    result = PreflightResult(argv=argv, workdir=str(workdir))
    source = config.source

    def error(key: str, problem: str) -> None:
        result.errors.append(f"{source}: {key}: {problem}")

    per_trial_workdir = workdir == trial_dir or trial_dir in workdir.parents
    if workdir == trial_dir:
        where = "in the trial directory (empty when the training starts)"
    else:
        where = f"in the workdir {workdir}"
    if trial_dir in workdir.parents:
        error("train.workdir", f"{workdir} will not exist: fusion-dd creates only the trial directory itself")
    elif not per_trial_workdir and not workdir.is_dir():
        error("train.workdir", f"directory not found: {workdir}")
    if result.errors:
        return result

    env_path = substitute(config.train.env.get("PATH", os.environ.get("PATH", os.defpath)), values)
    program, raw_program = argv[0], config.train.command[0]
    if not any(token in raw_program for token in _PER_TRIAL):
        if "/" not in program:
            found = shutil.which(program, path=env_path)
            if found is None:
                beside = config.base_dir / program
                hint = f"; a file {program} exists beside the config: write ./{program}" if beside.is_file() else ""
                error("train.command[0]", f"command not found: {program} (not on the training's PATH){hint}")
            else:
                result.notes.append(f"program {program}: {found}")
        else:
            path = Path(program) if os.path.isabs(program) else workdir / program
            if per_trial_workdir and not os.path.isabs(program):
                error("train.command[0]", f"{program} not found beside the config ({config.base_dir}) nor {where}")
            elif not path.exists():
                error("train.command[0]", f"{program} not found (looked beside the config, {config.base_dir}, and {where})")
            elif path.is_dir():
                error("train.command[0]", f"{path} is a directory, not a program")
            elif not os.access(path, os.X_OK):
                error("train.command[0]", f"permission denied: {path} is not executable (chmod +x, or run it through its interpreter)")
            else:
                result.notes.append(f"program {program}: found")
    for index, (raw, argument) in enumerate(zip(config.train.command, argv)):
        if index == 0 or any(token in raw for token in _PER_TRIAL) or not looks_like_script(argument):
            continue
        if os.path.isabs(argument):
            if not Path(argument).is_file():
                error(f"train.command[{index}]", f"script not found: {argument}")
            else:
                result.notes.append(f"script {raw}: {argument}")
            continue
        if per_trial_workdir or not (workdir / argument).is_file():
            error(
                f"train.command[{index}]",
                f"script {argument} not found beside the config ({config.base_dir}) nor {where}",
            )
        else:
            result.notes.append(f"script {raw}: {workdir / argument}")
    return result


#: Metrics that are better when higher: a search minimising one is almost surely misconfigured.
_HIGHER_IS_BETTER = re.compile(r"acc|top-?[15]|f1|bleu|rouge|auc|precision|recall|iou|\bmap\b|score|psnr|ssim", re.I)
#: Metrics that are better when lower.
_LOWER_IS_BETTER = re.compile(r"loss|error|\berr\b|perplexity|\bppl\b|\bwer\b|\bcer\b|mse|mae|rmse", re.I)


#: Keys of train: that only one launcher reads.
_LAUNCHER_KEYS = {"slurm": "slurm", "scheduler": "dask", "scheduler_file": "dask"}


def launcher_warnings(config: SearchConfig) -> list[str]:
    """``train.slurm`` or ``train.scheduler`` written, but another launcher runs the trainings.

    The usual cause is a forgotten ``train.launcher``: the trainings would then
    run on this machine instead of the cluster the section describes. A warning,
    not an error: a config may keep both, chosen per run with ``--launcher``.
    """
    document = config.document if isinstance(config.document, dict) else {}
    train = document.get("train") if isinstance(document.get("train"), dict) else {}
    launcher = config.train.launcher
    where = "on this machine (the local launcher)" if launcher == "local" else f"with the {launcher} launcher"
    return [
        f"{config.source}: train.{key} is set, but the trainings run {where}, which does not read it; "
        f"set train.launcher: {needs} (or --launcher {needs}) if they should run there"
        for key, needs in _LAUNCHER_KEYS.items()
        if key in train and launcher != needs
    ]


def goal_warnings(config: SearchConfig) -> list[str]:
    """``metric.goal`` against the metric's name: an accuracy minimised, a loss maximised.

    The name is ``metric.pattern`` when the metric is read from the log, else
    ``metric.key`` of the metrics file. A warning, not an error: a metric may be
    named against its sense (an "accuracy_drop" is better when lower).
    """
    metric = config.metric
    name = metric.pattern if metric.pattern is not None else metric.key
    if metric.goal == "min" and _HIGHER_IS_BETTER.search(name) and not _LOWER_IS_BETTER.search(name):
        wanted = "max"
    elif metric.goal == "max" and _LOWER_IS_BETTER.search(name) and not _HIGHER_IS_BETTER.search(name):
        wanted = "min"
    else:
        return []
    source = "metric.pattern" if metric.pattern is not None else "metric.key"
    better = "higher" if wanted == "max" else "lower"
    return [
        f"{config.source}: metric.goal: {metric.goal}, but the metric ({source} '{name}') is named like one "
        f"where {better} is better; if so, set metric.goal: {wanted}"
    ]
