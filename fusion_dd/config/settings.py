"""``fusion-dd.yaml`` -> a typed, validated ``SearchConfig``.

Every problem is reported before anything is launched, as one line that names the
file and the key (``fusion-dd.yaml: train.timeout: must be a positive number``),
because a mistake found after the baseline training has cost hours.
"""

from __future__ import annotations

import difflib
import math
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from ..runner.early_stop import EarlyStopRule
from ..core.errors import UsageError
from ..runner.metrics import DEFAULT_LOSS_PATTERN
from ..core.rules import AUTOFUSE_POINTS, Rule, Section, name_problem
from ..core.safe_read import SMALL_FILE_BYTES, read_text, too_deep
from ..core.scoring import Tolerance
from ..backends.cann.switch import SwitchFile, exceptional_passes, load_switch_file
from ..backends.rules_section import CANN_KEYS
from .schema import INTERNAL, NESTED, section_keys

DEFAULT_CONFIG_NAME = "fusion-dd.yaml"
#: The two reference trainings and at least one more: a smaller budget can never answer.
MIN_BUDGET = 3
#: What a state directory may hold before fusion-dd has journaled anything in it.
UNKNOWN_POLICIES = ("error", "warn", "ignore")
#: Unknown rule names shown one per line under ``rules.unknown: warn``; the rest are counted.
UNKNOWN_SHOWN = 10
# Device ids end up in environment variables and command lines: numbers, names,
# GPU/MIG UUIDs ("MIG-GPU-.../1/0"); never white space, separators or NUL.
_DEVICE_ID = re.compile(r"[A-Za-z0-9_.:/-]+")
_STATE_FILES = {"journal.jsonl", "lock", "report.json", "fusion_switch.cfg", "trials", "closure", "closure.json", "from_all_on.json",
                "ort_disabled_optimizers.txt", "xla_disabled_passes.txt", "search_id.json"}

DEFAULT_LOG_LIMIT = 100 * 2**20
_LOG_LIMIT_MIN = 64 * 2**10
_SIZE_UNITS = {"": 1, "b": 1, "kb": 2**10, "kib": 2**10, "mb": 2**20, "mib": 2**20, "gb": 2**30, "gib": 2**30}


def _read_size(reader: Any, value: Any, key: str) -> int | None:
    """A size in bytes: a whole number, or a string such as ``"100MB"`` (KB/MB/GB are powers of 1024); null: none."""
    if value is None:
        return None
    number: float | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str):
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", value)
        if match and match.group(2).lower() in _SIZE_UNITS:
            number = float(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]
    if number is None:
        raise reader.error(key, f"must be a size such as 100MB or a number of bytes, or null for no limit; got {value!r}")
    if number < _LOG_LIMIT_MIN:
        raise reader.error(key, f"must be at least 64KB, got {value!r}")
    return int(number)


@dataclass(frozen=True)
class TrainConfig:
    command: tuple[str, ...]
    workdir: str = "."
    env: Mapping[str, str] = field(default_factory=dict)
    timeout: float | None = 14400.0
    devices: tuple[tuple[str, ...], ...] = (("0",),)
    device_env: str = "ASCEND_DEVICE_ID"
    kill_grace: float = 10.0
    retries: int = 1
    # The most output.log may hold per training (bytes; None: no cap): head and tail kept, the cut marked.
    log_limit: int | None = DEFAULT_LOG_LIMIT
    # Where trainings run: "local" (supervised processes here) or "dask" (one task per
    # trial on a dask.distributed cluster, fusion_dd.runner.dask_launcher). Not part of the
    # search's definition: a search may move between them on resume.
    launcher: str = "local"
    scheduler: str | None = None
    # False when train.devices was not written: the dask launcher then uses every
    # worker that offers a device, instead of only the listed ones.
    devices_given: bool = field(default=True, metadata=INTERNAL)
    # dask's scheduler file (written by `dask scheduler --scheduler-file`), beside the address.
    scheduler_file: str | None = None
    # train.launcher: slurm (each training its own Slurm job, fusion_dd.runner.slurm_launcher).
    slurm: "SlurmConfig" = field(default_factory=lambda: SlurmConfig(), metadata=NESTED)


@dataclass(frozen=True)
class SlurmConfig:
    """``train.slurm:``: what each training's Slurm job asks for (``sbatch`` options).

    ``time`` is Slurm's own format (minutes, ``H:MM:SS``, ``D-HH``); None means
    ``train.timeout`` plus ``kill_grace`` plus a margin, so that a training's own
    timeout, not the walltime, ends it. ``max_jobs`` is how many trainings are
    submitted at once (the search's parallelism). ``extra`` lines go into the job
    script as they are (``--constraint=a100`` or ``#SBATCH --constraint=a100``).
    """

    partition: str | None = None
    gres: str | None = None
    time: str | None = None
    cpus_per_task: int | None = None
    mem: str | None = None
    account: str | None = None
    qos: str | None = None
    extra: tuple[str, ...] = ()
    max_jobs: int = 4


@dataclass(frozen=True)
class LocalizeConfig:
    """``localize:``: how a training is made to dump tensors, for localization after a search.

    A localization training is the training command plus ``args`` (or the
    separate ``command`` plus ``args``), with ``env`` on top of ``train.env``;
    all may use ``{dump_dir}`` (the trial's ``dump/`` directory). ``step``
    chooses the dumped step to compare (default: the first one in the dump);
    ``graphs`` are the GE graph dumps of each run, relative to the trial
    directory, placeholders allowed (default: any ``ge_proto_*_Build.txt`` in the
    dump directory; none is fine, tensors then pair by name).
    """

    env: Mapping[str, str] = field(default_factory=dict)
    args: tuple[str, ...] = ()
    command: tuple[str, ...] | None = None
    step: int | None = None
    graphs: tuple[str, ...] | None = None


@dataclass(frozen=True)
class MetricConfig:
    pattern: str | None = None
    key: str = "accuracy"
    goal: str = "max"
    loss_pattern: str | None = DEFAULT_LOSS_PATTERN.pattern
    # The training's own throughput (samples/s ...) in its output; only reported, never part of a
    # verdict, so not part of the search's definition and free to change on resume.
    speed_pattern: str | None = None


@dataclass(frozen=True)
class FixConfig:
    """Which fix to hand over when several switch off equally few rules.

    ``prefer: cheapest`` (the default) takes the search's own choice, which costs
    no training more; ``speed`` trains up to ``max_alternatives`` other
    minimum fixes in full and hands over the fastest that passes. Not part of
    the definition: it decides nothing the search asks.
    """

    prefer: str = "cheapest"
    max_alternatives: int = 3


@dataclass(frozen=True)
class ScoreConfig:
    tolerance: Tolerance = Tolerance("auto")
    crash_is_failure: bool = False
    baseline_repeats: int = 1
    all_on_repeats: int = 1
    strict: bool = False
    reference: float | None = None
    baseline_metric: float | None = None
    all_on_metric: float | None = None
    margin: float | None = None  # None = auto: 2 standard deviations of repeated baselines, else 0


