"""``train.launcher: slurm``: each training its own Slurm job, on a real Slurm where one runs.

The searches need a working Slurm (``scripts/start-slurm`` starts a single-node
one; ``.ci/run`` does so where it can) whose node offers ``gres/gpu`` (the
script's fake GPUs), so that Slurm itself sets ``CUDA_VISIBLE_DEVICES`` for each
job; they skip, saying why, elsewhere. The rest (job script, time limit, config
checks, the registry) runs everywhere.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from fusion_dd.config.settings import load_config
from fusion_dd.core.errors import UsageError
from tests.support.cli import CULPRIT, write_config
from tests.support.clusters import slurm_in_use
from tests.support.fake_training import FAKE_TRAIN, run_fusion_dd, start_fusion_dd, wrapper_script
from tests.support.processes import wait_until
from tests.support.searches import FEW_RULES, assert_found, journal, started_trials


@pytest.fixture
def slurm_cluster() -> Iterator[None]:
    with slurm_in_use():  # skips where Slurm cannot run a search
        yield


def slurm_config(tmp_path: Path, prelude: str | None = None, *train_args: str, **slurm: object) -> Path:
    """The CLI tests' smaller search with every training a Slurm job holding one (fake) GPU."""
    config = write_config(tmp_path, "--culprits", CULPRIT, *train_args)
    document = yaml.safe_load(config.read_text())
    document["rules"] = FEW_RULES
    del document["train"]["devices"]
    document["train"].update(
        launcher="slurm", device_env="CUDA_VISIBLE_DEVICES", kill_grace=2,
        slurm={"gres": "gpu:1", "cpus_per_task": 1, "mem": "200M", "max_jobs": 2, **slurm},
    )
    if prelude is not None:
        said = f'open({str(tmp_path / "started.log")!r}, "a").write(os.environ["FUSION_DD_TRIAL_ID"] + "\\n")\n'
        command = document["train"]["command"]
        command[command.index(str(FAKE_TRAIN))] = str(wrapper_script(tmp_path / "wrapped_train.py", said + prelude))
    config.write_text(yaml.safe_dump(document))
    return config


def job_ids(tmp_path: Path) -> dict[str, str]:
    """Trial id -> Slurm job id, as the journal has them."""
    return {r["trial_id"]: r["placement"]["slurm_job_id"] for r in journal(tmp_path) if r["type"] == "trial_launched"}


def queued_jobs_of(tmp_path: Path) -> list[str]:
    """Jobs of this search still in squeue (by the job names the launcher gives)."""
    names = {json.loads(p.read_text())["name"] for p in (tmp_path / ".fusion-dd" / "trials").glob("*/slurm_job.json")}
    done = subprocess.run(["squeue", "-h", "-o", "%i %j %T"], capture_output=True, text=True, timeout=30, check=True)
    return [line for line in done.stdout.splitlines() if line.split()[1] in names]


def job_state(tmp_path: Path, job: str) -> str | None:
    """The state squeue lists for one job of this search, None once it is no longer queued."""
    return next((line.split()[2] for line in queued_jobs_of(tmp_path) if line.split()[0] == job), None)


def started_again(job: str) -> bool:
    """Whether a requeued job left the pending state; while it has not, it is asked to start now
    (one ``scontrol update`` a call, so a hold Slurm set after an earlier ask is lifted too)."""
    listed = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True, timeout=30)
    if listed.stdout.strip() not in ("PENDING", "REQUEUED", "REQUEUE_HOLD", "COMPLETING"):
        return True
    subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], capture_output=True, timeout=30)
    return False


# --- everywhere -----------------------------------------------------------------------


def test_the_time_limit_is_the_trainings_timeout_with_room_for_its_grace_or_the_one_configured():
    from fusion_dd.runner.slurm_launcher import time_limit

    assert time_limit(None, 120, 10) == "8"  # (120 + 10 + 300) s, in whole minutes, rounded up
    assert time_limit(None, 3600, 10) == "66"
    assert time_limit("2:00:00", 120, 10) == "2:00:00"
    assert time_limit(None, None, 10) is None


