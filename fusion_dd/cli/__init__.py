"""The ``fusion-dd`` command: parses arguments, calls the engine, prints. No search logic here.

Exit codes: 0 the search finished (a refusal such as "nothing to debug" is an
answer too), 2 usage or config error, or a training that does not run
(``training_broken``: no answer about fusion), 3 budget exhausted, 130 interrupted.
"""

from __future__ import annotations

import gc
import math
import os
import shlex
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, Optional

import typer
from typer.core import TyperCommand, TyperGroup

from .. import __version__
from ..config.settings import (
    DEFAULT_CONFIG_NAME,
    SearchConfig,
    check_device_ids,
    check_state_dir,
    config_state_dir,
    load_config,
    parse_config,
    parse_devices,
    parse_started_config,
)
from ..core.errors import UsageError
from ..core.status import ExitCode, SearchStatus
from ..store.journal import JOURNAL_NAME, held_by_another, move_aside, read_records
from .coercion import install_plain_values
from .progress import ConsoleEvents
from ..runner.broken import STATUS as TRAINING_BROKEN
from ..runner.broken import broken_lines
from ..compare.help import COMPARE_HELP
from ..coordinator.preflight import preflight, trial_values
from ..report.build import display_path, summary_lines
from ..store.state import launched_count, replay
from .status_view import coordinator_pid, status_lines
from ..backends.cann.switch import render_switch
from ..runner.trial import PLACEHOLDERS, resolve_relative, substitute, substitute_command

if TYPE_CHECKING:
    from ..coordinator.engine import SearchResult

class _HelpAsFlag:
    """``--help`` shown as the flag it is: typer 0.29 prints ``--help <bool>`` on every help page otherwise."""

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)  # type: ignore[misc]
        if option is not None and not option.metavar:
            option.metavar = ""
        return option