@dataclass(frozen=True)
class SearchSettings:
    strategy: str
    budget: int = 200
    confirm: str = "auto"  # how hard the noise layer checks verdicts: auto | strict | off
    max_trainings: int = 7  # trainings of one configuration, the first included
    fix_trainings: int = 2  # agreeing trainings "verified" needs on a run that showed no noise
    # The prior of the guided search (fusion_dd.search.guided): "dumps" ranks the rules by the
    # references' tensor dumps (needs localize:), "none" does not; None until resolved.
    guide: str = "none"
    suspects: tuple[str, ...] = ()  # rule names the user suspects, asked first


@dataclass(frozen=True)
class SearchConfig:
    """Everything a search needs, resolved: paths are absolute, rules have sections."""

    source: Path
    rules: tuple[Rule, ...]
    base_cfg: SwitchFile | None
    base_cfg_path: Path | None
    train: TrainConfig
    metric: MetricConfig
    score: ScoreConfig
    search: SearchSettings
    state_dir: Path
    base_dir: Path
    document: Any = None  # the parsed YAML, kept in the journal so that resume needs no config file
    early_stop: Any = None  # EarlyStopRule; like timeouts it may change on resume
    warnings: tuple[str, ...] = ()  # name problems worth telling the user before hours of training
    graphs: tuple[str, ...] = ()  # graph dumps of the all-on run, to name each culprit's layers
    # How trainings dump tensors for localization after a search; None: no localization.
    # Not part of the definition: changing it never invalidates finished trainings.
    localize: LocalizeConfig | None = None
    fix: FixConfig = FixConfig()
    compiler: str = "cann"  # rules.compiler: which compiler backend renders and checks the switches
    closure: bool = False  # rules.closure: add what fires in the all-off baseline before searching
    from_all_on: bool = False  # rules.from: all_on: the candidates are what fires in one all-on training

    def definition(self) -> dict[str, Any]:
        """What makes two searches the same search, for the journal and resume.

        Budget, devices and timeouts are left out on purpose: a user may change
        them when resuming without invalidating finished trainings.
        """
        base = None
        if self.base_cfg is not None:
            base = {
                section.value: dict(entries)
                for section, entries in self.base_cfg.entries.items()
            }
        definition: dict[str, Any] = {
            "rules": [rule.to_json() for rule in self.rules],
            "base_cfg": base,
            "command": list(self.train.command),
            "workdir": self.train.workdir,
            "env": dict(sorted(self.train.env.items())),
            "metric": {
                "pattern": self.metric.pattern,
                "key": self.metric.key,
                "goal": self.metric.goal,
                "loss_pattern": self.metric.loss_pattern,
            },
            "score": {
                "tolerance": self.score.tolerance.describe(),
                "crash_is_failure": self.score.crash_is_failure,
                "baseline_repeats": self.score.baseline_repeats,
                "all_on_repeats": self.score.all_on_repeats,
                "strict": self.score.strict,
                "reference": self.score.reference,
                "baseline_metric": self.score.baseline_metric,
                "all_on_metric": self.score.all_on_metric,
                "margin": self.score.margin,
            },
            "strategy": self.search.strategy,
            "noise": {"confirm": self.search.confirm, "max_trainings": self.search.max_trainings},
        }
        if self.search.fix_trainings != SearchSettings.fix_trainings:
            # How many trainings of the fix are asked; the default leaves definitions (and journals) as they were.
            definition["noise"]["fix_trainings"] = self.search.fix_trainings
        if self.compiler != "cann":  # CANN's definitions (and so its journals) stay as they were
            definition["compiler"] = self.compiler
        if self.base_cfg is not None:
            # Priority and ExceptionalPassOfO1Level go into every trial's file too. Recorded (empty
            # included) for every search with a base cfg, so that adding them later is a change;
            # a search journaled before the key existed is not held to it (definition_changes).
            definition["base_cfg_extra"] = dict(sorted(self.base_cfg.extra.items()))
        if self.fix.prefer != FixConfig.prefer:
            # Which fix is handed over, and which alternatives are trained for it; the default leaves
            # definitions (and so journals) as they were.
            definition["fix"] = {"prefer": self.fix.prefer, "max_alternatives": self.fix.max_alternatives}
        return definition

    def with_overrides(
        self,
        *,
        budget: int | None = None,
        devices: tuple[tuple[str, ...], ...] | None = None,
        state_dir: Path | None = None,
        launcher: str | None = None,
        scheduler: str | None = None,
    ) -> "SearchConfig":
        """Apply command-line overrides (``--budget``, ``--devices``/``--jobs``, ``--state-dir``,
        ``--launcher``/``--scheduler``)."""
        config = self
        if budget is not None:
            if budget < MIN_BUDGET:
                raise UsageError(
                    f"--budget: must be at least {MIN_BUDGET} (the two reference trainings and one more), got {budget}"
                )
            config = replace(config, search=replace(config.search, budget=budget))
        if devices is not None:
            config = replace(config, train=replace(config.train, devices=devices, devices_given=True))
        if launcher is not None or scheduler is not None:
            config = replace(config, train=_launcher_choice(config.train, launcher, scheduler))
        if state_dir is not None:
            check_state_dir(state_dir.resolve(), "--state-dir", config.source)
            config = replace(config, state_dir=state_dir.resolve())
        return config

    def with_started_defaults(self, definition: Mapping[str, Any] | None) -> "SearchConfig":
        """A ``search.max_trainings`` the config leaves at its default takes the value the search started with.

        A default that changed between versions (``search.max_trainings``: 5 in
        0.1.0, 7 since) must neither refuse the resume of a search started under
        the old one ("changed definition") nor make a replay ask other questions.
        A value the user writes in the config is theirs and is compared as before.
        """
        noise = (definition or {}).get("noise")
        written = self.document.get("search") if isinstance(self.document, dict) else None
        written = written if isinstance(written, dict) else {}
        if not isinstance(noise, dict):
            return self
        started = noise.get("max_trainings")
        if "max_trainings" in written or not isinstance(started, int) or started < 1:
            return self
        return replace(self, search=replace(self.search, max_trainings=started))


# Every key a fusion-dd.yaml may hold, so that a typo is reported with a suggestion: from the
# dataclasses of the sections (fusion_dd.config.schema). ``rules:`` is read by the compiler's
# backend and has keys of its own; early_stop by EarlyStopRule.from_config.
_RULES_KEYS = ("compiler", "names", "closure", "from", "keep_unfired", "unknown", *CANN_KEYS)
_SCHEMA: dict[str, Any] = {
    "rules": dict.fromkeys(_RULES_KEYS),
    "train": section_keys(TrainConfig),
    "metric": section_keys(MetricConfig),
    "score": section_keys(ScoreConfig),
    "search": section_keys(SearchSettings),
    "early_stop": None,
    "fix": section_keys(FixConfig),
    "localize": section_keys(LocalizeConfig),
    "state_dir": None,
}