def test_the_job_script_asks_for_what_train_slurm_says_and_runs_the_job_body(tmp_path):
    from fusion_dd.config.settings import SlurmConfig
    from fusion_dd.runner.launcher import TrialRequest
    from fusion_dd.runner.metrics import MetricSpec
    from fusion_dd.runner.slurm_launcher import job_script
    from fusion_dd.runner.trial import TrialSpec

    spec = TrialSpec(trial_id="0007", trial_dir=tmp_path / "trial dir", command=("true",), workdir=".",
                     base_dir=tmp_path, env={}, device=("slurm/1",), device_env="ASCEND_RT_VISIBLE_DEVICES",
                     timeout=600, repeat=0, switch_text="", grace=10)
    request = TrialRequest(spec=spec, metric=MetricSpec.from_text(r"a=(\S+)", "a", "max", None))
    settings = SlurmConfig(partition="npu", gres="npu:1", account="proj", qos="low", mem="64G", cpus_per_task=8,
                           extra=("--constraint=910b", "--exclusive"))
    script = job_script(request, "fusion-dd-x-0007", settings, ("/shared/.proof", "tok"))
    lines = script.splitlines()
    assert lines[0] == "#!/bin/sh"
    for option in ("--job-name=fusion-dd-x-0007", "--partition=npu", "--gres=npu:1", "--time=16", "--account=proj",
                   "--qos=low", "--mem=64G", "--cpus-per-task=8", "--constraint=910b", "--exclusive"):
        assert f"#SBATCH {option}" in lines, (option, script)
    assert lines[-1].startswith("exec ") and "fusion_dd.runner.slurm_job" in lines[-1]
    assert f"'{(tmp_path / 'trial dir').resolve()}'" in lines[-1]  # quoted: the path has a space


@pytest.mark.parametrize(
    ("slurm", "message"),
    [
        ({"max_jobs": 0}, "train.slurm.max_jobs: must be at least 1"),
        ({"time": "two hours"}, "train.slurm.time"),
        ({"extra": "--exclusive"}, "train.slurm.extra: must be a list"),
        ({"extra": ["exclusive"]}, r"train.slurm.extra\[0\]: must be one sbatch option"),
        ({"gres": "npu:1 --x"}, "train.slurm.gres: must be one word"),
        ({"partiton": "a"}, "train.slurm.partiton: unknown key; did you mean 'train.slurm.partition'"),
    ],
)
def test_a_bad_slurm_setting_is_refused_naming_the_key(tmp_path, slurm, message):
    config = write_config(tmp_path, "--culprits", CULPRIT)
    document = yaml.safe_load(config.read_text())
    document["train"].update(launcher="slurm", slurm=slurm)
    config.write_text(yaml.safe_dump(document))
    with pytest.raises(UsageError, match=message):
        load_config(config)


def test_slurm_settings_are_read_and_extra_lines_may_carry_their_sbatch_prefix(tmp_path):
    config = write_config(tmp_path, "--culprits", CULPRIT)
    document = yaml.safe_load(config.read_text())
    document["train"].update(launcher="slurm", slurm={"partition": "npu", "gres": "npu:1", "time": "1-00:00:00",
                                                      "extra": ["#SBATCH --exclusive"], "max_jobs": 8, "mem": "64G"})
    config.write_text(yaml.safe_dump(document))
    train = load_config(config).train
    assert (train.launcher, train.slurm.partition, train.slurm.time, train.slurm.max_jobs) == ("slurm", "npu", "1-00:00:00", 8)
    assert train.slurm.extra == ("--exclusive",)


def test_scontrol_lines_are_read_as_keys_and_values():
    from fusion_dd.runner.slurm_commands import parse_scontrol

    facts = parse_scontrol("JobId=12 JobName=fusion-dd-a-0001 JobState=TIMEOUT Reason=TimeLimit ExitCode=0:15 NodeList=n1")
    assert (facts["JobState"], facts["ExitCode"], facts["NodeList"]) == ("TIMEOUT", "0:15", "n1")


def test_a_launcher_another_package_registers_is_found_by_its_entry_point(monkeypatch):
    from importlib import metadata

    from fusion_dd.runner import registry

    entry = metadata.EntryPoint(name="mycluster", value="tests.runner.test_slurm_launcher:_third_party",
                                group=registry.ENTRY_POINT_GROUP)
    shadow = metadata.EntryPoint(name="local", value="nowhere:nothing", group=registry.ENTRY_POINT_GROUP)
    monkeypatch.setattr(registry.metadata, "entry_points", lambda group: [entry, shadow])
    assert registry.launcher_names() == ("local", "dask", "slurm", "mycluster")

    class Config:
        class train:
            launcher = "mycluster"

    assert registry.launcher_for(Config) == ("made for", Config)
    Config.train.launcher = "local"
    assert type(registry.launcher_for(Config)).__name__ == "LocalLauncher"  # a built-in is never replaced