class _PlainValues:
    """Options converted without importing pydantic (see :mod:`fusion_dd.cli.coercion`)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        install_plain_values(self.get_params(ctx))  # type: ignore[attr-defined]
        return super().parse_args(ctx, args)  # type: ignore[misc, no-any-return]


class _Group(_PlainValues, _HelpAsFlag, TyperGroup):
    pass


class _Command(_PlainValues, _HelpAsFlag, TyperCommand):
    pass


app = typer.Typer(
    cls=_Group,
    name="fusion-dd",
    help="Find the operator-fusion rules that break a network's accuracy, by delta debugging over real trainings.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def _flag(name: str, **options: Any) -> Any:
    """A boolean flag: ``metavar=""``, or typer 0.29 shows ``<bool>`` beside it, as if it took a value."""
    return typer.Option(False, name, metavar="", **options)


ConfigOption = typer.Option(None, "-c", "--config", help=f"Config file (default ./{DEFAULT_CONFIG_NAME}).")
BudgetOption = typer.Option(None, "--budget", help="Maximum trainings over the whole search, resumes included.")
DevicesOption = typer.Option(
    None, "--devices", help='Device pool: "0,1,2,3" (one training each) or "0,1;2,3" (groups).'
)
JobsOption = typer.Option(None, "--jobs", help="Shorthand for --devices 0..N-1.")
StateDirOption = typer.Option(None, "--state-dir", help="Where the journal, trials and report live.")
LauncherOption = typer.Option(
    None, "--launcher", help="Where trainings run: local (this machine), dask (a dask.distributed cluster) or slurm (sbatch jobs)."
)
SchedulerOption = typer.Option(
    None, "--scheduler", help="The dask scheduler's address (tcp://host:8786, tls://...); implies --launcher dask."
)


def _fail(message: str, code: int = ExitCode.USAGE) -> NoReturn:
    typer.echo(f"fusion-dd: error: {message}", err=True)
    raise typer.Exit(code)


def _devices_override(devices: str | None, jobs: int | None) -> tuple[tuple[str, ...], ...] | None:
    if devices is not None and jobs is not None:
        raise UsageError("--devices and --jobs: give one of them, not both")
    if jobs is not None:
        if jobs < 1:
            raise UsageError("--jobs: must be at least 1")
        return tuple((str(index),) for index in range(jobs))
    if devices is not None:
        return parse_devices(devices, "--devices")
    return None


def _load(
    config_path: Path | None,
    *,
    budget: int | None,
    devices: str | None,
    jobs: int | None,
    state_dir: Path | None,
    launcher: str | None = None,
    scheduler: str | None = None,
) -> SearchConfig:
    return _overridden(
        load_config(config_path or Path(DEFAULT_CONFIG_NAME), own_state_dir=state_dir is None), budget=budget, devices=devices, jobs=jobs,
        state_dir=state_dir, launcher=launcher, scheduler=scheduler,
    )


def _overridden(
    config: SearchConfig,
    *,
    budget: int | None,
    devices: str | None,
    jobs: int | None,
    state_dir: Path | None = None,
    launcher: str | None = None,
    scheduler: str | None = None,
) -> SearchConfig:
    """A config with the command line's overrides, its device ids checked.

    One place for every command that trains (search, resume, localize, demo), so
    that a bad --budget or --devices is refused with the same line wherever it is given.
    """
    loaded = config.with_overrides(
        budget=budget, devices=_devices_override(devices, jobs), state_dir=state_dir, launcher=launcher,
        scheduler=scheduler,
    )
    check_device_ids(loaded, "--devices" if devices is not None else f"{loaded.source}: train.devices")
    return loaded


def _restart(state_dir: Path) -> None:
    """``--restart``: the old search moved aside (nothing is deleted), and where it went said."""
    moved = move_aside(state_dir)
    if moved is not None:
        from .report import readdress_moved

        typer.echo(
            f"fusion-dd: moved the old search aside: {display_path(state_dir)} -> {display_path(moved)} "
            "(its journal, trials and report are kept there); starting afresh",
            err=True,
        )
        problem = readdress_moved(moved)  # its report's "continue with" must name where it is now
        if problem is not None:
            typer.echo(f"fusion-dd: {problem}", err=True)


def _given(
    devices: str | None, jobs: int | None, launcher: str | None, scheduler: str | None, budget: int | None = None
) -> Any:
    """Which parts of where (and how long) the search trains this command line sets (fusion_dd.config.session)."""
    from ..config.session import Given

    return Given(
        devices=devices is not None or jobs is not None,
        launcher=launcher is not None or scheduler is not None,
        budget=budget is not None,
    )


def _remember(config: SearchConfig, given: Any, localize_only: bool = False) -> tuple[SearchConfig, str | None]:
    """The devices, launcher and budget of the search's last session, where this command line does not say.

    Returns the line that says what came from the journal (the engine says it once
    the session starts); a config file changed to other devices or another
    launcher than the journal's is refused (UsageError). A finished search trains
    nothing (unless it localizes), so it is left as it is.
    """
    from ..config.session import journaled_budget, journaled_context, remembered

    try:
        records = read_records(config.state_dir / JOURNAL_NAME)
    except (UsageError, OSError):
        return config, None  # the engine reads the journal next and says what is wrong with it
    context, finished = journaled_context(records)
    if finished and not localize_only:
        return config, None
    start = next((record for record in records if record.get("type") == "search_started"), {})
    return remembered(config, context, start.get("config_document"), given, journaled_budget(records))


def _install_sigterm() -> None:
    """SIGTERM and SIGHUP stop a search like Ctrl-C: trainings killed cleanly, journal consistent, exit 130.

    SIGHUP is what a closed terminal or a dropped ssh session sends: left at its
    default it would kill the coordinator on the spot and leave the trainings
    running unsupervised to their end. (To outlive the terminal, run the search
    under nohup, tmux or systemd-run; nohup's SIG_IGN is kept.)

    The first SIGINT, SIGTERM or SIGHUP raises ``KeyboardInterrupt`` in the main thread
    (where the engine waits for its trainings, see :mod:`fusion_dd.runner.executor`);
    later ones are ignored, because one stop is enough and a second Ctrl-C must
    not cut short the killing of the trainings or the writing of the journal and
    report. A Python-level no-op rather than ``SIG_IGN``, which child processes
    would inherit.
    """

    def stopping(signum: int, frame: Any) -> None:
        pass

    hangup = signal.getsignal(signal.SIGHUP) != signal.SIG_IGN  # under nohup: the user chose to ignore it
    stops = (signal.SIGTERM, signal.SIGINT) + ((signal.SIGHUP,) if hangup else ())

    def handler(signum: int, frame: Any) -> None:
        for number in stops:
            signal.signal(number, stopping)
        raise KeyboardInterrupt

    for number in stops:
        signal.signal(number, handler)


def _print_warnings(warnings: Sequence[str], shown: int = 10) -> None:
    """Warnings on stderr, at most ``shown`` lines and a count: 5,000 names must not bury the output."""
    for warning in warnings[:shown]:
        typer.echo(f"fusion-dd: warning: {warning}", err=True)
    if len(warnings) > shown:
        typer.echo(f"fusion-dd: warning: and {len(warnings) - shown:,} more warnings like these", err=True)


def _warn(config: SearchConfig) -> None:
    from ..coordinator.preflight import goal_warnings, launcher_warnings

    _print_warnings([*config.warnings, *goal_warnings(config), *launcher_warnings(config)], shown=20)


def run_engine(config: SearchConfig, localize_only: bool = False, note: str | None = None) -> SearchResult:
    """Run (or resume) a search with the console display and print its summary.

    ``localize_only``: only the localization step of a finished search (``fusion-dd localize``).
    ``note``: what of the devices and launcher came from the journal, said when the session starts.
    """
    _warn(config)
    say = lambda line: typer.echo(f"fusion-dd: {line}", err=True)  # noqa: E731
    # rules.from: all_on and rules.closure train before the journal (fusion_dd.coordinator.closure);
    # run_search prepares them, runs the engine, closes its launcher and writes the HTML page.
    from ..coordinator.run import run_search

    shown: list[ConsoleEvents] = []

    def console(prepared: SearchConfig) -> ConsoleEvents:
        events = ConsoleEvents(
            total_rules=len(prepared.rules), budget=prepared.search.budget,
            devices=prepared.train.devices if prepared.train.launcher == "local" else (),
            loss_pattern=prepared.metric.loss_pattern,
        )
        # The estimate is of search trainings: a localize-only session has none to estimate.
        events.start(launched_before=_launched_before(prepared.state_dir),
                     state_dir=None if localize_only else prepared.state_dir)
        _install_sigterm()
        shown.append(events)
        return events

    try:
        finished = run_search(config, say=say, events_for=console, localize_only=localize_only, note=note)
    except UsageError:
        # A refused session (one error line follows) shows no estimate before its error.
        for events in shown:
            events.close(final_estimate=False)
        raise
    except BaseException:
        for events in shown:
            events.close()
        raise
    result = finished.result
    for events in shown:
        events.close(answered=result.exit_code == ExitCode.OK and not localize_only)
    typer.echo("")
    if finished.html_error is not None:
        typer.echo(f"fusion-dd: warning: could not write the HTML report: {finished.html_error}", err=True)
    lines = summary_lines(result.report, finished.config.state_dir)
    # Next to the report.json line; "continue with" stays last, where people look for what to do.
    at = next((index + 1 for index, line in enumerate(lines) if line.startswith("  report: ")), len(lines))
    if finished.html is not None:
        lines.insert(at, f"  html report: {display_path(finished.html)}")
    for line in lines:
        typer.echo(line)
    if result.status == TRAINING_BROKEN:
        for line in broken_lines(result.report):
            typer.echo(line, err=True)
    return result


def _launched_before(state_dir: Path) -> int:
    """Trainings earlier sessions launched, so that a resumed counter goes on from there.

    A journal that cannot be read counts 0 here: the engine reads it next and
    reports the problem properly.
    """
    try:
        return launched_count(read_records(state_dir / JOURNAL_NAME))
    except (UsageError, OSError, KeyError, TypeError, ValueError):
        return 0


def _dry_run(config: SearchConfig, note: str | None = None, restart: bool = False) -> None:
    """Show what a search would run, and fail (exit 2) wherever the search itself would refuse to start."""
    rules = list(config.rules)
    echo = typer.echo
    cluster = None
    if config.train.launcher == "dask":
        from ..runner.dask_launcher import cluster_devices

        # First, so that a scheduler it cannot reach is one error line (exit 2), nothing else.
        cluster = cluster_devices(config.train, config.state_dir)
    echo(f"config: {config.source}")
    if config.from_all_on:
        echo("candidate rules: the ones that fire in one training with every rule on (rules.from: all_on)"
             + (f", besides these {len(rules)}:" if rules else ""))
    else:
        echo(f"{len(rules)} candidate rules:")
    for rule in rules:
        echo(f"  {rule.section.value:<12} {rule.name}")
    echo("")
    echo("first switch files (each trial gets a fresh one):")
    if config.compiler == "cann":
        echo("baseline, all candidates off:")
        echo(render_switch(rules, [], config.base_cfg).rstrip())
        echo("all candidates on:")
        echo(render_switch(rules, rules, config.base_cfg).rstrip())
    else:
        from ..backends import backend_for

        backend = backend_for(config)
        for title, enabled in (("baseline, all candidates off", []), ("all candidates on", rules)):
            rendered = backend.render(rules, enabled)
            echo(f"{title}:")
            for name, value in rendered.env.items():
                echo(f"  {name}={shlex.quote(value)}")
    echo("")
    echo("command lines (the first training on each device; each trial has its own directory):")
    on_slurm = config.train.launcher == "slurm"
    pool = config.train.devices if cluster is None else [(entry["device"],) for entry in cluster]
    if on_slurm:
        pool = [("",)]  # the device is the one Slurm grants each job, in the job's own environment
    for number, device in enumerate(pool, start=1):  # the first wave: one training per device, in order
        values = trial_values(config, device, number)
        argv = resolve_relative(substitute_command(config.train.command, values), config.base_dir)
        workdir = substitute(config.train.workdir, values)
        said = "<as Slurm sets it in the job>" if on_slurm else values["device"]
        echo(f"  {config.train.device_env}={said} (in {workdir}) {shlex.join(argv)}")
        echo(f"    trial directory: {display_path(Path(values['trial_dir']))}")
    extra = ", ".join(f"{name}" for name in PLACEHOLDERS if name != "device")
    echo(f"  environment: FUSION_DD_* variables for {extra}, FUSION_DD_REPEAT")
    _say_first_round(config, len(pool) if not on_slurm else config.train.slurm.max_jobs)
    if cluster is not None:
        which = "the listed devices of " if config.train.devices_given else ""
        echo(
            f"  launcher: dask at {config.train.scheduler}: one task per trial on {which}the workers offering a "
            f"device (its id from {config.train.device_env} in the worker's environment); {len(cluster)} found:"
        )
        for entry in cluster:
            echo(f"    {entry['slot']} ({entry['address']})")
    slurm_refusal = None  # what Slurm says to the search's jobs, where it would not take them
    if on_slurm:
        from ..runner.slurm_launcher import resource_options

        asked = resource_options(config.train.slurm, config.train.timeout, config.train.kill_grace)
        options = [f"--{name}={value}" for name, value in asked.items() if value is not None]
        echo(
            f"  launcher: slurm: one sbatch job per trial, at most {config.train.slurm.max_jobs} at once "
            f"(train.slurm.max_jobs); each job asks for {' '.join([*options, *config.train.slurm.extra])}"
        )
        slurm_refusal = _dry_run_slurm(config)
    if config.localize is not None:
        _dry_run_localize(config)
    _dry_run_guide(config)
    echo("")
    parallel = len(config.train.devices) if cluster is None else len(cluster)
    if on_slurm:
        parallel = config.train.slurm.max_jobs
    references = config.score.baseline_repeats * (config.score.baseline_metric is None) + (
        config.score.all_on_metric is None
    )
    typical = references + 2 * max(1, math.ceil(math.log2(max(2, len(rules))))) + 1
    budget = config.search.budget
    trained = f"{references} reference{'s' if references != 1 else ''}, " if references else "no reference (both given), "
    echo(f"trainings: about {min(typical, budget)} for one culprit ({trained}the search, the fix check); at most {budget} (budget)")
    if config.train.timeout:
        hours = math.ceil(budget / parallel) * config.train.timeout / 3600
        echo(
            f"time: at most {hours:.1f} h on {parallel} device slot(s) if every training ran to its "
            f"{config.train.timeout / 3600:.2g} h timeout"
        )
    if restart:
        echo(f"state directory: {config.state_dir}: with --restart, first moved aside (nothing deleted); a new search starts")
        refusal = None
    else:
        from ..coordinator.opening import foresee_opening

        what, refusal = foresee_opening(config)
        running = coordinator_pid(config.state_dir)  # a look at the lock, as status takes it: nothing held
        if running is not None:
            what, refusal = "in use", held_by_another(config.state_dir, running if running > 0 else "unknown")
        echo(f"state directory: {config.state_dir}: {what}")
        if note:
            echo(f"  {note}")
    checked = preflight(config)
    echo("pre-flight (the command the first trial runs):")
    for note in checked.notes:
        echo(f"  ok: {note}")
    for problem in checked.errors:
        echo(f"  FAILS: {problem}")
    echo("nothing was launched (dry run)")
    if refusal is not None:
        _fail(f"{refusal} (a search would refuse to start)")
    if slurm_refusal is not None:
        _fail(slurm_refusal)
    if checked.errors:
        # The problems are the FAILS lines above: the error line names their keys, it does not repeat them.
        keys = ", ".join(dict.fromkeys(problem.split(": ")[1] for problem in checked.errors if ": " in problem))
        _fail(
            f"{config.source}: {keys}: the pre-flight check fails ({len(checked.errors)} problem(s), FAILS above); "
            f"a search would stop with status {TRAINING_BROKEN} before any training"
        )


def _dry_run_slurm(config: SearchConfig) -> str | None:
    """Ask Slurm whether it would take the search's jobs (``sbatch --test-only``, nothing submitted) and
    say its answer; the error line when it would not, as the search's first submission would meet it."""
    from ..runner import slurm_commands
    from ..runner.slurm_launcher import would_take

    try:
        answer = would_take(config.train.slurm, config.train.timeout, config.train.kill_grace)
    except slurm_commands.SlurmUnavailable as exc:
        typer.echo(f"  sbatch --test-only: Slurm does not answer ({exc})")
        return f"train.launcher slurm: Slurm does not answer ({exc}); a search would stop at its first submission"
    except slurm_commands.SubmissionRefused as refused:
        typer.echo(f"  sbatch --test-only: {refused}")
        return f"train.slurm: {refused}; a search would stop at its first submission"
    if answer is None:
        typer.echo("  sbatch --test-only: not asked (sbatch is not on this host's PATH)")
    else:
        typer.echo(f"  sbatch --test-only: Slurm would take the job ({answer})")
    return None


def _say_first_round(config: SearchConfig, devices: int) -> None:
    """What trains in the first round: the references, and beside them the search's first question."""
    from ..coordinator.beside_references import planned_width, reference_trainings

    references = reference_trainings(config)
    width = planned_width(config, devices, references)
    if width is not None:
        typer.echo(
            f"  first round: the {references} reference trainings and, on the {width} other device(s), the "
            "search's first question (its answers are judged once the references end)"
        )


def _dry_run_localize(config: SearchConfig) -> None:
    """The command line of a dumping training (localize:), as the first one would run."""
    from ..runner.trial import DUMP_PLACEHOLDERS

    assert config.localize is not None
    values = trial_values(config)
    values.update({name: str(Path(values["trial_dir"]) / sub) for name, sub in DUMP_PLACEHOLDERS.items()})
    argv = list(config.localize.command or config.train.command) + list(config.localize.args)
    argv = resolve_relative(substitute_command(argv, values), config.base_dir)
    env = " ".join(f"{name}={shlex.quote(substitute(value, values))}" for name, value in config.localize.env.items())
    typer.echo("after the culprits are found, localization trains with tensor dumps (the fix, and the fix with")
    typer.echo("each culprit set back on), e.g.:")
    typer.echo(f"  {env + ' ' if env else ''}{shlex.join(argv)}")


def _dry_run_guide(config: SearchConfig) -> None:
    """What guides the search (search.guide, search.suspects), and the ranking a resumed search journaled."""
    from ..analysis.guide import summary_lines as guide_lines

    echo = typer.echo
    settings = config.search
    if settings.suspects:
        echo(f"guide: search.suspects asked first: {', '.join(settings.suspects)}")
    if settings.guide == "dumps":
        assert config.localize is not None
        how = (
            "two extra dumped trainings of the references (localize.command/args may cut them short)"
            if config.localize.command is not None or config.localize.args
            else "the two references dump one step as they train"
        )
        echo(f"guide: search.guide dumps: {how}; their comparison ranks the rules, the top suspects asked first")
    journal = config.state_dir / JOURNAL_NAME
    if not journal.exists():
        return
    try:
        state = replay(read_records(journal))
    except (UsageError, OSError, KeyError, TypeError, ValueError):
        return
    if state.guide is not None:
        from ..analysis.guide import report_entry

        shown = report_entry(state.guide, list(state.refined.values()), [rule.name for rule in config.rules])
        echo("the search in the state directory journaled its guide (a resume replays it):")
        for line in guide_lines(shown):
            echo(f"  {line}")


@app.command(cls=_Command)
def search(
    config: Optional[Path] = ConfigOption,
    budget: Optional[int] = BudgetOption,
    devices: Optional[str] = DevicesOption,
    jobs: Optional[int] = JobsOption,
    state_dir: Optional[Path] = StateDirOption,
    launcher: Optional[str] = LauncherOption,
    scheduler: Optional[str] = SchedulerOption,
    dry_run: bool = _flag("--dry-run", help="Validate and show what would run; launch nothing."),
    restart: bool = _flag(
        "--restart", help="Move the state directory aside (to NAME.1, NAME.2, ...; nothing is deleted) and start afresh."
    ),
) -> None:
    """Search for the fusion rules that break accuracy (resumes an unfinished search in the state directory)."""
    loaded = _load(
        config, budget=budget, devices=devices, jobs=jobs, state_dir=state_dir, launcher=launcher, scheduler=scheduler
    )
    if dry_run:
        note = None
        if not restart:  # what the journal remembers, or the conflict a search would refuse
            loaded, note = _remember(loaded, _given(devices, jobs, launcher, scheduler, budget))
        _warn(loaded)
        _dry_run(loaded, note=note, restart=restart)
        return
    if restart:
        _restart(loaded.state_dir)
    loaded, note = _remember(loaded, _given(devices, jobs, launcher, scheduler, budget))
    raise typer.Exit(run_engine(loaded, note=note).exit_code)


def _resume_config(state_dir: Path, config_path: Path | None, purpose: str = "resume") -> SearchConfig:
    # The state directory is the one given (or found): the config's own is not checked.
    if config_path is not None:
        return load_config(config_path, own_state_dir=False)
    records = read_records(state_dir / JOURNAL_NAME)
    # The first search_started record is the search (SearchState.start_record), no replay needed.
    start = next((record for record in records if record.get("type") == "search_started"), None)
    if start is None:
        raise UsageError(f"{state_dir}: no search to {purpose} here; start one with 'fusion-dd search'")
    return parse_started_config(start, state_dir)


@app.command(cls=_Command)
def resume(
    state_dir: Optional[Path] = StateDirOption,
    budget: Optional[int] = BudgetOption,
    devices: Optional[str] = DevicesOption,
    jobs: Optional[int] = JobsOption,
    config: Optional[Path] = ConfigOption,
    launcher: Optional[str] = LauncherOption,
    scheduler: Optional[str] = SchedulerOption,
) -> None:
    """Continue an interrupted or budget-exhausted search; finished trainings are never repeated."""
    loaded = _journaled_config(state_dir, config, budget, devices, jobs, launcher, scheduler)
    loaded, note = _remember(loaded, _given(devices, jobs, launcher, scheduler, budget))
    raise typer.Exit(run_engine(loaded, note=note).exit_code)


def _journaled_config(
    state_dir: Path | None,
    config: Path | None,
    budget: int | None,
    devices: str | None,
    jobs: int | None,
    launcher: str | None,
    scheduler: str | None,
    purpose: str = "resume",
) -> SearchConfig:
    """The config a search in ``state_dir`` was started with, and this session's command-line overrides
    (``purpose``: the command, for the error when there is no search)."""
    directory = (state_dir or _default_state_dir(config)).resolve()
    return _overridden(
        _resume_config(directory, config, purpose), budget=budget, devices=devices, jobs=jobs, state_dir=directory,
        launcher=launcher, scheduler=scheduler,
    )


def _default_state_dir(config_path: Path | None) -> Path:
    path = config_path or Path(DEFAULT_CONFIG_NAME)
    if path.is_file():
        return config_state_dir(path)
    return Path(".fusion-dd")


@app.command(cls=_Command)
def localize(
    state_dir: Optional[Path] = StateDirOption,
    budget: Optional[int] = BudgetOption,
    devices: Optional[str] = DevicesOption,
    jobs: Optional[int] = JobsOption,
    config: Optional[Path] = ConfigOption,
    launcher: Optional[str] = LauncherOption,
    scheduler: Optional[str] = SchedulerOption,
) -> None:
    """Name the op and layer each culprit of a finished search broke (dumped trainings, see localize: in the config)."""
    loaded = _journaled_config(state_dir, config, budget, devices, jobs, launcher, scheduler, purpose="localize")
    loaded, note = _remember(loaded, _given(devices, jobs, launcher, scheduler, budget), localize_only=True)
    result = run_engine(loaded, localize_only=True, note=note)

    missing = (result.report.get("localization") or {}).get("status") == "incomplete"
    raise typer.Exit(result.exit_code or (ExitCode.BUDGET if missing else ExitCode.OK))


@app.command(cls=_Command)
def status(
    state_dir: Optional[Path] = StateDirOption,
    config: Optional[Path] = ConfigOption,
) -> None:
    """Show the state of a running or stopped search, from its journal."""
    directory = (state_dir or _default_state_dir(config)).resolve()
    for line in status_lines(directory):
        typer.echo(line)


@app.command(cls=_Command)
def report(
    state_dir: Optional[Path] = StateDirOption,
    config: Optional[Path] = ConfigOption,
    html: Optional[Path] = typer.Option(None, "--html", help="Also write the HTML report (with plots) to this file."),
    as_json: bool = _flag("--json", help="Print only the report's JSON document."),
) -> None:
    """Rebuild report.json and the summary from the journal, at any time (read-only while a search runs)."""
    from .report import run_report

    directory = (state_dir or _default_state_dir(config)).resolve()
    raise typer.Exit(run_report(directory, html=html, as_json=as_json))


@app.command(cls=_Command)
def rules(
    sources: Optional[list[Path]] = typer.Argument(
        None,
        help="fusion_result.json, ge_proto_*.txt / atc JSON graph dumps, fusion_switch.cfg, rule lists, or directories "
        "(--compiler onnxruntime: logs; xla: --xla_dump_to directories).",
    ),
    compiler: str = typer.Option("cann", "--compiler", help="Whose artifacts these are: cann, onnxruntime or xla."),
    closure: bool = _flag(
        "--closure", help="Train the all-off baseline of the config (-c) until no new rule fires; print the closed candidates."
    ),
    config: Optional[Path] = ConfigOption,
    output_format: Optional[str] = typer.Option(
        None, "--format", help="yaml (pastes into fusion-dd.yaml; the default), txt or json; not with --where."
    ),
    where: Optional[str] = typer.Option(None, "--where", help="Show where this rule acted in the given graph dumps."),
    keep_unfired: bool = _flag("--keep-unfired", help="Keep listed rules that the artifacts show never fired."),
) -> None:
    """Print the candidate rules found in a compiler's artifacts, or where a rule acted in a graph; or close a config's candidates."""
    from ..backends.cann.artifacts import collect_candidates, format_locations, format_rules, graph_paths, load_graphs
    from ..backends.cann.artifacts import where as where_rule

    if where is not None and output_format is not None:
        raise UsageError(f"--format {output_format}: --where prints the fused ops as text; drop --format")
    output_format = output_format or "yaml"
    if output_format not in ("yaml", "txt", "json"):
        raise UsageError(f"--format: {output_format!r} is not one of yaml, txt, json")
    if closure:
        _rules_closure(config, output_format)
        return
    if not sources:
        raise UsageError("missing argument SOURCES: the artifacts to read the candidates from (or --closure with a config)")
    if compiler != "cann":
        _compiler_rules(compiler, sources, output_format)
        return

    if where is not None:
        graphs = load_graphs(graph_paths(sources))
        fused = where_rule(graphs, where)
        if not fused:
            typer.echo(f"fusion-dd: warning: {where} produced no fused op in these graphs", err=True)
            return
        typer.echo(format_locations({fused[0].rule: fused}).rstrip())
        return
    candidates = collect_candidates(sources, keep_unfired=keep_unfired)
    _print_warnings(candidates.warnings)
    if candidates.dropped:
        names = ", ".join(rule.name for rule in candidates.dropped)
        typer.echo(f"fusion-dd: left out because they never fired (keep them with --keep-unfired): {names}", err=True)
    typer.echo(format_rules(candidates, output_format, autofuse=_autofuse_enabled()), nl=False)


def _rules_closure(config_path: Path | None, output_format: str = "yaml") -> None:
    """``fusion-dd rules --closure``: the config's candidates plus what fires in their all-off baseline."""
    from ..coordinator.closure import run_closure

    loaded = _load(config_path, budget=None, devices=None, jobs=None, state_dir=None)
    closure = run_closure(loaded, lambda line: typer.echo(f"fusion-dd: {line}", err=True))
    rules = [*loaded.rules, *closure.added]
    note = f"closed candidates ({len(closure.added)} added by {len(closure.rounds)} baseline training(s))"
    typer.echo(_rule_listing(loaded.compiler, rules, output_format, note, added=closure.added), nl=False)


def _rule_listing(compiler: str, rules: list, output_format: str, note: str, **extra: Any) -> str:
    """Rules as ``--format`` asks: yaml that pastes into fusion-dd.yaml, ``name group`` lines, or JSON.

    ``rules`` are Rule objects (CANN, grouped by section) or plain names (the other compilers);
    ``extra`` lists of either go into the JSON document beside the rules.
    """
    import json

    from ..core.rules import Section

    def names_of(items: list) -> list[str]:
        return [getattr(item, "name", item) for item in items]

    if compiler == "cann":
        grouped = {
            section.value: [rule.name for rule in rules if rule.section is section]
            for section in (Section.GRAPH, Section.UB, Section.AUTOFUSE)
        }
        grouped = {key: names for key, names in grouped.items() if names or key != Section.AUTOFUSE.value}
        document: dict[str, Any] = {"rules": grouped}
        lines = [f"{rule.name} {rule.section.value}" for rule in rules]
        yaml_lines = [f"  {key}: [{', '.join(names)}]" for key, names in grouped.items() if names]
    else:
        names = names_of(rules)
        document = {"rules": {"compiler": compiler, "names": names}}
        lines = list(names)
        yaml_lines = [f"  compiler: {compiler}", f"  names: [{', '.join(names)}]"]
    if output_format == "json":
        document.update({key: names_of(value) for key, value in extra.items()})
        return json.dumps(document, indent=2) + "\n"
    if output_format == "txt":
        return "".join(f"{line}\n" for line in [f"# {note}", *lines])
    return "\n".join([f"# {note}:", "rules:", *yaml_lines]) + "\n"


def _compiler_rules(compiler: str, sources: list[Path], output_format: str = "yaml") -> None:
    """``fusion-dd rules --compiler onnxruntime|xla``: the rules that fired in these logs or dumps, as config."""
    from ..backends import COMPILERS
    from ..backends.rules_section import _from_artifacts

    if compiler not in COMPILERS:
        raise UsageError(f"--compiler: {compiler!r} is not one of {', '.join(COMPILERS)}")

    class _Reader:
        source = "fusion-dd rules"

        def error(self, key: str, problem: str) -> UsageError:
            return UsageError(f"{problem}")

    fired, _ = _from_artifacts(_Reader(), [str(Path(source).resolve()) for source in sources], Path.cwd(), compiler)
    stuck: list[str] = []
    if compiler == "onnxruntime":
        from ..backends.ort import UNSWITCHABLE

        stuck = [name for name in fired if name in UNSWITCHABLE]
        if stuck:
            typer.echo(f"fusion-dd: left out, ONNX Runtime runs them whatever the switches say: {', '.join(stuck)}", err=True)
        fired = [name for name in fired if name not in UNSWITCHABLE]
    extra = {"left_out": stuck} if compiler == "onnxruntime" else {}
    note = f"rules that fired in the {compiler} artifacts"
    typer.echo(_rule_listing(compiler, fired, output_format, note, **extra), nl=False)


def _autofuse_enabled() -> bool:
    """AutoFuse is on in the environment trainings inherit: offer its switch points as candidates."""
    from ..backends.cann.autofuse import FLAGS_ENV, user_enables_autofuse

    return user_enables_autofuse(os.environ.get(FLAGS_ENV))


@app.command(cls=_Command, help=COMPARE_HELP)
def compare(
    on: Path = typer.Option(..., "--on", help="Dump directory of the fusion-on run."),
    off: Path = typer.Option(..., "--off", help="Dump directory of the fusion-off (or fix) run."),
    graph_on: Optional[Path] = typer.Option(None, "--graph-on", help="GE graph dump(s) of the fusion-on run: a file or a directory."),
    graph_off: Optional[Path] = typer.Option(None, "--graph-off", help="GE graph dump(s) of the fusion-off run: a file or a directory."),
    out: Optional[Path] = typer.Option(None, "--out", help="Write compare.csv and compare.json here."),
    output_format: str = typer.Option("text", "--format", help="text, json or csv (what is printed)."),
    step: Optional[int] = typer.Option(None, "--step", help="Dumped step to compare (default: the first)."),
    model: Optional[str] = typer.Option(None, "--model", help="Model name or id (default: the one with most ops)."),
    jobs: Optional[int] = typer.Option(None, "--jobs", help="Worker processes decoding tensors."),
    cosine: float = typer.Option(0.99, "--cosine", help="Bad below this cosine (with --max-abs exceeded)."),
    max_abs: float = typer.Option(0.001, "--max-abs", help="Bad above this max abs error (with --cosine)."),
    cosine_floor: float = typer.Option(0.9, "--cosine-floor", help="Bad below this cosine whatever the abs error."),
    abs_ceiling: float = typer.Option(1.0, "--abs-ceiling", help="Bad above this max abs error whatever the cosine."),
    rel: float = typer.Option(0.05, "--rel", help="Bad above this mean relative error (a uniform scale error keeps cosine 1)."),
    converters: Optional[Path] = typer.Option(None, "--converters", help="Folder of convert_<FROM>_to_<TO>.py format converters."),
) -> None:
    from ..compare.command import run_compare

    raise typer.Exit(
        run_compare(
            on, off, graph_on, graph_off, out, output_format, step, model, jobs, cosine, max_abs,
            cosine_floor=cosine_floor, abs_ceiling=abs_ceiling, rel=rel, converters=converters,
        )  # fmt: skip
    )


@app.command(cls=_Command)
def init(
    sources: list[Path] = typer.Option(
        [], "--from", metavar="<path>", help="Artifacts to take the candidate rules from (repeatable)."
    ),
    command: Optional[str] = typer.Option(None, "--command", help="The command that runs one training."),
    framework: str = typer.Option(
        "generic", "--framework", help="tf1, tf2, torchair, mindspore, generic (CANN); onnxruntime, jax, tensorflow-xla."
    ),
    output: Path = typer.Option(Path(DEFAULT_CONFIG_NAME), "-o", "--output", help="Where to write the config."),
    force: bool = _flag("--force", help="Overwrite an existing file."),
) -> None:
    """Write a commented fusion-dd.yaml for your training."""
    from .init import COMPILER_FRAMEWORKS, FRAMEWORKS, render_compiler_init_config, render_init_config, training_line

    if framework not in FRAMEWORKS and framework not in COMPILER_FRAMEWORKS:
        known = ", ".join([*FRAMEWORKS, *COMPILER_FRAMEWORKS])
        raise UsageError(f"--framework: {framework!r} is not one of {known}")
    if output.exists() and not force:
        raise UsageError(f"{output}: already exists; pass --force to overwrite it")
    if framework in COMPILER_FRAMEWORKS:
        argv = shlex.split(command) if command is not None else None
        names: list[str] = []
        if sources:
            from ..backends.rules_section import _from_artifacts

            class _Reader:
                def error(self, key: str, problem: str) -> UsageError:
                    return UsageError(f"--from: {problem}")

            names, _ = _from_artifacts(_Reader(), [str(path) for path in sources], Path.cwd(), COMPILER_FRAMEWORKS[framework][0])
        output.write_text(render_compiler_init_config(framework=framework, command=argv, names=names), encoding="utf-8")
        typer.echo(f"wrote {output}; check it with: fusion-dd search --dry-run -c {output}")
        typer.echo(f"what the training needs ({framework}): {training_line(framework)}")
        return
    found: list = []
    if sources:
        from ..backends.cann.artifacts import collect_candidates

        candidates = collect_candidates(sources)
        for warning in candidates.warnings:
            typer.echo(f"fusion-dd: warning: {warning}", err=True)
        found = list(candidates.rules)
    argv = None
    if command is not None:
        try:
            argv = shlex.split(command)
        except ValueError as exc:
            raise UsageError(f"--command: cannot split {command!r} ({exc})") from None
    text = render_init_config(
        rules=found,
        sources=[str(path) for path in sources],
        command=argv,
        framework=framework,
        autofuse=_autofuse_enabled(),
    )
    output.write_text(text, encoding="utf-8")
    typer.echo(f"wrote {output} ({len(found)} candidate rules); check it with: fusion-dd search --dry-run -c {output}")


@app.command(cls=_Command)
def demo(
    scenario: Optional[str] = typer.Option(None, "--scenario", help="Which planted fault (see --list-scenarios)."),
    list_scenarios: bool = _flag("--list-scenarios", help="Describe the scenarios and exit."),
    budget: Optional[int] = BudgetOption,
    devices: Optional[str] = DevicesOption,
    jobs: Optional[int] = JobsOption,
    state_dir: Optional[Path] = typer.Option(
        None, "--state-dir",
        help="Where the demo search lives (default ./.fusion-dd-demo, ./.fusion-dd-demo-SCENARIO for the other scenarios).",
    ),
    steps: Optional[int] = typer.Option(None, "--steps", help="Training steps per demo training."),
    noise: float = typer.Option(0.0, "--noise", help="Run-to-run jitter of the demo training (0 = deterministic)."),
    strategy: Optional[str] = typer.Option(None, "--strategy", help="Search strategy (default: the default one)."),
    no_localize: bool = _flag(
        "--no-localize", help="Skip the dumped trainings that name the op and layer each culprit broke."
    ),
    restart: bool = _flag(
        "--restart", help="Move the demo's state directory aside (to NAME.1, NAME.2, ...; nothing is deleted) and start afresh."
    ),
) -> None:
    """Run a whole search against the built-in simulated-NPU training and compare it with what was planted."""
    from ..demo import DEFAULT_SCENARIO, SCENARIOS
    from ..demo.config import default_demo_dir, demo_document, save_demo_config

    if list_scenarios:
        for name, entry in SCENARIOS.items():
            default = " (default)" if name == DEFAULT_SCENARIO else ""
            planted = "; ".join(" + ".join(sorted(culprit)) for culprit in entry.planted)
            typer.echo(f"{name}{default}: {entry.description}")
            typer.echo(f"    planted: {planted}")
        return
    name = scenario or DEFAULT_SCENARIO
    if name not in SCENARIOS:
        raise UsageError(f"--scenario: unknown scenario {name!r}; choose one of {', '.join(SCENARIOS)}")
    if steps is not None and steps < 1:
        raise UsageError("--steps: must be at least 1")
    if noise < 0:
        raise UsageError("--noise: must be zero or positive")
    directory = (state_dir or default_demo_dir(name)).resolve()
    config_path = directory / DEFAULT_CONFIG_NAME
    options: dict[str, Any] = {"steps": steps, "noise": noise, "strategy": strategy, "localize": not no_localize}
    # Everything checked before anything is written, as search checks its options: the errors name
    # --state-dir, --budget and --devices, not the config file the demo has not written yet.
    check_state_dir(directory, "--state-dir", config_path)
    planned = _overridden(parse_config(demo_document(name, **options), config_path), budget=budget, devices=devices, jobs=jobs)
    document = demo_document(name, budget=budget, **options)
    shown_again = None
    if restart:
        _restart_demo(directory)
    else:
        again = [
            "fusion-dd", "demo",
            *(part for option, value in (
                ("--scenario", scenario), ("--steps", steps), ("--noise", noise or None), ("--strategy", strategy),
                ("--budget", budget), ("--devices", devices), ("--jobs", jobs), ("--state-dir", state_dir),
            ) if value is not None for part in (option, str(value))),
            *(["--no-localize"] if no_localize else []), "--restart",
        ]  # fmt: skip
        shown_again = _check_demo_journal(directory, planned, document, shlex.join(again))
    config_path = save_demo_config(directory, name, document)
    typer.echo(f"demo scenario {name!r}: {SCENARIOS[name].description}", err=True)
    typer.echo(f"config: {display_path(config_path)} (a normal fusion-dd.yaml; the trainings are real subprocesses)", err=True)
    if shown_again is not None:
        typer.echo(f"fusion-dd: {shown_again}", err=True)
    config = _overridden(load_config(config_path), budget=None, devices=devices, jobs=jobs)
    result = run_engine(config)
    typer.echo("")
    for line in demo_comparison(result.report, SCENARIOS[name].planted, SCENARIOS[name].damaged):
        typer.echo(line)
    raise typer.Exit(result.exit_code)


def _restart_demo(directory: Path) -> None:
    """``demo --restart``: moved aside like ``search --restart``, unless the directory holds no more
    than the demo's own config (no search started there), which is written afresh anyway."""
    try:
        entries = {entry.name for entry in directory.iterdir()}
    except FileNotFoundError:
        return
    if entries - {DEFAULT_CONFIG_NAME}:
        _restart(directory)


def _check_demo_journal(directory: Path, planned: SearchConfig, document: dict[str, Any], again: str) -> str | None:
    """The demo search already in ``directory``, against the one this command line asks for.

    Another definition (other --steps, --noise, --strategy) is refused here, before the
    demo rewrites its config, with the demo's own way out: the engine's refusal would
    point to ``fusion-dd search --restart``, which knows no demo config. A finished
    search asked for with options that change no definition (--no-localize, --budget)
    is shown again as it ran: the returned line says so, so that its answer is not
    taken for this command line's. (Asked with localization where it ran without,
    the engine localizes it, and says so.)
    """
    from ..config.session import journaled_context
    from ..store.state import definition_changes

    records = read_records(directory / JOURNAL_NAME)
    start = next((record for record in records if record.get("type") == "search_started"), None)
    if start is None or not isinstance(start.get("definition"), dict):
        return None  # no search yet
    started = start["definition"]
    changes = definition_changes(started, planned.with_started_defaults(started).definition())
    where = display_path(directory)
    if changes:
        raise UsageError(
            f"{where}: holds a demo search with other options (changed: {', '.join(changes)}); run this one "
            f"afresh with '{again}' (moves the old one aside, nothing is deleted), or give it another --state-dir"
        )
    old_document = start.get("config_document")
    if "localize" in document and "localize" not in (old_document or {}):
        return None  # the engine localizes the finished search now, and says so
    differ = _document_changes(old_document, document)
    if not differ or not journaled_context(records)[1]:
        return None
    return (
        f"{where}: holds a finished demo search that ran with other options ({', '.join(differ)}); "
        "its answer is shown again as it ran; add --restart for a new one"
    )


def _document_changes(old: Any, new: dict[str, Any]) -> list[str]:
    """The config keys (``localize``, ``search.budget``) whose values differ between two config documents."""
    old = old if isinstance(old, dict) else {}
    changes: list[str] = []
    for key in dict.fromkeys([*old, *new]):
        before, after = old.get(key), new.get(key)
        if before == after:
            continue
        if isinstance(before, dict) and isinstance(after, dict):
            changes += [f"{key}.{sub}" for sub in dict.fromkeys([*before, *after]) if before.get(sub) != after.get(sub)]
        else:
            changes.append(key)
    return changes


def demo_comparison(report: dict[str, Any], planted: Any, damaged: Any = ()) -> list[str]:
    """What the search found next to what the demo planted (and, localized, the layers next to the damaged ones)."""
    found = [frozenset(rule["name"] for rule in culprit["rules"]) for culprit in report.get("culprits", [])]
    expected = [frozenset(culprit) for culprit in planted]
    if report.get("status") in (SearchStatus.INTERRUPTED, SearchStatus.BUDGET_EXHAUSTED):
        # No answer yet: nothing to hold against the plant (the summary says how to go on).
        return [f"planted vs found: the search has not finished ({report['status']}); nothing to compare yet"]
    lines = ["planted vs found:"]
    for culprit in expected:
        mark = "found" if culprit in found else "NOT found"
        lines.append(f"  {' + '.join(sorted(culprit)):<60} {mark}")
    for culprit in found:
        if culprit not in expected:
            lines.append(f"  {' + '.join(sorted(culprit)):<60} found, but not planted")
    verdict = "all planted culprit sets found" if set(found) == set(expected) else "the search and the plant differ"
    lines.append(f"{verdict}; fix verified: {'yes' if report.get('fix_verified') else 'no'}")
    if any("localization" in culprit for culprit in report.get("culprits", [])):
        lines += _demo_localization(report, expected, list(damaged))
    return lines


def _demo_localization(report: dict[str, Any], expected: list[frozenset[str]], damaged: list[Any]) -> list[str]:
    """The layer each planted culprit was localized to, next to the layers the scenario damaged."""
    from ..report.localize import layer_scopes

    by_set = {
        frozenset(rule["name"] for rule in culprit["rules"]): culprit.get("localization") or {}
        for culprit in report.get("culprits", [])
    }
    lines = ["planted damage vs localized:"]
    right = 0
    for culprit, layers in zip(expected, damaged):
        found = by_set.get(culprit)
        planted_text = ", ".join(layers)
        if not found or found.get("op") is None:
            reason = (found or {}).get("reason") or "not found by the search"
            lines.append(f"  {' + '.join(sorted(culprit)):<60} damaged {planted_text}; not localized ({reason})")
            continue
        scopes = layer_scopes(found)
        ok = bool(scopes) and set(scopes) <= set(layers)
        right += ok
        mark = "matches" if ok else "DIFFERS"
        lines.append(
            f"  {' + '.join(sorted(culprit)):<60} damaged {planted_text}; localized to {', '.join(scopes)} "
            f"(op {found['op']}): {mark}"
        )
    verdict = "every planted culprit localized to the layer it damaged" if right == len(expected) else (
        f"{right} of {len(expected)} planted culprits localized to the layer they damaged"
    )
    if (report.get("localization") or {}).get("status") == "incomplete":
        verdict = f"localization incomplete: {right} of {len(expected)} planted culprits localized so far"
    lines.append(verdict)
    return lines


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"fusion-dd {__version__}")
        raise typer.Exit(0)