class _Reader:
    """Typed access to the YAML mapping with errors that name file and key."""

    def __init__(self, source: Path) -> None:
        self.source = source

    def error(self, key: str, problem: str) -> UsageError:
        return UsageError(f"{self.source}: {key}: {problem}")

    def check_keys(self, mapping: Mapping[str, Any], schema: Mapping[str, Any], prefix: str) -> None:
        for key in mapping:
            if not isinstance(key, str) or key not in schema:
                path = f"{prefix}{key}"
                close = difflib.get_close_matches(str(key), list(schema), n=1)
                hint = f"; did you mean '{prefix}{close[0]}'?" if close else ""
                allowed = ", ".join(schema)
                raise UsageError(
                    f"{self.source}: {path}: unknown key{hint} (allowed here: {allowed})"
                )

    def mapping(self, value: Any, key: str) -> Mapping[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise self.error(key, f"must be a mapping, got {type(value).__name__}")
        return value

    def number(self, value: Any, key: str, *, positive: bool = False, unit: str = "") -> float:
        """A finite number; ``unit`` (e.g. "seconds, e.g. 14400 for 4 hours") follows the error, for
        values such as ``4h`` that a user may write for a duration."""
        hint = f" ({unit})" if unit else ""
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise self.error(key, f"must be a number{hint}, got {value!r}")
        if positive and value <= 0:
            raise self.error(key, f"must be a positive number{hint}, got {value!r}")
        return float(value)

    def integer(self, value: Any, key: str, *, minimum: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(key, f"must be a whole number, got {value!r}")
        if value < minimum:
            raise self.error(key, f"must be at least {minimum}, got {value}")
        return value

    def boolean(self, value: Any, key: str) -> bool:
        if not isinstance(value, bool):
            raise self.error(key, f"must be true or false, got {value!r}")
        return value

    def string(self, value: Any, key: str) -> str:
        if not isinstance(value, str) or not value:
            raise self.error(key, f"must be a non-empty string, got {value!r}")
        return value


class _DuplicateKeyError(Exception):
    def __init__(self, key: Any, line: int) -> None:
        super().__init__(key)
        self.key = key
        self.line = line


# libyaml's parser when PyYAML has it (its wheels do): 25 times faster on a list of
# 1,024 rule names, which was a quarter of a search's start; it limits nesting depth too.
_SAFE_LOADER: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _StrictLoader(_SAFE_LOADER):  # type: ignore[misc, valid-type]
    """SafeLoader that refuses duplicate keys: PyYAML silently keeps the last one,
    which would hide a mistake such as two ``devices`` lines."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise _DuplicateKeyError(key, key_node.start_mark.line + 1)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_config(path: Path, *, own_state_dir: bool = True) -> SearchConfig:
    """Read and validate a config file.

    ``own_state_dir``: False when the command line gives the state directory, so that
    the config's own ``state_dir``, never used, is not refused for what it holds.
    """
    path = Path(path)
    return parse_config(_load_document(path), path, own_state_dir=own_state_dir)


def config_state_dir(path: Path) -> Path:
    """The state directory a config file names, read without validating the rest of the file.

    ``resume``, ``status``, ``report`` and ``localize`` run on the config journaled
    with the search: the file in the working directory only says where that search
    is. A file edited since (a new key, a rules file not written yet) must not keep
    a user from looking at or continuing the search it started.
    """
    path = Path(path)
    reader = _Reader(path)
    document = _sections(reader, _load_document(path))
    raw = document.get("state_dir", ".fusion-dd")
    return (path.resolve().parent / reader.string(raw, "state_dir")).resolve()


def _sections(reader: "_Reader", document: Any) -> Mapping[str, Any]:
    """A config document's top level: a mapping of sections (an empty file is an empty one)."""
    if document is None:
        return {}
    if not isinstance(document, Mapping):
        raise UsageError(f"{reader.source}: the top level must be a mapping of sections")
    return document


def _load_document(path: Path) -> Any:
    """A config file's YAML document, or one error line naming the file (and line) and the fix."""
    if not path.exists():
        raise UsageError(
            f"{path}: config file not found; write one (fusion-dd init, or see "
            "docs/configuration.md) or pass -c/--config"
        )
    text = read_text(path, "config file", SMALL_FILE_BYTES)  # not a FIFO, not /dev/zero
    try:
        document = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except RecursionError:
        raise too_deep(str(path), "config file") from None
    except _DuplicateKeyError as exc:
        raise UsageError(f"{path}:{exc.line}: duplicate key {exc.key!r}; YAML would silently keep the last one") from None
    except yaml.YAMLError as exc:
        if "maximum nesting depth" in str(getattr(exc, "problem", "")):  # libyaml's own limit
            raise too_deep(str(path), "config file") from None
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        line = text.splitlines()[mark.line] if mark is not None and mark.line < len(text.splitlines()) else ""
        raise UsageError(f"{path}{where}: not valid YAML ({problem}){_yaml_fix(problem, line)}") from None
    return document


def _yaml_fix(problem: str, line: str) -> str:
    """The fix of the two YAML mistakes a config's regexes and indentation make most."""
    if "unknown escape character" in problem:
        # metric.pattern: "accuracy: (\S+)" -- a backslash in double quotes is a YAML escape.
        return "; a regex in double quotes needs every backslash doubled: write it in single quotes, e.g. 'accuracy\\s*[=:]\\s*(\\S+)'"
    if "\t" in line and "cannot start any token" in problem:
        return "; a tab: YAML indents with spaces only"
    return ""



def parse_started_config(start: Mapping[str, Any], state_dir: Path) -> SearchConfig:
    """The config a ``search_started`` record journaled, parsed as it was written then.

    Its state directory is ``state_dir``, the one the journal is in, whatever the
    document says: the search may have been moved (``--restart`` moves it aside)
    or started with ``--state-dir``, so the document's own value is not checked.
    """
    source = Path(start.get("config_path", state_dir / DEFAULT_CONFIG_NAME))
    return parse_config(start.get("config_document"), source, own_state_dir=False)

def parse_config(document: Any, source: Path, *, own_state_dir: bool = True) -> SearchConfig:
    """Validate a parsed YAML document; ``source`` names it and anchors relative paths (``own_state_dir``:
    as for :func:`load_config`)."""
    reader = _Reader(Path(source))
    source = Path(source).resolve()
    document = _sections(reader, document)
    reader.check_keys(document, _SCHEMA, "")
    for section, keys in _SCHEMA.items():
        if keys is not None and section != "localize":  # localize: may be a bare true (fusion_dd localize)
            reader.check_keys(reader.mapping(document.get(section), section), keys, f"{section}.")
    base_dir = source.parent

    rules_section = reader.mapping(document.get("rules"), "rules")
    compiler = _read_compiler(reader, rules_section)
    if compiler == "cann":
        base_cfg_path, base_cfg = _read_base_cfg(reader, rules_section, base_dir)
        rules, warnings = _read_rules(reader, rules_section, base_dir)
        _refuse_rules_kept_on(reader, base_cfg, rules)
        graphs = _read_graphs(reader, rules_section, base_dir)
        warnings = (*warnings, *_graphs_not_found(graphs))
    else:
        from ..backends.rules_section import read_compiler_rules

        base_cfg_path, base_cfg, graphs = None, None, ()
        rules, warnings = read_compiler_rules(reader, rules_section, base_dir, compiler)
    # ONNX Runtime and XLA run mostly on GPUs (or CPUs, where the variable is harmless).
    device_env = "ASCEND_DEVICE_ID" if compiler == "cann" else "CUDA_VISIBLE_DEVICES"
    train = _read_train(reader, reader.mapping(document.get("train"), "train"), device_env)
    metric = _read_metric(reader, reader.mapping(document.get("metric"), "metric"))
    score = _read_score(reader, reader.mapping(document.get("score"), "score"))
    search = _read_search(reader, reader.mapping(document.get("search"), "search"))
    try:
        early_stop = EarlyStopRule.from_config(document.get("early_stop"))
    except UsageError as exc:
        raise UsageError(f"{reader.source}: {exc}") from None
    localize = _read_localize(reader, document.get("localize"))
    fix = _read_fix(reader, reader.mapping(document.get("fix"), "fix"))
    search = _read_guide(reader, reader.mapping(document.get("search"), "search"), search, rules, localize)
    state_dir_raw = document.get("state_dir", ".fusion-dd")
    state_dir = (base_dir / reader.string(state_dir_raw, "state_dir")).resolve()
    if own_state_dir:
        check_state_dir(state_dir, f"{reader.source}: state_dir", source)
    return SearchConfig(
        source=source,
        rules=rules,
        base_cfg=base_cfg,
        base_cfg_path=base_cfg_path,
        train=train,
        metric=metric,
        score=score,
        search=search,
        state_dir=state_dir,
        base_dir=base_dir,
        document=document,
        warnings=warnings,
        graphs=graphs,
        early_stop=early_stop,
        localize=localize,
        fix=fix,
        compiler=compiler,
        closure=reader.boolean(rules_section.get("closure", False), "rules.closure"),
        from_all_on=rules_section.get("from") == "all_on",
    )


def _read_fix(reader: _Reader, section: Mapping[str, Any]) -> FixConfig:
    prefer = section.get("prefer", "cheapest")
    if prefer not in ("cheapest", "speed"):
        raise reader.error(
            "fix.prefer", f"{prefer!r} is not valid; use cheapest (no extra training) or speed (train the alternatives)"
        )
    count = reader.integer(section.get("max_alternatives", 3), "fix.max_alternatives", minimum=1)
    return FixConfig(prefer=prefer, max_alternatives=count)


def _read_compiler(reader: _Reader, section: Mapping[str, Any]) -> str:
    """``rules.compiler``: cann (default), onnxruntime or xla; ``rules.names`` belongs to the last two."""
    from ..backends import COMPILERS

    compiler = section.get("compiler", "cann")
    if compiler not in COMPILERS:
        close = difflib.get_close_matches(str(compiler), COMPILERS, n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        raise reader.error("rules.compiler", f"unknown compiler {compiler!r}; {hint}choose one of {', '.join(COMPILERS)}")
    if compiler == "cann" and section.get("names") is not None:
        raise reader.error(
            "rules.names",
            "is the candidate list of rules.compiler: onnxruntime or xla; CANN's rules go under "
            "rules.GraphFusion / rules.UBFusion (or set rules.compiler)",
        )
    return str(compiler)


def check_state_dir(path: Path, key: str, config_source: Path | None = None) -> None:
    """Refuse a state directory that would mix fusion-dd's files with someone else's.

    The state directory receives a journal, trial directories and reports, and
    ``--restart``-like clean-ups may move it: a filesystem root, the home
    directory, or a non-empty directory that holds no fusion-dd search
    (``journal.jsonl``) must never be one. The config file itself may live there
    (``fusion-dd demo`` writes its config into its state directory).
    """
    path = Path(path)
    if path == path.parent:
        raise UsageError(f"{key}: {path} is a filesystem root; give a directory of its own, e.g. .fusion-dd")
    try:
        home = Path.home().resolve()
    except (RuntimeError, KeyError, OSError):
        home = None
    if home is not None and path == home:
        raise UsageError(f"{key}: {path} is the home directory; give a directory of its own, e.g. .fusion-dd")
    if path.exists() and not path.is_dir():
        raise UsageError(f"{key}: {path} is not a directory")
    if not path.is_dir() or (path / "journal.jsonl").exists():
        return
    try:
        entries = {entry.name for entry in path.iterdir()}
    except OSError as exc:
        raise UsageError(f"{key}: cannot read {path} ({exc.strerror or exc})") from None
    allowed = set(_STATE_FILES)
    if config_source is not None and Path(config_source).parent == path:
        allowed.add(Path(config_source).name)
    foreign = sorted(entries - allowed)
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise UsageError(
            f"{key}: {path} is not empty ({shown}) and holds no fusion-dd search (no journal.jsonl); "
            "give a new or empty directory, e.g. .fusion-dd"
        )


def _check_placeholders(reader: _Reader, text: str, key: str, dumps: bool = False) -> None:
    """An unknown ``{name}`` is a typo (``{swich_file}``) that would reach the training literally.

    ``dumps``: a ``localize.*`` value, where ``{dump_dir}`` is known too.
    """
    from ..runner.trial import DUMP_PLACEHOLDERS, PLACEHOLDERS, unknown_placeholders

    if "\x00" in text:
        raise reader.error(key, "contains a NUL character, which no command line or environment can carry")
    names = list(PLACEHOLDERS) + (list(DUMP_PLACEHOLDERS) if dumps else [])
    unknown = unknown_placeholders(text, names)
    if unknown:
        name = unknown[0]
        close = difflib.get_close_matches(name, names, n=1)
        hint = f"did you mean {{{close[0]}}}? " if close else ""
        if name in DUMP_PLACEHOLDERS:
            hint = "it exists only in the localize: section (localization trainings dump, others must not); "
        known = ", ".join(f"{{{known}}}" for known in names)
        raise reader.error(
            key,
            f"unknown placeholder {{{name}}}; {hint}(known: {known}; write {{{{{name}}}}} for a literal {{{name}}})",
        )


def _read_base_cfg(
    reader: _Reader, rules_section: Any, base_dir: Path
) -> tuple[Path | None, SwitchFile | None]:
    if not isinstance(rules_section, Mapping) or rules_section.get("base_cfg") is None:
        return None, None
    raw = reader.string(rules_section["base_cfg"], "rules.base_cfg")
    path = (base_dir / raw).resolve()
    if not path.is_file():
        raise reader.error("rules.base_cfg", f"file not found: {path}")
    return path, load_switch_file(path)


def _refuse_rules_kept_on(reader: _Reader, base_cfg: SwitchFile | None, rules: tuple[Rule, ...]) -> None:
    """A candidate that the base cfg's ``ExceptionalPassOfO1Level`` keeps on would be "off" in name only."""
    if base_cfg is None:
        return
    listed = exceptional_passes(base_cfg)
    kept_on = sorted(rule.name for rule in rules if rule.name in listed)
    if kept_on:
        raise reader.error(
            "rules.base_cfg",
            f"its ExceptionalPassOfO1Level lists the candidate rule {kept_on[0]}"
            + (f" (and {len(kept_on) - 1} more)" if len(kept_on) > 1 else "")
            + ", and CANN keeps a pass listed there on whatever the switch file says; "
            "take it out of that list, or out of the candidates",
        )


def _read_rules(
    reader: _Reader, section: Mapping[str, Any], base_dir: Path
) -> tuple[tuple[Rule, ...], tuple[str, ...]]:
    """The candidate rules and the warnings about their names.

    Rules listed by hand are checked against the rules that fired in the artifacts
    of ``rules.from`` (authoritative) or else against the catalog, because CANN
    silently ignores a misspelled name and a search over it would prove nothing.
    """
    keep_unfired = reader.boolean(section.get("keep_unfired", False), "rules.keep_unfired")
    policy = section.get("unknown", "error")
    if policy not in UNKNOWN_POLICIES:
        raise reader.error("rules.unknown", f"must be error, warn or ignore, got {policy!r}")
    rules: list[Rule] = []
    warnings: list[str] = []
    unknown: list[tuple[str, str]] = []  # (config key, message) of names neither catalog nor artifacts know
    fired: set[str] | None = None
    from_notes: list[str] = []
    known_sections: dict[str, set[Section]] = {}
    from_all_on = section.get("from") == "all_on"  # the all-on training gives them (fusion_dd.coordinator.closure)
    if section.get("from") is not None and not from_all_on:
        candidates = _rules_from_artifacts(reader, section["from"], base_dir, keep_unfired, _listed_sections(section))
        rules.extend(candidates.rules)
        unknown_texts = {str(item) for item in candidates.name_warnings if item.kind == "unknown"}
        unknown.extend(("rules.from", text) for text in unknown_texts)
        warnings.extend(text for text in candidates.warnings if text not in unknown_texts)
        from_notes = [text for text in candidates.warnings if text not in unknown_texts]
        fired = candidates.fired
        for rule in candidates.rules:
            known_sections.setdefault(rule.name, set()).add(rule.section)
    seen = {rule.name for rule in rules}
    listed: list[Rule] = []
    listed_keys: dict[str, str] = {}
    for section_enum in (Section.GRAPH, Section.UB):
        key = f"rules.{section_enum.value}"
        names = section.get(section_enum.value)
        if names is None:
            continue
        if not isinstance(names, list):
            raise reader.error(key, "must be a list of fusion pass names")
        for index, name in enumerate(names):
            problem = name_problem(name)
            if problem is not None:
                raise reader.error(f"{key}[{index}]", f"must be a pass name: {problem}")
            if name in listed_keys:
                raise reader.error(key, f"duplicate rule {name!r} (also in {listed_keys[name]})")
            listed_keys[name] = f"{key}[{index}]"
            listed.append(Rule(name, section_enum))
    from ..backends.cann.artifacts import validate_names
    from ..backends.cann.artifacts.validate import SUGGESTED_NAMES

    # Spelling suggestions cost milliseconds per name, and "ignore" shows none of them.
    suggest = 0 if policy == "ignore" else SUGGESTED_NAMES
    for warning in validate_names(listed, fired, known_sections, suggest=suggest):
        if warning.kind == "unknown":
            unknown.append((listed_keys[warning.rule.name], warning.message))
            continue
        warnings.append(warning.message)
        if warning.kind == "never-fired" and not keep_unfired:
            listed.remove(warning.rule)
    warnings.extend(_unknown_names(reader, unknown, policy))
    rules.extend(rule for rule in listed if rule.name not in seen)
    rules.extend(_autofuse_points(reader, section.get(Section.AUTOFUSE.value)))
    if not rules and not from_all_on:
        if section.get("from") is not None and from_notes:
            # Why the artifacts gave none (e.g. nothing fused in that network), as `fusion-dd rules` says it.
            raise reader.error("rules.from", f"no candidate rules: {'; '.join(from_notes)}")
        raise reader.error(
            "rules",
            "no candidate rules: list pass names under rules.GraphFusion / "
            "rules.UBFusion (or rules.from: [fusion_result.json]), or AutoFuse switch points under "
            "rules.AutoFuse",
        )
    return tuple(rules), tuple(warnings)


def _autofuse_points(reader: _Reader, names: Any) -> list[Rule]:
    """``rules.AutoFuse``: AutoFuse switch points as candidates (any of elemwise, reduce, concat)."""
    if names is None:
        return []
    key = f"rules.{Section.AUTOFUSE.value}"
    if not isinstance(names, list):
        raise reader.error(key, f"must be a list of AutoFuse switch points ({', '.join(AUTOFUSE_POINTS)})")
    points: list[Rule] = []
    for index, name in enumerate(names):
        if name not in AUTOFUSE_POINTS:
            raise reader.error(
                f"{key}[{index}]", f"{name!r} is not an AutoFuse switch point: use {', '.join(AUTOFUSE_POINTS)}"
            )
        if any(rule.name == name for rule in points):
            raise reader.error(key, f"duplicate switch point {name!r}")
        points.append(Rule(name, Section.AUTOFUSE))
    return points


def _unknown_names(reader: _Reader, unknown: list[tuple[str, str]], policy: str) -> list[str]:
    """``rules.unknown``: a name neither the catalog nor the artifacts know is an error by default.

    CANN ignores a misspelled name silently, so a search over it "proves" the rule
    harmless. Newer CANN versions add passes the catalog lacks: ``warn`` or
    ``ignore`` accept them. Thousands of unknown names make one line, not thousands.
    """
    if not unknown or policy == "ignore":
        return []
    more = len(unknown) - 1
    if policy == "error":
        key, message = unknown[0]
        rest = f"; and {more:,} more unknown name(s)" if more else ""
        raise reader.error(
            key,
            f"{message}{rest}; fix the spelling (take names from `fusion-dd rules fusion_result.json`), "
            "or set rules.unknown: warn for passes newer than fusion-dd's catalog",
        )
    shown = [message for _, message in unknown[:UNKNOWN_SHOWN]]
    if len(unknown) > UNKNOWN_SHOWN:
        shown.append(
            f"and {len(unknown) - UNKNOWN_SHOWN:,} more names unknown to the catalog "
            "(rules.unknown: warn; kept as candidates)"
        )
    return shown


def _listed_sections(section: Mapping[str, Any]) -> dict[str, Section]:
    """The names ``rules.GraphFusion`` / ``rules.UBFusion`` list, with their section (checked later)."""
    listed: dict[str, Section] = {}
    for section_enum in (Section.GRAPH, Section.UB):
        names = section.get(section_enum.value)
        if isinstance(names, list):
            listed.update({name: section_enum for name in names if isinstance(name, str)})
    return listed


def _rules_from_artifacts(
    reader: _Reader, raw: Any, base_dir: Path, keep_unfired: bool, listed: Mapping[str, Section] | None = None
) -> Any:
    """``rules.from``: candidate rules taken from the user's CANN artifacts.

    A name a rule list there gives without a section takes the section ``listed``
    gives it (``rules.GraphFusion`` / ``rules.UBFusion`` of the same config).
    """
    from ..backends.cann.artifacts import collect_candidates

    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list) or not raw or not all(isinstance(p, str) for p in raw):
        raise reader.error("rules.from", "must be a list of artifact paths")
    paths = [(base_dir / p).resolve() for p in raw]
    for path in paths:
        if not path.exists():
            raise reader.error("rules.from", f"not found: {path}")
    return collect_candidates(paths, keep_unfired=keep_unfired, declared_sections=listed)


def _graphs_not_found(graphs: Sequence[str]) -> list[str]:
    """A warning per rules.graphs entry that names nothing now: the report reads them only when the search ends."""
    import glob

    return [
        f"rules.graphs[{index}]: {pattern}: no such file or match yet; the report names culprits' layers only "
        "from graph dumps it finds when the search ends"
        for index, pattern in enumerate(graphs)
        if not (Path(pattern).exists() or (glob.has_magic(pattern) and glob.glob(pattern, recursive=True)))
    ]


def _read_graphs(reader: _Reader, section: Mapping[str, Any], base_dir: Path) -> tuple[str, ...]:
    raw = section.get("graphs")
    if raw is None:
        return ()
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list) or not all(isinstance(p, str) and p for p in raw):
        raise reader.error("rules.graphs", "must be a list of graph dump paths or glob patterns")
    return tuple(str(base_dir / p) for p in raw)


def _parse_command(reader: _Reader, raw: Any) -> tuple[str, ...]:
    if isinstance(raw, str):
        try:
            argv = shlex.split(raw)
        except ValueError as exc:
            raise reader.error("train.command", f"cannot split the command ({exc})") from None
    elif isinstance(raw, list) and all(isinstance(arg, (str, int, float)) for arg in raw):
        argv = [str(arg) for arg in raw]
    else:
        raise reader.error("train.command", "must be an argv list of strings (or one string)")
    if not argv:
        raise reader.error("train.command", "is empty: give the command that runs one training")
    return tuple(argv)


def parse_devices(raw: Any, key: str = "train.devices", reader: _Reader | None = None) -> tuple[tuple[str, ...], ...]:
    """Device pool: one concurrent training per entry; an entry may be a group.

    Accepted forms: ``[0, 1]``, ``[[0, 1], [2, 3]]``, ``"0,1,2"`` and ``"0,1;2,3"``
    (the command-line spelling, where ``;`` separates groups).
    """

    def fail(problem: str) -> UsageError:
        if reader is not None:
            return reader.error(key, problem)
        return UsageError(f"{key}: {problem}")

    entries: list[tuple[str, ...]] = []
    if isinstance(raw, str):
        # Every separator must separate something: "0,,1" or "0;" is a typo, not a pool.
        groups = raw.split(";") if ";" in raw else raw.split(",")
        for number, group in enumerate(groups, start=1):
            ids = tuple(part.strip() for part in group.split(",")) if ";" in raw else (group.strip(),)
            if not all(ids):
                what = "device group" if ";" in raw else "device id"
                raise fail(f"empty {what} (number {number}) in {raw!r}; write e.g. \"0,1,2,3\" or \"0,1;2,3\"")
            entries.append(ids)
    elif isinstance(raw, list):
        for item in raw:
            if isinstance(item, list):
                ids = tuple(str(part) for part in item)
                if not ids:
                    raise fail("an empty device group")
                entries.append(ids)
            elif isinstance(item, (int, str)) and not isinstance(item, bool) and str(item).strip():
                entries.append((str(item).strip(),))
            else:
                raise fail(f"device entries are ids or lists of ids, got {item!r}")
    else:
        raise fail(f"must be a list of device ids, got {raw!r}")
    if not entries:
        raise fail("no devices: give at least one device id")
    flat = [device for entry in entries for device in entry]
    duplicates = sorted({device for device in flat if flat.count(device) > 1})
    if duplicates:
        raise fail(
            f"device {duplicates[0]} appears twice; two trainings must never share a device"
        )
    for device in flat:
        if not _DEVICE_ID.fullmatch(device):
            raise fail(f"invalid device id {device!r}: use letters, digits and . _ : / - only")
    return tuple(entries)


#: What each device variable accepts: CANN's ASCEND_DEVICE_ID is the chip's number; CUDA takes
#: indices or the GPU-/MIG- UUIDs nvidia-smi -L prints. A variable not listed is not checked.
_DEVICE_FORMS: dict[str, tuple[re.Pattern[str], str]] = {
    "ASCEND_DEVICE_ID": (re.compile(r"\d+"), "a chip number as npu-smi info lists it, e.g. 0,1"),
    "CUDA_VISIBLE_DEVICES": (
        re.compile(r"\d+|GPU-[0-9A-Fa-f-]+|MIG-[0-9A-Za-z/-]+"),
        "a GPU index or a GPU-/MIG- UUID as nvidia-smi -L lists it, e.g. 0,1",
    ),
}


def check_device_ids(config: "SearchConfig", key: str) -> None:
    """Every device id of a local search is one its device variable accepts (``key`` names where it was given).

    ``ASCEND_DEVICE_ID=gpu0`` is not a device: the training would fail on every
    configuration alike, or pick a default device and share it. A cluster's devices
    are the workers' own (the dask launcher checks them), so only local pools are checked.
    """
    train = config.train
    form = _DEVICE_FORMS.get(train.device_env)
    if train.launcher != "local" or form is None:
        return
    pattern, example = form
    for device in (device for entry in train.devices for device in entry):
        if not pattern.fullmatch(device):
            whose = "CANN" if config.compiler == "cann" else config.compiler
            raise UsageError(
                f"{key}: invalid device id {device!r} for {train.device_env} ({whose}): give {example}"
            )


def _read_train(reader: _Reader, section: Mapping[str, Any], default_device_env: str = "ASCEND_DEVICE_ID") -> TrainConfig:
    if section.get("command") is None:
        raise reader.error("train.command", "missing: the command that runs one training")
    command = _parse_command(reader, section["command"])
    for index, argument in enumerate(command):
        _check_placeholders(reader, argument, f"train.command[{index}]")
    workdir = reader.string(section.get("workdir", "."), "train.workdir")
    _check_placeholders(reader, workdir, "train.workdir")
    env_raw = reader.mapping(section.get("env"), "train.env")
    env: dict[str, str] = {}
    for name, value in env_raw.items():
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise reader.error("train.env", f"invalid environment variable name {name!r}")
        if value is None or isinstance(value, (dict, list)):
            raise reader.error(f"train.env.{name}", "must be a string or number")
        env[name] = str(value).lower() if isinstance(value, bool) else str(value)
        _check_placeholders(reader, env[name], f"train.env.{name}")
    timeout_raw = section.get("timeout", 14400)
    timeout = None if timeout_raw is None else reader.number(
        timeout_raw, "train.timeout", positive=True, unit="seconds, e.g. 14400 for 4 hours; null for none"
    )
    devices = parse_devices(section.get("devices", [0]), "train.devices", reader)
    device_env = reader.string(section.get("device_env", default_device_env), "train.device_env")
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", device_env):
        raise reader.error("train.device_env", f"invalid environment variable name {device_env!r}")
    grace = reader.number(section.get("kill_grace", 10), "train.kill_grace", positive=True, unit="seconds")
    retries = reader.integer(section.get("retries", 1), "train.retries", minimum=0)
    log_limit = _read_size(reader, section.get("log_limit", DEFAULT_LOG_LIMIT), "train.log_limit")
    launcher = reader.string(section.get("launcher", "local"), "train.launcher")
    if launcher not in LAUNCHERS and launcher not in _known_launchers():
        raise reader.error("train.launcher", f"must be one of {', '.join(_known_launchers())}, got {launcher!r}")
    scheduler = section.get("scheduler")
    scheduler = None if scheduler is None else reader.string(scheduler, "train.scheduler")
    scheduler_file = section.get("scheduler_file")
    scheduler_file = None if scheduler_file is None else reader.string(scheduler_file, "train.scheduler_file")
    if scheduler and scheduler_file:
        raise reader.error("train.scheduler_file", "give either train.scheduler or train.scheduler_file, not both")
    # A dask launcher without an address is refused when the search starts (resolve_launcher):
    # --scheduler on the command line may still give it.
    slurm = _read_slurm(reader, reader.mapping(section.get("slurm"), "train.slurm"))
    return TrainConfig(
        command=command,
        workdir=workdir,
        env=env,
        timeout=timeout,
        devices=devices,
        device_env=device_env,
        kill_grace=grace,
        retries=retries,
        log_limit=log_limit,
        launcher=launcher,
        scheduler=scheduler,
        devices_given="devices" in section,
        scheduler_file=scheduler_file,
        slurm=slurm,
    )


_SLURM_TIME = re.compile(r"(\d+-)?\d+(:\d+){0,2}|\d+-\d+|UNLIMITED|INFINITE", re.IGNORECASE)


def _read_slurm(reader: _Reader, section: Mapping[str, Any]) -> SlurmConfig:
    """``train.slurm:``; every value is checked here, so a typo never reaches sbatch as a failed job."""
    reader.check_keys(section, _SCHEMA["train"]["slurm"], "train.slurm.")

    def text(key: str) -> str | None:
        value = section.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise reader.error(f"train.slurm.{key}", f"must be a string, got {value!r}")
        value = str(value).strip()
        if not value or any(c.isspace() for c in value):
            raise reader.error(f"train.slurm.{key}", f"must be one word without spaces, got {value!r}")
        return value

    time_limit = text("time")
    if time_limit is not None and not _SLURM_TIME.fullmatch(time_limit):
        raise reader.error("train.slurm.time", f"not a Slurm time (minutes, H:MM:SS or D-HH:MM), got {time_limit!r}")
    cpus = section.get("cpus_per_task")
    cpus = None if cpus is None else reader.integer(cpus, "train.slurm.cpus_per_task", minimum=1)
    extra_raw = section.get("extra") or []
    if isinstance(extra_raw, str) or not isinstance(extra_raw, list):
        raise reader.error("train.slurm.extra", "must be a list of sbatch options, e.g. ['--constraint=a100']")
    extra = []
    for index, line in enumerate(extra_raw):
        key = f"train.slurm.extra[{index}]"
        option = reader.string(line, key).strip()
        if option.startswith("#SBATCH"):
            option = option[len("#SBATCH"):].strip()
        if not option.startswith("-") or "\n" in option:
            raise reader.error(key, f"must be one sbatch option such as --constraint=a100, got {line!r}")
        extra.append(option)
    max_jobs = reader.integer(section.get("max_jobs", 4), "train.slurm.max_jobs", minimum=1)
    return SlurmConfig(
        partition=text("partition"),
        gres=text("gres"),
        time=time_limit,
        cpus_per_task=cpus,
        mem=text("mem"),
        account=text("account"),
        qos=text("qos"),
        extra=tuple(extra),
        max_jobs=max_jobs,
    )


LAUNCHERS = ("local", "dask", "slurm")


def _known_launchers() -> tuple[str, ...]:
    """The built-in launchers and those other packages register (fusion_dd.runner.registry).

    Asked only for a name that is not built in: finding the others reads every installed
    package's metadata, a cost every command that reads a config would otherwise pay.
    """
    from ..runner.registry import launcher_names

    return launcher_names()


def _launcher_choice(train: TrainConfig, launcher: str | None, scheduler: str | None) -> TrainConfig:
    """``--launcher``/``--scheduler`` over the config's; ``--scheduler`` alone means the dask launcher."""
    if launcher is not None and launcher not in LAUNCHERS and launcher not in _known_launchers():
        raise UsageError(f"--launcher: must be one of {', '.join(_known_launchers())}, got {launcher!r}")
    chosen = launcher or ("dask" if scheduler is not None else train.launcher)
    if chosen != "dask" and scheduler is not None:
        raise UsageError(f"--scheduler: only with --launcher dask (the {chosen} launcher needs no scheduler)")
    address = scheduler if scheduler is not None else train.scheduler
    if chosen == "dask" and not address and not train.scheduler_file:
        raise UsageError(
            "--launcher dask: give the scheduler's address with --scheduler (e.g. tcp://host:8786), "
            "or train.scheduler / train.scheduler_file in the config"
        )
    return replace(
        train,
        launcher=chosen,
        scheduler=address if chosen == "dask" else train.scheduler,
        scheduler_file=None if scheduler is not None else train.scheduler_file,
    )


#: An example per pattern key, for the message of a pattern without a group.
_PATTERN_EXAMPLES = {
    "metric.loss_pattern": "loss[=:]\\s*(\\S+)",
    "metric.speed_pattern": "samples/s[=:]\\s*(\\S+)",
}


def _check_regex(reader: _Reader, raw: Any, key: str) -> str:
    pattern = reader.string(raw, key)
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise reader.error(key, f"invalid regular expression ({exc})") from None
    if compiled.groups < 1:
        example = _PATTERN_EXAMPLES.get(key, "accuracy\\s*[=:]\\s*(\\S+)")
        raise reader.error(key, f"the pattern needs a group around the value, e.g. '{example}'")
    if compiled.groups > 1:
        # The value is read from the first group: with more, a label in the first one would be
        # read as the value, and every training would then be blamed for printing no number.
        raise reader.error(
            key,
            f"the pattern has {compiled.groups} groups; the value must be the only one: "
            "make the others non-capturing, (?:...)",
        )
    return pattern


def _read_metric(reader: _Reader, section: Mapping[str, Any]) -> MetricConfig:
    pattern = None
    if section.get("pattern") is not None:
        pattern = _check_regex(reader, section["pattern"], "metric.pattern")
    key = reader.string(section.get("key", "accuracy"), "metric.key")
    goal = section.get("goal", "max")
    if goal not in ("max", "min"):
        raise reader.error("metric.goal", f"must be 'max' (accuracy) or 'min' (loss), got {goal!r}")
    loss_pattern: str | None = DEFAULT_LOSS_PATTERN.pattern
    if "loss_pattern" in section:
        raw = section["loss_pattern"]
        loss_pattern = None if raw is None or raw == "" else _check_regex(reader, raw, "metric.loss_pattern")
    speed_pattern = None
    if section.get("speed_pattern") is not None:
        speed_pattern = _check_regex(reader, section["speed_pattern"], "metric.speed_pattern")
    return MetricConfig(pattern=pattern, key=key, goal=goal, loss_pattern=loss_pattern, speed_pattern=speed_pattern)


def parse_tolerance(raw: Any, key: str = "score.tolerance") -> Tolerance:
    if raw is None or raw == "auto":
        return Tolerance("auto")
    if isinstance(raw, str) and raw.strip().endswith("%"):
        try:
            value = float(raw.strip()[:-1]) / 100.0
        except ValueError:
            value = -1.0
        if not math.isfinite(value) or value < 0:
            raise UsageError(f"{key}: {raw!r} is not a percentage such as '2%'")
        return Tolerance("relative", value)
    if isinstance(raw, (int, float)) and not isinstance(raw, bool) and math.isfinite(raw) and raw >= 0:
        return Tolerance("absolute", float(raw))
    raise UsageError(f"{key}: must be 'auto', a non-negative number or a percentage like '2%', got {raw!r}")


def _read_score(reader: _Reader, section: Mapping[str, Any]) -> ScoreConfig:
    try:
        tolerance = parse_tolerance(section.get("tolerance", "auto"))
    except UsageError as exc:
        raise UsageError(f"{reader.source}: {exc}") from None

    def optional_number(key: str) -> float | None:
        value = section.get(key)
        return None if value is None else reader.number(value, f"score.{key}")

    for key in ("baseline_metric", "reference"):
        if tolerance.mode == "relative" and section.get(key) == 0:
            raise reader.error(
                "score.tolerance",
                f"{tolerance.describe()} of a zero baseline (score.{key}: 0) is nothing; give an absolute "
                "tolerance instead (e.g. score.tolerance: 1e-6, in the metric's units, or 0 for bitwise)",
            )
    return ScoreConfig(
        tolerance=tolerance,
        crash_is_failure=reader.boolean(section.get("crash_is_failure", False), "score.crash_is_failure"),
        baseline_repeats=reader.integer(section.get("baseline_repeats", 1), "score.baseline_repeats", minimum=1),
        all_on_repeats=reader.integer(section.get("all_on_repeats", 1), "score.all_on_repeats", minimum=1),
        strict=reader.boolean(section.get("strict", False), "score.strict"),
        reference=optional_number("reference"),
        baseline_metric=optional_number("baseline_metric"),
        all_on_metric=optional_number("all_on_metric"),
        margin=_read_margin(reader, section.get("margin", "auto")),
    )


def _read_margin(reader: _Reader, raw: Any) -> float | None:
    if raw is None or raw == "auto":
        return None
    value = reader.number(raw, "score.margin")
    if value < 0:
        raise reader.error("score.margin", f"must be 'auto' or a number >= 0, got {raw!r}")
    return value


def _read_search(reader: _Reader, section: Mapping[str, Any]) -> SearchSettings:
    from ..search import DEFAULT_STRATEGY, STRATEGIES

    strategy = section.get("strategy", DEFAULT_STRATEGY)
    if not isinstance(strategy, str) or strategy not in STRATEGIES:
        raise reader.error(
            "search.strategy",
            f"unknown strategy {strategy!r}; choose one of {', '.join(sorted(STRATEGIES))}",
        )
    budget = reader.integer(section.get("budget", 200), "search.budget", minimum=MIN_BUDGET)
    confirm = section.get("confirm", "auto")
    if confirm is False:
        confirm = "off"  # YAML reads an unquoted `off` as false
    if confirm not in ("auto", "strict", "off"):
        raise reader.error("search.confirm", f"must be auto, strict or off, got {confirm!r}")
    max_trainings = reader.integer(section.get("max_trainings", 7), "search.max_trainings", minimum=1)
    fix_trainings = reader.integer(
        section.get("fix_trainings", SearchSettings.fix_trainings), "search.fix_trainings", minimum=2
    )
    if fix_trainings > max_trainings:
        raise reader.error(
            "search.fix_trainings",
            f"{fix_trainings} is more than search.max_trainings ({max_trainings}), which caps the trainings of one "
            "configuration: lower it or raise search.max_trainings",
        )
    return SearchSettings(
        strategy=strategy, budget=budget, confirm=confirm, max_trainings=max_trainings, fix_trainings=fix_trainings
    )


def _read_guide(
    reader: _Reader,
    section: Mapping[str, Any],
    search: SearchSettings,
    rules: Sequence[Rule],
    localize: LocalizeConfig | None,
) -> SearchSettings:
    """``search.guide`` (dumps | none; dumps by default when localize: says how to dump) and ``search.suspects``."""
    raw = section.get("guide")
    if raw is None:
        guide = "dumps" if localize is not None else "none"
    elif raw in ("dumps", "none"):
        guide = raw
    elif raw is False:
        guide = "none"
    else:
        raise reader.error("search.guide", f"must be dumps or none, got {raw!r}")
    if guide == "dumps" and localize is None:
        raise reader.error(
            "search.guide",
            "dumps needs a localize: section saying how a training dumps its tensors; add one, or set "
            "search.guide: none",
        )
    suspects_raw = section.get("suspects") or []
    if isinstance(suspects_raw, str):
        suspects_raw = [suspects_raw]
    if not isinstance(suspects_raw, list) or not all(isinstance(name, str) and name for name in suspects_raw):
        raise reader.error("search.suspects", "must be a list of candidate rule names, e.g. [RuleA, RuleB]")
    names = [rule.name for rule in rules]
    known = set(names)
    for name in suspects_raw:
        if name not in known:
            close = difflib.get_close_matches(name, names, n=1)
            hint = f"; did you mean {close[0]}?" if close else (
                "; name a candidate rule (listed under rules.GraphFusion / rules.UBFusion, or found by rules.from)"
            )
            raise reader.error("search.suspects", f"{name!r} is not a candidate rule{hint}")
    return replace(search, guide=guide, suspects=tuple(dict.fromkeys(suspects_raw)))



def _read_localize(reader: _Reader, raw: Any) -> LocalizeConfig | None:
    """``localize:``: absent, null or false means no localization after the search."""
    if raw is None or raw is False:
        return None
    if raw is True:
        raw = {}
    section = reader.mapping(raw, "localize")
    reader.check_keys(section, _SCHEMA["localize"], "localize.")
    env_raw = reader.mapping(section.get("env"), "localize.env")
    env: dict[str, str] = {}
    for name, value in env_raw.items():
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise reader.error("localize.env", f"invalid environment variable name {name!r}")
        if value is None or isinstance(value, (dict, list)):
            raise reader.error(f"localize.env.{name}", "must be a string or number")
        env[name] = str(value).lower() if isinstance(value, bool) else str(value)
        _check_placeholders(reader, env[name], f"localize.env.{name}", dumps=True)
    args = _argv_list(reader, section.get("args", []), "localize.args", allow_empty=True)
    command = None
    if section.get("command") is not None:
        command = _argv_list(reader, section["command"], "localize.command", allow_empty=False)
    for key, argv in (("localize.args", args), ("localize.command", command or ())):
        for index, argument in enumerate(argv):
            _check_placeholders(reader, argument, f"{key}[{index}]", dumps=True)
    step = section.get("step")
    if step is not None:
        step = reader.integer(step, "localize.step", minimum=0)
    graphs = None
    if section.get("graphs") is not None:
        raw_graphs = section["graphs"]
        if isinstance(raw_graphs, str):
            raw_graphs = [raw_graphs]
        if not isinstance(raw_graphs, list) or not all(isinstance(p, str) and p for p in raw_graphs):
            raise reader.error("localize.graphs", "must be a list of graph dump paths or glob patterns")
        for index, pattern in enumerate(raw_graphs):
            _check_placeholders(reader, pattern, f"localize.graphs[{index}]", dumps=True)
        graphs = tuple(raw_graphs)
    if not env and not args and command is None:
        raise reader.error(
            "localize",
            "says nothing about how a training dumps its tensors; give localize.env (e.g. "
            "FUSION_DD_DUMP_DIR: \"{dump_dir}\"), localize.args or localize.command",
        )
    return LocalizeConfig(env=env, args=args, command=command, step=step, graphs=graphs)


def _argv_list(reader: _Reader, raw: Any, key: str, *, allow_empty: bool) -> tuple[str, ...]:
    """An argv list (a string is split with shlex, never run through a shell)."""
    if isinstance(raw, str):
        try:
            argv = shlex.split(raw)
        except ValueError as exc:
            raise reader.error(key, f"cannot split {raw!r} ({exc})") from None
    elif isinstance(raw, list) and all(isinstance(arg, (str, int, float)) and not isinstance(arg, bool) for arg in raw):
        argv = [str(arg) for arg in raw]
    else:
        raise reader.error(key, "must be an argv list of strings (or one string)")
    if not argv and not allow_empty:
        raise reader.error(key, "is empty: give the command that runs one dumping training")
    return tuple(argv)