def test_train_launcher_takes_a_registered_name_and_looks_for_them_only_when_not_built_in(tmp_path, monkeypatch):
    from importlib import metadata

    from fusion_dd.runner import registry

    entry = metadata.EntryPoint(name="mycluster", value="tests.runner.test_slurm_launcher:_third_party",
                                group=registry.ENTRY_POINT_GROUP)
    looked: list[str] = []

    def entry_points(group):
        looked.append(group)
        return [entry]

    monkeypatch.setattr(registry.metadata, "entry_points", entry_points)
    path = tmp_path / "fusion-dd.yaml"
    for launcher in ("local", "slurm"):
        path.write_text(f"rules: {{GraphFusion: [LayerNormFusionPass, GeluFusionPass]}}\ntrain: {{command: [t], launcher: {launcher}}}\n"
                        "metric: {pattern: 'a=(\\S+)'}\n")
        assert load_config(path).train.launcher == launcher
    assert looked == [], "a built-in launcher needs no look at other packages' metadata"
    path.write_text(path.read_text().replace("launcher: slurm", "launcher: mycluster"))
    assert load_config(path).train.launcher == "mycluster"
    path.write_text(path.read_text().replace("launcher: mycluster", "launcher: nosuch"))
    with pytest.raises(UsageError, match="train.launcher: must be one of local, dask, slurm, mycluster"):
        load_config(path)


def _third_party(config):
    return ("made for", config)


def test_without_the_slurm_tools_the_launcher_is_refused_in_one_line(tmp_path):
    slurm_config(tmp_path)
    result = run_fusion_dd("search", cwd=tmp_path, env={"PATH": str(tmp_path / "nothing-here")})
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().count("\n") == 0 and "not found on PATH" in result.stderr, result.stderr
    assert not (tmp_path / "launch.log").exists()


def test_dry_run_says_what_each_job_asks_for_and_that_the_device_is_slurms(tmp_path):
    slurm_config(tmp_path, max_jobs=3, partition="npu", extra=["--exclusive"])
    result = run_fusion_dd("search", "--dry-run", cwd=tmp_path, env={"PATH": str(tmp_path / "no-slurm-needed")})
    assert result.returncode == 0, result.stderr
    assert "CUDA_VISIBLE_DEVICES=<as Slurm sets it in the job>" in result.stdout, result.stdout
    assert "launcher: slurm: one sbatch job per trial, at most 3 at once" in result.stdout
    assert "--partition=npu --gres=gpu:1 --time=8 --cpus-per-task=1 --mem=200M --ntasks=1 --exclusive" in result.stdout
    assert "on 3 device slot(s)" in result.stdout
    assert "sbatch --test-only: not asked (sbatch is not on this host's PATH)" in result.stdout
    assert not (tmp_path / ".fusion-dd" / "trials").exists()


# --- on a real Slurm --------------------------------------------------------------------


@pytest.mark.cluster
def test_a_search_of_slurm_jobs_finds_the_culprit_with_each_trainings_job_and_device_from_slurm(tmp_path, slurm_cluster):
    slurm_config(tmp_path)
    result = run_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    report = assert_found(tmp_path)
    ids = job_ids(tmp_path)
    assert len(set(ids.values())) == len(ids) and all(job.isdigit() for job in ids.values())
    by_trial = {entry["trial_id"]: entry for entry in report["trials"]}
    assert {trial: by_trial[trial]["slurm_job_id"] for trial in ids} == ids
    seen = {e["trial_id"]: e["device"] for e in map(json.loads, (tmp_path / "launch.log").read_text().splitlines())}
    assert set(seen) == set(ids)
    for trial, job in ids.items():
        facts = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True, text=True, timeout=30).stdout
        if facts:  # the controller still remembers it (MinJobAge)
            assert "JobName=fusion-dd-" in facts and f"-{trial} " in facts
        claim = json.loads((tmp_path / ".fusion-dd" / "trials" / trial / "claim.json").read_text())
        # The device the training saw is the one Slurm granted the job (CUDA_VISIBLE_DEVICES for --gres=gpu:1).
        assert claim["job_id"] == job and claim["device_env"] == "CUDA_VISIBLE_DEVICES"
        assert seen[trial] == claim["device"] and claim["device"] in ("0", "1")
    assert not queued_jobs_of(tmp_path)