@app.callback()
def _main(
    version: bool = _flag("--version", callback=_version_callback, is_eager=True, help="Show the version."),
) -> None:
    """fusion-dd: delta debugging of operator-fusion rules over real trainings."""


def _click_error_kind(exc: BaseException) -> str | None:
    """'usage', 'abort' or None, by class name: click lives in ``click`` or, from typer 0.29 on,
    in ``typer._click``; importing either by name would break on the other."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    if "UsageError" in names and hasattr(exc, "format_message"):
        return "usage"
    if "Abort" in names:
        return "abort"
    if "ClickException" in names and hasattr(exc, "format_message"):
        return "click"
    return None


def _usage_lines(exc: Any) -> list[str]:
    """One line naming the problem, the usage line and where help is: never a traceback."""
    lines = [f"fusion-dd: error: {exc.format_message()}"]
    ctx = getattr(exc, "ctx", None)
    if ctx is not None:
        usage = ctx.get_usage().strip().splitlines()
        lines += [line for line in usage[:2] if line.strip()]
        lines.append(f"Try '{ctx.command_path} --help' for help.")
    return lines[:8]


def _crash_log(exc: BaseException) -> Path | None:
    """Write the traceback of an unexpected error to a file the user can attach to a bug report."""
    import tempfile
    import time
    import traceback

    try:
        handle, name = tempfile.mkstemp(prefix=f"fusion-dd-crash-{time.strftime('%Y%m%d-%H%M%S')}-", suffix=".log")
        with open(handle, "w", encoding="utf-8") as log:
            log.write(f"fusion-dd {__version__}\nargv: {sys.argv!r}\n\n")
            log.write("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
        return Path(name)
    except OSError:
        return None


def main(argv: list[str] | None = None) -> None:
    """Console entry point: user errors become one line and exit code 2, never a traceback."""
    try:
        args = sys.argv[1:] if argv is None else list(argv)
        if not args:
            # A bare ``fusion-dd``: the help, and a successful exit.
            args = ["--help"]
        try:
            code = app(args=args, standalone_mode=False, prog_name="fusion-dd")
        except UsageError as exc:
            typer.echo(f"fusion-dd: error: {exc}", err=True)
            sys.exit(ExitCode.USAGE)
        except typer.Exit as exc:
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            typer.echo("fusion-dd: interrupted", err=True)
            sys.exit(ExitCode.INTERRUPTED)
        except OSError as exc:
            # A read-only or full state directory, a vanished file: the path and the errno text.
            where = exc.filename if exc.filename is not None else "fusion-dd"
            typer.echo(f"fusion-dd: error: {where}: {exc.strerror or exc}", err=True)
            sys.exit(ExitCode.USAGE)
        except Exception as exc:  # click usage errors and anything unexpected
            kind = _click_error_kind(exc)
            if kind == "usage":
                for line in _usage_lines(exc):
                    typer.echo(line, err=True)
                sys.exit(ExitCode.USAGE)
            if kind == "abort":
                typer.echo("fusion-dd: interrupted", err=True)
                sys.exit(ExitCode.INTERRUPTED)
            if kind == "click":
                typer.echo(f"fusion-dd: error: {exc.format_message()}", err=True)  # type: ignore[attr-defined]
                sys.exit(int(getattr(exc, "exit_code", ExitCode.USAGE)))
            log = _crash_log(exc)
            where = f"; the traceback is in {log}" if log is not None else ""
            typer.echo(f"fusion-dd: internal error: {type(exc).__name__}: {exc}{where}", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)
    finally:
        if argv is None:
            # The process ends here. The interpreter's exit runs full garbage collections over
            # every object (tens of thousands with numpy and joblib loaded): about 80 ms of CPU
            # per command, for cycles that the exit frees anyway. Frozen, they are not traversed;
            # atexit handlers and finalizers still run. (A caller passing argv keeps its GC.)
            gc.freeze()


if __name__ == "__main__":  # pragma: no cover
    main()