@pytest.mark.cluster
def test_a_job_scancelled_mid_training_is_a_crash_retried_as_a_new_trial(tmp_path, slurm_cluster):
    # The first all-on training sleeps until it is cancelled; nothing else does.
    prelude = (
        "marker = os.path.join(os.path.dirname(__file__), 'slow-once')\n"
        "if os.environ['FUSION_DD_TRIAL_ID'] == '0002' and not os.path.exists(marker):\n"
        "    open(marker, 'w').close()\n"
        "    time.sleep(300)\n"
    )
    slurm_config(tmp_path, prelude)
    coordinator = start_fusion_dd(tmp_path, "search", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_until(lambda: "0002" in started_trials(tmp_path) and "0002" in job_ids(tmp_path), 90, "0002 never ran")
        subprocess.run(["scancel", job_ids(tmp_path)["0002"]], check=True, timeout=30)
        _, stderr = coordinator.communicate(timeout=180)
    finally:
        if coordinator.poll() is None:
            coordinator.kill()
            coordinator.wait()
    assert coordinator.returncode == 0, stderr
    assert_found(tmp_path)
    records = journal(tmp_path)
    crash = next(r for r in records if r["type"] == "trial_finished" and r["trial_id"] == "0002")
    assert crash["kind"] == "crash" and "cancelled" in crash["reason"], crash
    started = {r["trial_id"]: (tuple(r["config"]), r["repeat"]) for r in records if r["type"] == "trial_started"}
    retries = [t for t, (config, repeat) in started.items() if config == started["0002"][0] and t != "0002"]
    assert retries, started
    # Nothing ran twice in one trial directory.
    assert sorted(started_trials(tmp_path)) == sorted(set(started_trials(tmp_path)))


@pytest.mark.cluster
def test_ctrl_c_with_jobs_pending_and_running_leaves_no_job_of_the_search_in_the_queue(tmp_path, slurm_cluster):
    # Another user's job holds one of the two GPUs: of the search's two reference jobs, one runs, one waits.
    blocker = subprocess.run(["sbatch", "--parsable", "--gres=gpu:1", "--mem=50M", "-o", "/dev/null",
                              "--wrap", "sleep 300"], capture_output=True, text=True, timeout=30, check=True).stdout.strip()
    slurm_config(tmp_path, "time.sleep(300)\n")
    coordinator = start_fusion_dd(tmp_path, "search", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_until(lambda: len(started_trials(tmp_path)) == 1, 90, "no reference started")
        wait_until(lambda: sorted(line.split()[2] for line in queued_jobs_of(tmp_path)) == ["PENDING", "RUNNING"],
                   60, "not one job running and one pending")
        status = run_fusion_dd("status", cwd=tmp_path)
        assert "Slurm job " in status.stdout, status.stdout
        asked = time.monotonic()
        coordinator.send_signal(signal.SIGINT)
        _, stderr = coordinator.communicate(timeout=60)
        took = time.monotonic() - asked
    finally:
        if coordinator.poll() is None:
            coordinator.kill()
            coordinator.wait()
        subprocess.run(["scancel", blocker], timeout=30)
    assert coordinator.returncode == 130, stderr
    assert took < 2 + 5 + 10, took  # kill_grace + 5 s, and room for a loaded machine
    # No job of the search is left in the queue, so no training of it can start afterwards.
    assert not queued_jobs_of(tmp_path)
    assert started_trials(tmp_path) == ["0002"] or started_trials(tmp_path) == ["0001"]
    pending = next(t for t in ("0001", "0002") if t not in started_trials(tmp_path))
    assert not (tmp_path / ".fusion-dd" / "trials" / pending / "claim.json").exists()


@pytest.mark.cluster
def test_a_killed_coordinator_resumes_by_re_attaching_to_its_jobs_without_training_again(tmp_path, slurm_cluster):
    slurm_config(tmp_path, "time.sleep(4)\n")
    coordinator = start_fusion_dd(tmp_path, "search", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: len(started_trials(tmp_path)) == 2 and len(job_ids(tmp_path)) == 2, 90, "nothing ran")
        coordinator.send_signal(signal.SIGKILL)
        coordinator.wait(timeout=30)
    finally:
        if coordinator.poll() is None:
            coordinator.kill()
            coordinator.wait()
    running = job_ids(tmp_path)
    assert len(queued_jobs_of(tmp_path)) == 2  # the jobs outlive their coordinator
    result = run_fusion_dd("resume", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "adopting 2 training(s)" in result.stdout + result.stderr
    assert_found(tmp_path)
    records = journal(tmp_path)
    finished = {r["trial_id"]: r for r in records if r["type"] == "trial_finished"}
    assert all(finished[trial]["kind"] == "metric" for trial in running)
    assert sorted(started_trials(tmp_path)) == sorted(set(started_trials(tmp_path)))  # none trained twice


@pytest.mark.cluster
def test_a_requeued_job_is_the_same_trial_continuing_not_a_crash(tmp_path, slurm_cluster):
    # The first all-on run sleeps (to be requeued meanwhile); its run after the requeue does not.
    prelude = (
        "if os.environ['FUSION_DD_TRIAL_ID'] == '0002' and os.environ.get('SLURM_RESTART_COUNT', '0') == '0':\n"
        "    time.sleep(300)\n"
    )
    slurm_config(tmp_path, prelude)
    coordinator = start_fusion_dd(tmp_path, "search", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_until(lambda: "0002" in started_trials(tmp_path) and "0002" in job_ids(tmp_path), 90, "0002 never ran")
        job = job_ids(tmp_path)["0002"]
        subprocess.run(["scontrol", "requeue", job], check=True, timeout=30)
        requeued_at = time.time()
        # Slurm holds a requeued job back for a while (its BeginTime, set as its first run has ended,
        # which a loaded node makes late): ask again until this job leaves the pending state.
        wait_until(lambda: job_state(tmp_path, job) == "PENDING", 60, "not requeued")
        # Slurm revokes the first run's credential with one-second resolution: a job started again
        # within that second is killed as non-startable ("Job credential revoked"), so ask for the
        # start only from the next whole second on.
        wait_until(lambda: time.time() >= math.floor(requeued_at) + 2, 5, "the clock stood still")
        wait_until(lambda: started_again(job), 120, "the requeued job never started again", every=1.0)
        _, stderr = coordinator.communicate(timeout=240)
    finally:
        if coordinator.poll() is None:
            coordinator.kill()
            coordinator.wait()
    assert coordinator.returncode == 0, stderr
    assert_found(tmp_path)
    records = journal(tmp_path)
    finished = next(r for r in records if r["type"] == "trial_finished" and r["trial_id"] == "0002")
    assert finished["kind"] == "metric", finished  # the requeued run's result, under the same trial
    claim = json.loads((tmp_path / ".fusion-dd" / "trials" / "0002" / "claim.json").read_text())
    assert (claim["job_id"], claim["restarts"]) == (job, 1)
    started = [tuple(r["config"]) for r in records if r["type"] == "trial_started"]
    assert len(started) == len(set(started)) or started.count(started[1]) == 1  # the requeued trial not retried


@pytest.mark.parametrize(
    ("state", "exit_code", "said"),
    [
        ("CANCELLED", "0:15", "was cancelled"),
        ("TIMEOUT", "0:15", "was killed at its time limit (train.slurm.time)"),
        ("OUT_OF_MEMORY", "0:125", "ran out of memory"),
        ("NODE_FAIL", "0:0", "lost its node"),
        ("PREEMPTED", "0:15", "was preempted and not requeued"),
        ("FAILED", "1:0", "failed"),
    ],
)
def test_a_job_that_ended_without_a_result_is_a_crash_saying_how_slurm_ended_it(tmp_path, monkeypatch, state,
                                                                                exit_code, said):
    from fusion_dd.runner import slurm_commands
    from fusion_dd.runner.launcher import TrialRequest
    from fusion_dd.runner.metrics import MetricSpec
    from fusion_dd.runner.slurm_launcher import SlurmHandle
    from fusion_dd.runner.trial import TrialSpec

    spec = TrialSpec(trial_id="0003", trial_dir=tmp_path / "0003", command=("true",), workdir=".", base_dir=tmp_path,
                     env={}, device=("slurm/1",), device_env="CUDA_VISIBLE_DEVICES", timeout=60, repeat=0,
                     switch_text="")
    spec.trial_dir.mkdir()
    (spec.trial_dir / "claim.json").write_text(json.dumps({"job_id": "77", "restarts": 0}))
    request = TrialRequest(spec=spec, metric=MetricSpec.from_text(r"a=(\S+)", "a", "max", None))
    monkeypatch.setattr(slurm_commands, "job_facts",
                        lambda job: {"JobState": state, "ExitCode": exit_code, "NodeList": "n1"})

    class Queue:
        state_dir = tmp_path

        def state_of(self, job_id):
            return state

        def forget(self, job_id):
            pass

    result = SlurmHandle(Queue(), request, "77").wait()
    assert not result.cancelled and result.kind == "crash", result
    assert f"Slurm job 77 {said}" in result.reason and f"state {state}" in result.reason, result.reason
    assert "not trained again in its directory" in result.reason


def test_a_requeued_run_that_slurm_could_not_start_is_a_crash_not_a_requeue_forever(tmp_path, monkeypatch):
    # Seen on a real Slurm: requeued, then started within the second of the requeue, the job is
    # killed as "non-startable: Job credential revoked" and ends FAILED, its restart count still 1.
    # That count proved the requeue once; it must not prove it again for the run that then failed.
    from fusion_dd.runner import slurm_commands, slurm_launcher
    from fusion_dd.runner.launcher import TrialRequest
    from fusion_dd.runner.metrics import MetricSpec
    from fusion_dd.runner.slurm_launcher import SlurmHandle
    from fusion_dd.runner.trial import TrialSpec

    spec = TrialSpec(trial_id="0002", trial_dir=tmp_path / "0002", command=("true",), workdir=".", base_dir=tmp_path,
                     env={}, device=("slurm/1",), device_env="CUDA_VISIBLE_DEVICES", timeout=60, repeat=0,
                     switch_text="")
    spec.trial_dir.mkdir()
    (spec.trial_dir / "claim.json").write_text(json.dumps({"job_id": "77", "restarts": 0}))
    (spec.trial_dir / "slurm_stopped.json").write_text(json.dumps({"job_id": "77", "restarts": 0}))
    request = TrialRequest(spec=spec, metric=MetricSpec.from_text(r"a=(\S+)", "a", "max", None))
    monkeypatch.setattr(slurm_launcher, "REQUEUE_WATCH_STOPPED_SECONDS", 3.0)
    monkeypatch.setattr(slurm_launcher, "RESULT_GRACE_SECONDS", 0.0)
    asked = []

    def facts(job):
        asked.append(job)
        return {"JobState": "FAILED", "ExitCode": "1:0", "Restarts": "1", "NodeList": "n1"}

    monkeypatch.setattr(slurm_commands, "job_facts", facts)

    class Queue:
        state_dir = tmp_path

        def state_of(self, job_id):
            return "CANCELLED" if len(asked) < 2 else "FAILED"

        def forget(self, job_id):
            pass

    result = SlurmHandle(Queue(), request, "77").wait()
    assert result.kind == "crash" and "Slurm job 77 failed" in result.reason, result
    assert len(asked) < 40, len(asked)  # one requeue accepted, then one short watch: not an endless one


def test_a_job_of_a_node_that_cannot_see_the_state_directory_stops_the_search_in_one_line(tmp_path, monkeypatch):
    from fusion_dd.runner import slurm_commands
    from fusion_dd.runner.launcher import TrialRequest
    from fusion_dd.runner.metrics import MetricSpec
    from fusion_dd.runner.slurm_job import NOT_SHARED
    from fusion_dd.runner.slurm_launcher import SlurmHandle
    from fusion_dd.runner.trial import TrialSpec

    spec = TrialSpec(trial_id="0001", trial_dir=tmp_path / "0001", command=("true",), workdir=".", base_dir=tmp_path,
                     env={}, device=("slurm/1",), device_env="CUDA_VISIBLE_DEVICES", timeout=60, repeat=0,
                     switch_text="")
    request = TrialRequest(spec=spec, metric=MetricSpec.from_text(r"a=(\S+)", "a", "max", None))
    monkeypatch.setattr(slurm_commands, "job_facts",
                        lambda job: {"JobState": "FAILED", "ExitCode": f"{NOT_SHARED}:0", "NodeList": "n7"})

    class Queue:
        state_dir = tmp_path

        def state_of(self, job_id):
            return "FAILED"

        def forget(self, job_id):
            pass

    with pytest.raises(UsageError, match="Slurm job 5 on n7 cannot see it at the same path"):
        SlurmHandle(Queue(), request, "5").wait()


def test_the_job_body_refuses_a_state_directory_it_cannot_see_and_a_trial_another_job_claimed(tmp_path, monkeypatch):
    from fusion_dd.runner import slurm_job

    monkeypatch.setattr(slurm_job.signal, "signal", lambda signum, handler: None)  # not pytest's own handlers
    trial = tmp_path / "0001"
    trial.mkdir()
    token = tmp_path / ".proof"
    token.write_text("right")
    assert slurm_job.main([str(trial), str(token), "wrong"]) == slurm_job.NOT_SHARED
    assert list(trial.iterdir()) == []  # nothing written
    (trial / "claim.json").write_text(json.dumps({"job_id": "8", "restarts": 0, "host": "n1"}))
    monkeypatch.setenv("SLURM_JOB_ID", "9")
    (trial / "slurm_request.pickle").write_bytes(__import__("pickle").dumps(_request(trial)))
    assert slurm_job.main([str(trial), str(token), "right"]) == slurm_job.CLAIM_TAKEN
    assert not (trial / "output.log").exists()  # not trained


def _request(trial: Path):
    from fusion_dd.runner.launcher import TrialRequest
    from fusion_dd.runner.metrics import MetricSpec
    from fusion_dd.runner.trial import TrialSpec

    spec = TrialSpec(trial_id="0001", trial_dir=trial, command=("true",), workdir=".", base_dir=trial.parent,
                     env={}, device=("slurm/1",), device_env="CUDA_VISIBLE_DEVICES", timeout=60, repeat=0,
                     switch_text="")
    return TrialRequest(spec=spec, metric=MetricSpec.from_text(r"a=(\S+)", "a", "max", None))


# --- a controller that does not answer ---------------------------------------------------


@pytest.mark.parametrize(
    "said, unreachable",
    [
        ("sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)", True),
        ("sbatch: error: Batch job submission failed: Socket timed out on send/recv operation", True),
        ("sbatch: error: Batch job submission failed: Slurm backup controller in standby mode", True),
        ("sbatch: error: Batch job submission failed: Invalid partition name specified", False),
        ("sbatch: error: Batch job submission failed: Requested node configuration is not available", False),
    ],
)
def test_sbatch_that_cannot_reach_the_controller_is_an_outage_and_one_it_refuses_names_why(monkeypatch, said,
                                                                                           unreachable):
    # The messages are Slurm's own (slurm_errno.c), as sbatch printed them on this machine's Slurm.
    from fusion_dd.runner import slurm_commands

    monkeypatch.setattr(slurm_commands, "_run", lambda argv, timeout=0: subprocess.CompletedProcess(argv, 1, "", said + "\n"))
    expected = slurm_commands.SlurmUnavailable if unreachable else slurm_commands.SubmissionRefused
    with pytest.raises(expected) as raised:
        slurm_commands.submit("job.sh", ".")
    assert str(raised.value).endswith(said.removeprefix("sbatch: error: ")), raised.value
    assert "sbatch: error:" not in str(raised.value)


def _launcher_without_slurm(tmp_path: Path, monkeypatch, submit, queued=lambda name: []):
    from fusion_dd.config.settings import SlurmConfig
    from fusion_dd.runner import slurm_commands, slurm_launcher

    monkeypatch.setattr(slurm_commands, "require_tools", lambda: None)
    monkeypatch.setattr(slurm_commands, "submit", submit)
    monkeypatch.setattr(slurm_commands, "jobs_named", queued)
    monkeypatch.setattr(slurm_launcher, "POLL_SECONDS", 0.01)
    return slurm_launcher.SlurmLauncher(SlurmConfig(max_jobs=1), tmp_path)


def test_a_controller_that_never_answered_this_session_is_refused_in_one_line(tmp_path, monkeypatch):
    from fusion_dd.runner import slurm_commands

    def submit(script, cwd):
        raise slurm_commands.SlurmUnavailable("sbatch: Unable to contact slurm controller (connect failure)")

    launcher = _launcher_without_slurm(tmp_path, monkeypatch, submit)
    with pytest.raises(UsageError, match=r"Slurm does not answer \(sbatch: Unable to contact slurm controller"):
        launcher.start(_request(tmp_path / "0001"))


def test_a_submission_waits_out_an_outage_and_takes_the_job_an_unanswered_sbatch_left_queued(tmp_path, monkeypatch,
                                                                                             capsys):
    # The controller answered (the first job went in), then went away; an sbatch that timed out
    # may have been taken all the same: once the queue answers again, that job is the trial's.
    from fusion_dd.runner import slurm_commands

    submitted: list[str] = []
    answers = iter(["101", slurm_commands.SlurmUnavailable("sbatch: Socket timed out on send/recv operation")])

    def submit(script, cwd):
        answer = next(answers, slurm_commands.SlurmUnavailable("sbatch: Unable to contact slurm controller"))
        if isinstance(answer, Exception):
            raise answer
        submitted.append(script)
        return answer

    asked: list[str] = []

    def queued(name):
        asked.append(name)
        if len(asked) < 3:
            raise slurm_commands.SlurmUnavailable("squeue: Unable to contact slurm controller")
        return ["102"]

    launcher = _launcher_without_slurm(tmp_path, monkeypatch, submit, queued)
    assert launcher.start(_request(tmp_path / "0001")).job_id == "101"
    handle = launcher.start(_request(tmp_path / "0002"))
    assert handle.job_id == "102" and len(submitted) == 1  # not submitted a second time
    assert asked == [launcher.job_name(_request(tmp_path / "0002"))] * 3
    err = capsys.readouterr().err
    assert "Slurm does not answer" in err and "still waiting to submit trial 0001" in err


def test_ctrl_c_ends_the_wait_for_a_controller_and_the_trial_was_never_started(tmp_path, monkeypatch):
    import threading

    from fusion_dd.runner import slurm_commands
    from fusion_dd.runner.launcher import NotStarted

    calls = {"submit": 0}
    cancel = threading.Event()

    def submit(script, cwd):
        calls["submit"] += 1
        if calls["submit"] == 1:
            return "101"
        cancel.set()  # Ctrl-C while the controller does not answer
        raise slurm_commands.SlurmUnavailable("sbatch: Unable to contact slurm controller")

    def queued(name):
        raise slurm_commands.SlurmUnavailable("squeue: Unable to contact slurm controller")

    launcher = _launcher_without_slurm(tmp_path, monkeypatch, submit, queued)
    launcher.start(_request(tmp_path / "0001"))
    with pytest.raises(NotStarted, match="was never submitted: cancelled while Slurm did not answer"):
        launcher.start(_request(tmp_path / "0002"), cancel=cancel)
    assert calls["submit"] == 2 and not (tmp_path / "0002" / "slurm_job.json").exists()


WAITING = "still waiting to submit trial"


@contextlib.contextmanager
def controller_down_while_a_job_waits(tmp_path: Path) -> Iterator[tuple[subprocess.Popen, Path, Callable[[], None]]]:
    """A search whose references train, then slurmctld stopped until the coordinator says a job waits
    to be submitted: yields the coordinator, its stderr file and a call that starts slurmctld again
    (made on leaving when the body did not). The coordinator is killed when the body fails."""
    if os.geteuid() != 0:
        pytest.skip("stopping and starting slurmctld needs root")
    from tests.support import REPO

    slurm_config(tmp_path, "if os.environ['FUSION_DD_TRIAL_ID'] in ('0001', '0002'):\n    time.sleep(2)\n")
    errors = tmp_path / "coordinator.err"
    restarted: list[subprocess.CompletedProcess[str]] = []

    def restart() -> None:
        if not restarted:
            restarted.append(subprocess.run([str(REPO / "scripts" / "start-slurm")], capture_output=True, text=True,
                                            timeout=120))
            assert restarted[0].returncode == 0, restarted[0].stderr

    with slurm_in_use(alone=True):
        with open(errors, "w") as stderr:
            coordinator = start_fusion_dd(tmp_path, "search", stdout=subprocess.DEVNULL, stderr=stderr)
        try:
            try:
                wait_until(lambda: len(started_trials(tmp_path)) == 2, 90, "the references never ran")
                subprocess.run(["pkill", "-x", "slurmctld"], check=True, timeout=30)
                wait_until(lambda: WAITING in errors.read_text() or coordinator.poll() is not None, 120,
                           "nothing happened")
                assert WAITING in errors.read_text(), errors.read_text()
                yield coordinator, errors, restart
            finally:
                restart()
        finally:
            if coordinator.poll() is None:
                coordinator.kill()
                coordinator.wait()


@pytest.mark.cluster
def test_ctrl_c_while_slurm_does_not_answer_charges_no_budget_for_the_job_never_submitted(tmp_path):
    """Ctrl-C while the next job waits for a controller that does not answer: that trial is
    journaled cancelled and never launched, so the budget is not charged for it."""
    from fusion_dd.store.journal import read_records
    from fusion_dd.store.state import replay

    with controller_down_while_a_job_waits(tmp_path) as (coordinator, errors, _):
        coordinator.send_signal(signal.SIGINT)
        coordinator.wait(timeout=120)
    said = errors.read_text()
    assert coordinator.returncode == 130, said
    assert "Traceback" not in said and "internal error" not in said
    waiting = said.split(WAITING, 1)[1].split()[0]
    records = journal(tmp_path)
    assert not any(r["type"] == "trial_launched" and r["trial_id"] == waiting for r in records)
    cancelled = [r for r in records if r["type"] == "trial_cancelled" and r["trial_id"] == waiting]
    assert len(cancelled) == 1 and cancelled[0]["launched"] is False, cancelled
    assert "never submitted" in cancelled[0]["reason"]
    state = replay(read_records(tmp_path / ".fusion-dd" / "journal.jsonl"))
    assert not state.trials[waiting].costs_budget
    assert state.launched == sum(1 for r in records if r["type"] == "trial_launched")


def test_a_job_sbatch_refuses_stops_the_search_naming_train_slurm_and_the_script(tmp_path, monkeypatch):
    from fusion_dd.runner import slurm_commands

    def submit(script, cwd):
        raise slurm_commands.SubmissionRefused("sbatch refused the job: Batch job submission failed: Invalid partition name specified")

    launcher = _launcher_without_slurm(tmp_path, monkeypatch, submit)
    with pytest.raises(UsageError) as refused:
        launcher.start(_request(tmp_path / "0001"))
    message = str(refused.value)
    assert message.startswith("train.slurm: sbatch refused the job: Batch job submission failed: Invalid partition")
    assert "(trial 0001)" in message and "trials/0001/slurm_job.sh" in message and "\n" not in message


@pytest.mark.cluster
def test_a_controller_that_dies_mid_search_is_waited_for_and_the_search_goes_on(tmp_path):
    """slurmctld stopped while the references train, started again once a job waits to be
    submitted: nothing is lost, nothing trains twice, the answer is found."""
    with controller_down_while_a_job_waits(tmp_path) as (coordinator, errors, restart):
        restart()
        coordinator.wait(timeout=240)
    said = errors.read_text()
    assert coordinator.returncode == 0, said
    assert "Traceback" not in said and "internal error" not in said
    assert_found(tmp_path)
    assert sorted(started_trials(tmp_path)) == sorted(set(started_trials(tmp_path)))  # none trained twice
    assert not queued_jobs_of(tmp_path)


@pytest.mark.cluster
def test_dry_run_asks_slurm_whether_it_would_take_the_job_and_fails_where_it_would_not(tmp_path, slurm_cluster):
    slurm_config(tmp_path)
    taken = run_fusion_dd("search", "--dry-run", cwd=tmp_path)
    assert taken.returncode == 0, taken.stderr
    assert "sbatch --test-only: Slurm would take the job (sbatch: Job " in taken.stdout, taken.stdout
    slurm_config(tmp_path, partition="nosuch")
    refused = run_fusion_dd("search", "--dry-run", cwd=tmp_path)
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.strip().count("\n") == 0, refused.stderr
    assert "train.slurm: sbatch refused the job: allocation failure: Invalid partition name specified" in refused.stderr
    assert not queued_jobs_of(tmp_path) and not (tmp_path / ".fusion-dd" / "trials").exists()
