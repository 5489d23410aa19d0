"""Searches on a real dask.distributed cluster on 127.0.0.1 (scheduler and workers as processes).

Each worker is one device (``ASCEND_DEVICE_ID`` in its environment,
``--nthreads 1 --resources device=1``). Where ``unshare`` is allowed (CI runs
as root) every worker runs in a PID namespace of its own, so the coordinator and
the trainings never share a ``/proc``: a test cannot pass because the
coordinator happened to see a pid it must not rely on. Where it is not, the
kill and resume tests skip with the reason (probed once); the others run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.support.cli import CULPRIT, write_config
from tests.support.clusters import (
    DASK,
    DEVICES,
    PID_NAMESPACES,
    DaskCluster,
    dask_config,
    dask_refusal,
    distributed,
    trial_processes,
    unshare_refusal,
)
from tests.support.fake_training import FAKE_TRAIN, cli_env, run_fusion_dd, start_fusion_dd, wrapper_script
from tests.support.processes import wait_until
from tests.support.searches import FEW_RULES, assert_found, journal, started_trials


@pytest.fixture
def separate_pid_namespaces(cluster: DaskCluster) -> None:
    """For the kill and resume tests: they must not pass on a /proc the coordinator shares with the trainings."""
    refusal = unshare_refusal(*PID_NAMESPACES)
    if refusal is not None:
        pytest.skip(f"needs the workers in PID namespaces of their own: {refusal}")


def finished_trainings(tmp_path: Path) -> list[tuple[tuple[str, ...], int]]:
    records = journal(tmp_path)
    started = {r["trial_id"]: (tuple(r["config"]), r["repeat"]) for r in records if r["type"] == "trial_started"}
    return sorted(started[r["trial_id"]] for r in records if r["type"] == "trial_finished")


@pytest.mark.cluster
def test_a_search_on_the_cluster_trains_what_a_local_one_does_on_the_devices_it_journals(tmp_path, cluster):
    local = tmp_path / "local"
    local.mkdir()
    write_config(local, "--culprits", CULPRIT)
    assert run_fusion_dd("search", cwd=local).returncode == 0

    remote = tmp_path / "remote"
    remote.mkdir()
    dask_config(remote, cluster, small=False)
    result = run_fusion_dd("search", cwd=remote)
    assert result.returncode == 0, result.stderr
    report = assert_found(remote)
    # The same trainings counted (a training cancelled because an earlier position failed may
    # or may not have started, on either launcher: that depends on timing, and costs nothing).
    assert finished_trainings(remote) == finished_trainings(local)

    # The device in the journal is the device the training saw, and FUSION_DD_TRIAL_ID its trial.
    seen = {entry["trial_id"]: entry["device"] for entry in map(json.loads, (remote / "launch.log").read_text().splitlines())}
    launched = {r["trial_id"]: r["placement"] for r in journal(remote) if r["type"] == "trial_launched"}
    assert set(seen) == set(launched)
    assert all(launched[trial]["device"] == [seen[trial]] and launched[trial]["launcher"] == "dask" for trial in seen)
    assert {placement["worker_name"] for placement in launched.values()} <= {f"npu{d}" for d in DEVICES}
    for entry in report["trials"]:
        assert entry["device"] == seen[entry["trial_id"]] and entry["worker"] == f"npu{entry['device']}"
        assert entry["host"]

    # The devices are the cluster's (train.devices is not given): HOST:ID/WORKER per device worker, journaled
    # for the session (status, estimate and the report's timeline read them), given to each trial
    # (the live view's device column), and the parallelism every question was asked with.
    records = journal(remote)
    host = report["trials"][0]["host"]
    slots = [[f"{host}:{device}/npu{device}"] for device in DEVICES]
    assert [r["devices"] for r in records if r["type"] == "session_started"] == [slots]
    started = {r["trial_id"]: r["device"] for r in records if r["type"] == "trial_started"}
    assert all(started[trial] == [f"{host}:{launched[trial]['device'][0]}/{launched[trial]['worker_name']}"]
               for trial in launched)
    assert {r["width"] for r in records if r["type"] == "question"} == {len(DEVICES)}
    # Workers that join or restart later kill leftovers on their device first (fusion_dd.runner.dask_worker).
    plugins = cluster.client.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.worker_plugins))
    assert "fusion-dd-leftovers" in plugins

    # No device ever ran two trainings at once (the supervisors' own start and end times).
    spans: dict[str, list[tuple[float, float]]] = {}
    for trial, placement in launched.items():
        status = json.loads((remote / ".fusion-dd" / "trials" / trial / "status.json").read_text())
        spans.setdefault(placement["device"][0], []).append((status["start"], status["end"]))
    for device, times in spans.items():
        times.sort()
        assert all(end <= later_start for (_, end), (later_start, _) in zip(times, times[1:])), device


@pytest.mark.cluster
def test_devices_no_worker_offers_are_refused_with_the_cluster_listed(tmp_path, cluster):
    dask_config(tmp_path, cluster, devices=[7])
    result = run_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "train.devices" in result.stderr and ":0" in result.stderr and ":1" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "launch.log").exists()


@pytest.mark.cluster
def test_dry_run_lists_the_cluster_devices_or_says_in_one_line_that_it_cannot_reach_the_scheduler(tmp_path, cluster, monkeypatch):
    dask_config(tmp_path, cluster)
    result = run_fusion_dd("search", "--dry-run", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    host = socket.gethostname()
    assert f"; {len(DEVICES)} found:" in result.stdout, result.stdout
    for device in DEVICES:
        assert f"    {host}:{device}/npu{device} (tcp://127.0.0.1:" in result.stdout
        assert f"  ASCEND_DEVICE_ID={device} (in " in result.stdout
    assert f"on {len(DEVICES)} device slot(s)" in result.stdout
    assert not (tmp_path / "launch.log").exists()

    # A scheduler nobody answers at (dask's connect timeout, shortened): one line, exit 2, nothing on stdout.
    address = "tcp://127.0.0.1:1"
    refused = run_fusion_dd("search", "--dry-run", "--scheduler", address, cwd=tmp_path,
                            env={"DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "1s"})
    assert refused.returncode == 2, refused.stderr
    assert refused.stdout == "" and refused.stderr.count("\n") == 1, refused.stderr
    assert f"--scheduler {address}: cannot connect to the dask scheduler" in refused.stderr
    # An address dask cannot parse is refused before a Client exists (a failed one hangs at exit).
    from fusion_dd.core.errors import UsageError
    from fusion_dd.runner.dask_launcher import DaskLauncher

    def no_client(*args, **kwargs):
        raise AssertionError("a Client was made for an address dask cannot parse")

    monkeypatch.setattr(distributed, "Client", no_client)
    with pytest.raises(UsageError, match="tcp://127.0.0.1:notaport: cannot connect to the dask scheduler"):
        DaskLauncher("tcp://127.0.0.1:notaport", tmp_path, "ASCEND_DEVICE_ID")


@pytest.mark.cluster
def test_a_starting_worker_kills_leftover_trainings_on_its_device_before_it_takes_work(cluster):
    from fusion_dd.runner.dask_worker import DEVICE_MARK_ENV, PLUGIN_NAME, WORKER_MARK_ENV, LeftoverCleaner, process_mark

    sleeper = [sys.executable, "-c", "import time; time.sleep(120)"]
    gone_worker = "999999999:0"  # the worker that started them is dead

    def process(device: str | None, worker: str = gone_worker) -> subprocess.Popen[bytes]:
        marks = {DEVICE_MARK_ENV: device, WORKER_MARK_ENV: worker} if device is not None else {}
        return subprocess.Popen(sleeper, env={**os.environ, **marks})

    leftovers = [process("71"), process("72")]
    spared = [
        process("73"),  # a training on a device no starting worker has
        process("71", worker=process_mark(os.getpid()) or ""),  # a training whose worker is alive
        process(None),  # not a training of fusion-dd
    ]
    started: list[str] = []
    try:
        # As a search does: every worker that joins later runs the plugin before it takes tasks.
        cluster.client.register_plugin(LeftoverCleaner("ASCEND_DEVICE_ID"), name=PLUGIN_NAME)
        # Device 71: the --preload form, with the variable named as scripts/local-cluster does
        # (the registered plugin finds no ASCEND_DEVICE_ID there, so only the preload can kill it).
        started.append("preloaded")
        cluster.start_worker("", "preloaded", (), "--preload", "fusion_dd.runner.dask_worker", namespace=False,
                             env={"NPU_UNDER_TEST": "71", "FUSION_DD_DEVICE_ENV": "NPU_UNDER_TEST"})
        # Device 72: a worker (re)started without the preload: the plugin the scheduler holds.
        started.append("npu72")
        cluster.start_worker("72", namespace=False)
        cluster.wait_for(len(DEVICES) + 2)
        assert [leftover.wait(timeout=10) for leftover in leftovers] == [-signal.SIGKILL] * 2
        assert [other.poll() for other in spared] == [None] * 3
    finally:
        for name in started:
            if name in cluster.workers:
                cluster.stop_worker(name)
        for child in leftovers + spared:
            child.kill()
            child.wait()


@pytest.mark.cluster
def test_a_trial_the_scheduler_forgot_is_adopted_on_its_worker_and_not_trained_again(tmp_path, cluster):
    """The path of a scheduler restart that the worker outlived: the scheduler no longer holds the
    task, the training still runs; resume checks on the recorded worker (pids only there) and waits."""
    from fusion_dd.runner.dask_launcher import DaskLauncher
    from fusion_dd.runner.launcher import TrialRequest
    from fusion_dd.runner.metrics import MetricSpec
    from fusion_dd.runner.trial import TrialSpec

    script = tmp_path / "train.py"
    script.write_text("import os, time\nopen(os.environ['STARTS'], 'a').write('x\\n')\ntime.sleep(3)\nprint('a=0.75')\n")
    state = tmp_path / "state"
    spec = TrialSpec(trial_id="0001", trial_dir=state / "trials" / "0001", command=(sys.executable, str(script)),
                     workdir=str(tmp_path), base_dir=tmp_path, env={"STARTS": str(tmp_path / "starts")},
                     device=("?",), device_env="ASCEND_DEVICE_ID", timeout=None, repeat=0, switch_text="")
    request = TrialRequest(spec=spec, metric=MetricSpec.from_text(r"a=(\S+)", "a", "max", None))
    first = DaskLauncher(cluster.address, state, "ASCEND_DEVICE_ID")
    try:
        request = dataclasses.replace(request, spec=dataclasses.replace(spec, device=first.slots()[0]))
        handle = first.start(request)
        placement = handle.placement.to_json()
        # The scheduler lets go of the task; the worker's thread (and the training) run on.
        first.client.cancel([handle.future], force=True)
        wait_until(lambda: first.task_state(handle.key) is None, 10, "the scheduler still holds the task")
    finally:
        first.close()
    assert not (spec.trial_dir / "status.json").exists(), "the training ended too soon for this test"
    second = DaskLauncher(cluster.address, state, "ASCEND_DEVICE_ID")
    try:
        adopted = second.adopt(request, placement)
        assert adopted is not None and adopted.future is not None, "not checked on its worker"
        result = adopted.wait()
    finally:
        second.close()
    assert (result.kind, result.value) == ("metric", 0.75), result
    assert (tmp_path / "starts").read_text() == "x\n", "trained twice"


@pytest.mark.cluster
def test_a_state_directory_a_worker_cannot_see_is_refused_before_any_training(tmp_path, cluster):
    refusal = unshare_refusal("-m")
    if refusal is not None:
        pytest.skip(f"needs a worker in a mount namespace of its own: {refusal}")
    hidden = tmp_path / "search"
    hidden.mkdir()
    dask_config(hidden, cluster)
    # A worker that sees an empty directory where the state directory is (as on a host without the mount).
    cluster.start_worker("2", name="blind", prefix=("unshare", "-m", "sh", "-c",
                                                    f'mount -t tmpfs none {hidden} && exec "$@"', "sh"))
    try:
        cluster.wait_for(len(DEVICES) + 1)
        result = run_fusion_dd("search", cwd=hidden)
    finally:
        cluster.stop_worker("blind")
    assert result.returncode == 2, result.stderr
    assert "blind" in result.stderr and "cannot see it" in result.stderr and "Traceback" not in result.stderr
    assert not (hidden / "launch.log").exists()
    assert not (hidden / ".fusion-dd" / "trials").exists()


@pytest.mark.cluster
def test_a_worker_killed_mid_training_loses_only_that_trial_which_is_retried_as_a_new_one(
    tmp_path, cluster, separate_pid_namespaces
):
    slow = 'if os.environ.get("FUSION_DD_TRIAL_ID") == "0001": time.sleep(120)\n'
    dask_config(tmp_path, cluster, slow)
    trial_dir = tmp_path / ".fusion-dd" / "trials" / "0001"
    coordinator = start_fusion_dd(tmp_path, "search", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    name = ""
    try:
        wait_until(lambda: "0001" in started_trials(tmp_path), 60, "trial 0001 never started")
        name = json.loads((trial_dir / "claim.json").read_text())["worker_name"]
        assert trial_processes(trial_dir)
        os.kill(cluster.worker_pid(name), signal.SIGKILL)
        # Its watcher stops the orphaned training (grace 2 s), though no worker is there to do it.
        wait_until(lambda: not trial_processes(trial_dir), 30, "the orphaned training kept running")
        _, stderr = coordinator.communicate(timeout=180)
        assert coordinator.returncode == 0, stderr
    finally:
        if coordinator.poll() is None:
            coordinator.kill()
            coordinator.wait()
        if name:
            cluster.stop_worker(name, wait=False)  # what is left of it (its namespace's PID 1)
            cluster.start_worker(name.removeprefix("npu"))
            cluster.wait_for(len(DEVICES))
    assert_found(tmp_path)
    ids = started_trials(tmp_path)
    assert len(ids) == len(set(ids)), "a trial directory saw two trainings"
    records = journal(tmp_path)
    lost = next(r for r in records if r["type"] == "trial_finished" and r["trial_id"] == "0001")
    assert lost["kind"] == "crash" and "died" in lost["reason"]
    baseline = [r["trial_id"] for r in records if r["type"] == "trial_started" and r["config"] == []]
    assert baseline[0] == "0001" and len(baseline) == 2  # retried as a new trial


def _running_worker(trials: Path) -> str | None:
    """The name of a worker whose training runs now (claimed, no status yet), if any."""
    for claim in sorted(trials.glob("*/claim.json")):
        if not (claim.parent / "status.json").exists():
            with contextlib.suppress(OSError, ValueError):
                return json.loads(claim.read_text())["worker_name"]
    return None


@pytest.mark.cluster
def test_a_worker_killed_for_good_after_four_trainings_is_survived_within_a_bound(tmp_path, cluster):
    """Three workers without the preload, as the README allows; one SIGKILLed mid-training after
    four trainings started, and never restarted: the other two finish the search, right."""
    cluster.start_worker("2")
    killed = ""
    try:
        cluster.wait_for(len(DEVICES) + 1)
        dask_config(tmp_path, cluster, "time.sleep(2)\n")
        trials = tmp_path / ".fusion-dd" / "trials"
        coordinator = start_fusion_dd(tmp_path, "search", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            wait_until(lambda: len(started_trials(tmp_path)) >= 4 and _running_worker(trials) is not None, 120,
                       "four trainings never started")
            killed = _running_worker(trials) or ""
            os.kill(cluster.worker_pid(killed), signal.SIGKILL)
            killed_at, asked = time.time(), time.monotonic()
            _, stderr = coordinator.communicate(timeout=240)
            took = time.monotonic() - asked
        finally:
            if coordinator.poll() is None:
                coordinator.kill()
                coordinator.wait()
        assert coordinator.returncode == 0, stderr
    finally:
        for name in {killed, "npu2"} - {""}:
            cluster.stop_worker(name, wait=False)
        if killed and killed != "npu2":
            cluster.start_worker(killed.removeprefix("npu"))
        cluster.wait_for(len(DEVICES))
    assert took < 180, took  # a dead worker's slot is shared by the live ones, not waited for
    assert_found(tmp_path)
    ids = started_trials(tmp_path)
    assert len(ids) == len(set(ids)), "a trial directory saw two trainings"
    records = journal(tmp_path)
    lost = [r for r in records if r["type"] == "trial_finished" and r["kind"] == "crash"]
    assert len(lost) == 1 and "died" in lost[0]["reason"], lost
    claims = [json.loads(path.read_text()) for path in (tmp_path / ".fusion-dd" / "trials").glob("*/claim.json")]
    assert not [c for c in claims if c["time"] > killed_at and c["worker_name"] == killed], "sent to the dead worker"


@pytest.mark.cluster
def test_a_worker_that_closes_gracefully_leaves_its_training_to_finish_and_its_result_is_kept(tmp_path, cluster):
    """Retired (as ``adapt`` or an operator does), the worker says it is closing: its watcher stays
    with the training, which ends as it would have, once, and its result is the trial's."""
    slow = 'if os.environ.get("FUSION_DD_TRIAL_ID") == "0001": time.sleep(12)\n'
    dask_config(tmp_path, cluster, slow)
    trial_dir = tmp_path / ".fusion-dd" / "trials" / "0001"
    coordinator = start_fusion_dd(tmp_path, "search", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    name = ""
    try:
        wait_until(lambda: "0001" in started_trials(tmp_path), 60, "trial 0001 never started")
        claim = json.loads((trial_dir / "claim.json").read_text())
        name = claim["worker_name"]
        cluster.client.retire_workers(workers=[claim["worker"]], close_workers=True)
        wait_until(lambda: (trial_dir / "detached.json").exists(), 30, "the watcher never stayed with the training")
        # dask waits a while for the task's thread, then the process ends (a nanny kills it): here at once.
        with contextlib.suppress(AssertionError):
            os.kill(cluster.worker_pid(name), signal.SIGKILL)
        wait_until(lambda: not any(info.get("name") == name for info in
                                   cluster.client.scheduler_info(n_workers=-1)["workers"].values()), 30, "not retired")
        assert not (trial_dir / "status.json").exists(), "the training ended before its worker did: no test"
        assert trial_processes(trial_dir), "the training died with its closing worker"
        _, stderr = coordinator.communicate(timeout=180)
        assert coordinator.returncode == 0, stderr
    finally:
        if coordinator.poll() is None:
            coordinator.kill()
            coordinator.wait()
        if name:
            if name in cluster.workers:
                cluster.stop_worker(name, wait=False)
            cluster.start_worker(name.removeprefix("npu"))
            cluster.wait_for(len(DEVICES))
    assert_found(tmp_path)
    ids = started_trials(tmp_path)
    assert len(ids) == len(set(ids)), "a trial directory saw two trainings"
    records = journal(tmp_path)
    kept = next(r for r in records if r["type"] == "trial_finished" and r["trial_id"] == "0001")
    assert kept["kind"] == "metric", kept
    assert json.loads((trial_dir / "status.json").read_text())["exit_code"] == 0
    baseline = [r["trial_id"] for r in records if r["type"] == "trial_started" and r["config"] == []]
    assert baseline == ["0001"], "the kept training was trained again as a new trial"


@pytest.mark.cluster
def test_a_killed_coordinator_resumes_by_adopting_the_running_trainings(tmp_path, cluster, separate_pid_namespaces):
    slow = 'if os.environ.get("FUSION_DD_TRIAL_ID") in ("0001", "0002"): time.sleep(6)\n'
    dask_config(tmp_path, cluster, slow)
    coordinator = start_fusion_dd(tmp_path, "search", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: len(started_trials(tmp_path)) == 2, 60, "the references never started")
        coordinator.send_signal(signal.SIGKILL)
        coordinator.wait(timeout=30)
    finally:
        if coordinator.poll() is None:
            coordinator.kill()
            coordinator.wait()
    result = run_fusion_dd("resume", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert_found(tmp_path)
    ids = started_trials(tmp_path)
    assert len(ids) == len(set(ids)), "a training ran twice"
    records = journal(tmp_path)
    assert not [r for r in records if r["type"] == "trial_cancelled"], "a running training was given up"
    finished = {r["trial_id"] for r in records if r["type"] == "trial_finished"}
    assert {"0001", "0002"} <= finished


@pytest.mark.cluster
def test_ctrl_c_stops_every_remote_training_and_frees_the_devices(tmp_path, cluster):
    dask_config(tmp_path, cluster, "time.sleep(300)\n")
    trials = tmp_path / ".fusion-dd" / "trials"
    coordinator = start_fusion_dd(tmp_path, "search", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_until(lambda: len(started_trials(tmp_path)) == 2, 60, "the references never started")
        journal_path = tmp_path / ".fusion-dd" / "journal.jsonl"
        wait_until(lambda: journal_path.read_text().replace(' ', '').count('"type":"trial_launched"') == 2, 30, "not journaled")
        status = run_fusion_dd("status", cwd=tmp_path)
        occupied = status.stdout[status.stdout.index("devices in use, per host:"):]
        assert "device 0 #000" in occupied and "device 1 #000" in occupied, status.stdout
        coordinator.send_signal(signal.SIGINT)
        _, stderr = coordinator.communicate(timeout=60)
    finally:
        if coordinator.poll() is None:
            coordinator.kill()
            coordinator.wait()
    assert coordinator.returncode == 130, stderr
    assert not trial_processes(trials), "a remote training outlived Ctrl-C"
    cancelled = {r["trial_id"] for r in journal(tmp_path) if r["type"] == "trial_cancelled"}
    assert cancelled == {"0001", "0002"}
    # Both devices take new work at once.
    futures = [
        cluster.client.submit(os.getpid, key=f"probe-{device}-{time.time()}", pure=False, resources={"device": 1})
        for device in DEVICES
    ]
    assert all(isinstance(future.result(timeout=10), int) for future in futures)


@pytest.mark.cluster
def test_ctrl_c_while_the_tasks_wait_for_busy_workers_exits_at_once_and_nothing_trains_afterwards(tmp_path, cluster):
    """Another client's tasks hold both device workers: the search's tasks are submitted and wait."""
    release = distributed.Event(f"release-{time.time()}", client=cluster.client)
    name = release.name

    def hold() -> bool:
        from distributed import Event

        return Event(name).wait(120)

    blockers = [cluster.client.submit(hold, key=f"hold-{device}-{time.time()}", pure=False, resources={"device": 1})
                for device in DEVICES]
    wait_until(lambda: all(f.status == "pending" for f in blockers) and len(cluster.client.processing()) == 2
               and all(len(tasks) == 1 for tasks in cluster.client.processing().values()), 30, "the holders never ran")
    dask_config(tmp_path, cluster, "")
    journal_path = tmp_path / ".fusion-dd" / "journal.jsonl"
    coordinator = start_fusion_dd(tmp_path, "search", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_until(lambda: journal_path.exists() and journal_path.read_text().count('"trial_started"') == 2, 60,
                   "the references were never submitted")
        asked = time.monotonic()
        coordinator.send_signal(signal.SIGINT)
        _, stderr = coordinator.communicate(timeout=60)
        took = time.monotonic() - asked
    finally:
        if coordinator.poll() is None:
            coordinator.kill()
            coordinator.wait()
        release.set()
    assert coordinator.returncode == 130, stderr
    assert took < 2 + 5, took  # kill_grace + 5 s
    assert [f.result(timeout=60) for f in blockers] == [True, True]
    # Both devices free again: a probe on each runs only after whatever was queued there before it.
    probes = [cluster.client.submit(os.getpid, key=f"probe-{device}-{time.time()}", pure=False, resources={"device": 1})
              for device in DEVICES]
    assert all(isinstance(probe.result(timeout=60), int) for probe in probes)
    assert started_trials(tmp_path) == [], "a training started after fusion-dd exited"
    assert not list((tmp_path / ".fusion-dd" / "trials").glob("*/claim.json"))
    records = journal(tmp_path)
    cancelled = {r["trial_id"]: r.get("launched") for r in records if r["type"] == "trial_cancelled"}
    assert cancelled == {"0001": False, "0002": False}, "a trial that never ran is journaled as never launched"
    assert not [r for r in records if r["type"] == "trial_launched"]


def test_without_dask_the_launcher_is_refused_in_one_line(tmp_path):
    blocker = tmp_path / "blocker" / "distributed"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('blocked for a test')\n")
    search = tmp_path / "search"
    search.mkdir()
    write_config(search, "--culprits", CULPRIT)
    result = run_fusion_dd("search", "--scheduler", "tcp://127.0.0.1:1", cwd=search,
                           env={"PYTHONPATH": str(tmp_path / "blocker")})
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "fusion-dd[dask]" in result.stderr, result.stderr


def test_a_launcher_nobody_provides_is_refused_naming_the_key_and_the_known_ones(tmp_path):
    from fusion_dd.config.settings import load_config
    from fusion_dd.core.errors import UsageError

    config = write_config(tmp_path, "--culprits", CULPRIT)
    document = yaml.safe_load(config.read_text())
    document["train"].update(launcher="cloud")
    config.write_text(yaml.safe_dump(document))
    with pytest.raises(UsageError, match="train.launcher: must be one of local, dask, slurm"):
        load_config(config)


def test_the_dask_launcher_from_the_file_takes_its_scheduler_from_the_command_line(tmp_path):
    """``train.launcher: dask`` without an address is fine until the search starts: --scheduler may give it."""
    from fusion_dd.config.settings import load_config
    from fusion_dd.core.errors import UsageError
    from fusion_dd.runner.registry import launcher_for

    config = write_config(tmp_path, "--culprits", CULPRIT)
    document = yaml.safe_load(config.read_text())
    document["train"].update(launcher="dask")
    config.write_text(yaml.safe_dump(document))
    loaded = load_config(config)
    with pytest.raises(UsageError, match="train.launcher: dask needs the scheduler"):
        launcher_for(loaded)
    chosen = loaded.with_overrides(scheduler="tcp://127.0.0.1:8786").train
    assert (chosen.launcher, chosen.scheduler) == ("dask", "tcp://127.0.0.1:8786")
    result = run_fusion_dd("search", cwd=tmp_path)
    assert result.returncode == 2 and "train.launcher: dask needs the scheduler" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "launch.log").exists()


def test_a_scheduler_file_gives_the_address_and_one_without_it_is_refused_in_one_line(tmp_path):
    from fusion_dd.config.settings import load_config
    from fusion_dd.core.errors import UsageError
    from fusion_dd.runner.dask_launcher import _address_in

    (tmp_path / "scheduler.json").write_text(json.dumps({"address": "tcp://127.0.0.1:8786"}))
    assert _address_in(str(tmp_path / "scheduler.json")) == "tcp://127.0.0.1:8786"
    with pytest.raises(UsageError, match="no scheduler address in it"):
        _address_in(str(tmp_path / "missing.json"))
    config = write_config(tmp_path, "--culprits", CULPRIT)
    document = yaml.safe_load(config.read_text())
    document["train"].update(launcher="dask", scheduler_file="scheduler.json", scheduler="tcp://x:1")
    config.write_text(yaml.safe_dump(document))
    with pytest.raises(UsageError, match="train.scheduler_file: give either"):
        load_config(config)


def test_the_local_launcher_never_gives_up_a_training_another_launcher_may_still_run(tmp_path):
    """Resuming a dask search with the local launcher must not train again what may still run on a worker."""
    from fusion_dd.core.errors import UsageError
    from fusion_dd.runner.launcher import LocalLauncher, TrialRequest
    from fusion_dd.runner.metrics import MetricSpec
    from fusion_dd.runner.trial import TrialSpec

    spec = TrialSpec(trial_id="0001", trial_dir=tmp_path / "0001", command=("true",), workdir=".", base_dir=tmp_path,
                     env={}, device=("npu0",), device_env="ASCEND_DEVICE_ID", timeout=None, repeat=0, switch_text="")
    request = TrialRequest(spec=spec, metric=MetricSpec.from_text(r"a=(\S+)", "a", "max", None))
    with pytest.raises(UsageError, match="--launcher dask"):
        LocalLauncher().adopt(request, {"launcher": "dask", "host": "elsewhere", "job_id": "k"})


def test_a_trial_cancelled_while_every_device_worker_is_busy_is_never_submitted(tmp_path):
    """Ctrl-C while ``start`` waits for a free worker: ``NotStarted``, and nothing reached the scheduler."""
    import threading

    from fusion_dd.runner.dask_launcher import DaskLauncher
    from fusion_dd.runner.launcher import NotStarted, TrialRequest
    from fusion_dd.runner.metrics import MetricSpec
    from fusion_dd.runner.trial import TrialSpec

    class NoScheduler:
        def __getattr__(self, name: str) -> object:
            raise AssertionError(f"the scheduler was asked ({name}) for a trial cancelled before its submission")

    class Busy(DaskLauncher):
        def __init__(self) -> None:  # no cluster: its only device worker is busy with another trial
            self.client = NoScheduler()
            self._lock = threading.Lock()
            self._slots = {"h:0": "tcp://w:1"}
            self._busy = {"tcp://w:1"}

        def worker_alive(self, address: str) -> bool:
            return True

        def slots(self) -> dict[str, str]:
            return self._slots

        def key_of(self, request: TrialRequest) -> str:
            return "fusion-dd-k-0001"

    spec = TrialSpec(trial_id="0001", trial_dir=tmp_path / "0001", command=("true",), workdir=".", base_dir=tmp_path,
                     env={}, device=("h:0",), device_env="ASCEND_DEVICE_ID", timeout=None, repeat=0, switch_text="")
    request = TrialRequest(spec=spec, metric=MetricSpec.from_text(r"a=(\S+)", "a", "max", None))
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(NotStarted, match="never submitted"):
        Busy().start(request, cancel)


def test_resume_asks_the_scheduler_first_then_the_recorded_worker(tmp_path):
    """The decision of ``DaskLauncher.adopt`` for each way a trial can have been left (no cluster needed)."""
    from fusion_dd.runner.dask_launcher import CLAIM_FILE, RESULT_FILE, DaskHandle, DaskLauncher
    from fusion_dd.runner.launcher import TrialRequest
    from fusion_dd.runner.metrics import MetricSpec
    from fusion_dd.runner.trial import TrialSpec

    class Decided(DaskLauncher):
        def __init__(self, held: str | None, alive: set[str]) -> None:  # no client: the answers are given
            self.held, self.alive, self.checked = held, alive, []

        def task_state(self, key: str) -> str | None:
            return self.held

        def worker_alive(self, address: str) -> bool:
            return address in self.alive

        def key_of(self, request: TrialRequest) -> str:
            return "fusion-dd-k-0001"

        def _check_on_worker(self, request, place, worker):
            self.checked.append(worker)
            return "checked"

    spec = TrialSpec(trial_id="0001", trial_dir=tmp_path / "0001", command=("true",), workdir=".", base_dir=tmp_path,
                     env={}, device=("h:0",), device_env="ASCEND_DEVICE_ID", timeout=None, repeat=0, switch_text="")
    request = TrialRequest(spec=spec, metric=MetricSpec.from_text(r"a=(\S+)", "a", "max", None))
    placement = {"launcher": "dask", "host": "h", "job_id": "fusion-dd-k-0001", "device": ["0"], "worker": "tcp://w:1"}

    def adopt(held: str | None, alive: set[str]) -> tuple[object, list]:
        launcher = Decided(held, alive)
        return launcher.adopt(request, placement), launcher.checked

    # Never claimed, and the scheduler does not hold it: it never ran.
    assert adopt(None, {"tcp://w:1"}) == (None, [])
    spec.trial_dir.mkdir()
    (spec.trial_dir / CLAIM_FILE).write_text(json.dumps({"worker": "tcp://w:1", "host": "h", "device": "0"}))
    # Still held by the scheduler: re-attached to the same task (its key), no check needed.
    held, checked = adopt("processing", set())
    assert isinstance(held, DaskHandle) and held.key == "fusion-dd-k-0001" and held.future is None and checked == []
    # Forgotten by the scheduler (restarted): checked on the recorded worker while it is there...
    assert adopt(None, {"tcp://w:1"}) == ("checked", ["tcp://w:1"])
    # ...lost with it when it is gone (its watcher stopped the training)...
    assert adopt("forgotten", set()) == (None, [])
    # ...unless the training ended: then its result is read here, from the shared directory (no worker needed).
    (spec.trial_dir / "status.json").write_text(json.dumps({"exit_code": 0, "start": 1.0, "end": 2.0}))
    (spec.trial_dir / "output.log").write_text("a=0.25\n")
    ended, checked = adopt(None, set())
    result = ended.wait()
    assert checked == [] and not result.cancelled and result.value == 0.25, result
    # A result the task kept is taken as it is, from any state.
    (spec.trial_dir / RESULT_FILE).write_text(json.dumps({"cancelled": False, "kind": "metric", "value": 0.5}))
    finished, checked = adopt(None, set())
    assert finished.wait().value == 0.5 and checked == []


def test_a_task_takes_only_a_dead_workers_trainings_on_its_device_for_leftovers(tmp_path):
    """Before its training starts, a task clears its device of orphans; workers on one host that each
    see their own device as the same id (Slurm, containers) must not take each other's trainings."""
    from fusion_dd.runner.dask_launcher import _device_leftovers
    from fusion_dd.runner.dask_worker import DEVICE_MARK_ENV, WORKER_MARK_ENV, process_mark

    def process(worker: str, trial_dir: str) -> subprocess.Popen[bytes]:
        marks = {DEVICE_MARK_ENV: "75", WORKER_MARK_ENV: worker, "FUSION_DD_TRIAL_DIR": trial_dir}
        return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env={**os.environ, **marks})

    orphan = process("999999999:0", "/other")  # Popen returns once each has exec'd, with its environment
    children = [orphan, process(process_mark(os.getpid()) or "", "/other"), process("999999999:0", "/own")]
    try:
        assert _device_leftovers("75", "FUSION_DD_TRIAL_DIR=/own") == [orphan.pid]
    finally:
        for child in children:
            child.kill()
            child.wait()


def test_a_detached_training_is_no_leftover_while_its_watcher_lives_and_a_task_waits_for_it(tmp_path):
    """A training whose worker closed and whose watcher stays with it (detached.json) is spared by
    starting workers and waited for by tasks; once its watcher is gone it is an orphan like any."""
    from fusion_dd.runner.dask_launcher import _clear_device
    from fusion_dd.runner.dask_worker import DEVICE_MARK_ENV, WORKER_MARK_ENV, detached_trainings, leftovers, process_mark

    def training(trial_dir: Path) -> subprocess.Popen[bytes]:
        trial_dir.mkdir()
        marks = {DEVICE_MARK_ENV: "76", WORKER_MARK_ENV: "999999999:0", "FUSION_DD_TRIAL_DIR": str(trial_dir)}
        return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env={**os.environ, **marks})

    kept, orphan = training(tmp_path / "kept"), training(tmp_path / "orphan")
    (tmp_path / "kept" / "detached.json").write_text(json.dumps({"reaper": process_mark(os.getpid())}))
    (tmp_path / "orphan" / "detached.json").write_text(json.dumps({"reaper": "999999999:0"}))  # its watcher died
    try:
        assert leftovers("76") == [orphan.pid]
        assert detached_trainings("76") == [kept.pid]
        # A task for this device waits while the detached training runs, and gives up once cancelled.
        own = tmp_path / "own"
        own.mkdir()
        (own / "cancel.request").write_text("{}")
        assert _clear_device("76", f"FUSION_DD_TRIAL_DIR={own}", 0.1, own) is False
        assert kept.poll() is None
    finally:
        for child in (kept, orphan):
            child.kill()
            child.wait()


class _Proxy:
    """A TCP proxy on 127.0.0.1 in front of the scheduler, whose connections the test can cut."""

    def __init__(self, target: str) -> None:
        import threading

        host, port = target.removeprefix("tcp://").rsplit(":", 1)
        self.target = (host, int(port))
        self.server = socket.create_server(("127.0.0.1", 0))
        self.address = f"tcp://127.0.0.1:{self.server.getsockname()[1]}"
        self.open: list[socket.socket] = []
        self.refusing = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import threading

        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            if self.refusing.is_set():
                client.close()
                continue
            upstream = socket.create_connection(self.target)
            self.open += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)

    def cut(self, seconds: float) -> None:
        """Drop every connection and refuse new ones for ``seconds``."""
        self.refusing.set()
        for connection in self.open:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        self.open.clear()
        time.sleep(seconds)
        self.refusing.clear()

    def close(self) -> None:
        self.server.close()


@pytest.mark.cluster
def test_a_network_cut_of_a_second_between_coordinator_and_scheduler_journals_no_crash(tmp_path, cluster):
    proxy = _Proxy(cluster.address)
    try:
        config = dask_config(tmp_path, cluster, "time.sleep(3)\n")
        document = yaml.safe_load(config.read_text())
        document["train"]["scheduler"] = proxy.address  # the coordinator's connection goes through the proxy
        config.write_text(yaml.safe_dump(document))
        coordinator = start_fusion_dd(tmp_path, "search", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            wait_until(lambda: len(started_trials(tmp_path)) >= 2, 60, "nothing ran")
            proxy.cut(1.0)
            _, stderr = coordinator.communicate(timeout=240)
        finally:
            if coordinator.poll() is None:
                coordinator.kill()
                coordinator.wait()
    finally:
        proxy.close()
    assert coordinator.returncode == 0, stderr
    assert_found(tmp_path)
    crashes = [r for r in journal(tmp_path) if r["type"] == "trial_finished" and r["kind"] == "crash"]
    assert crashes == [], crashes
    assert sorted(started_trials(tmp_path)) == sorted(set(started_trials(tmp_path)))  # none trained twice


@pytest.mark.cluster
def test_the_scheduler_killed_mid_training_stops_the_search_in_one_line_and_resume_trains_nothing_twice(tmp_path):
    refusal = dask_refusal()
    if refusal is not None:
        pytest.skip(refusal)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    processes: list[subprocess.Popen[bytes]] = []

    def start(*argv: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        process = subprocess.Popen([str(DASK), *argv], env={**cli_env(), **(env or {})}, stdout=subprocess.DEVNULL,
                                   stderr=open(tmp_path / f"dask-{len(processes)}.log", "wb"), start_new_session=True)
        processes.append(process)
        return process

    def scheduler() -> subprocess.Popen[bytes]:
        process = start("scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard")
        wait_until(lambda: socket.socket().connect_ex(("127.0.0.1", port)) == 0, 60, "no scheduler")
        return process

    def workers() -> None:
        for device in DEVICES:
            start("worker", address, "--host", "127.0.0.1", "--nthreads", "1", "--resources", "device=1",
                  "--name", f"npu{device}", "--no-dashboard", env={"ASCEND_DEVICE_ID": device})
        with distributed.Client(address, timeout=30, set_as_default=False) as client:
            client.wait_for_workers(len(DEVICES), timeout=60)

    search = tmp_path / "search"
    search.mkdir()
    try:
        first = scheduler()
        workers()
        config = write_config(search, "--culprits", CULPRIT)
        document = yaml.safe_load(config.read_text())
        document["rules"] = FEW_RULES
        del document["train"]["devices"]
        document["train"].update(launcher="dask", scheduler=address, kill_grace=2)
        said = f'open({str(search / "started.log")!r}, "a").write(os.environ["FUSION_DD_TRIAL_ID"] + "\\n")\n'
        command = document["train"]["command"]
        command[command.index(str(FAKE_TRAIN))] = str(wrapper_script(search / "wrapped.py", said + "time.sleep(4)\n"))
        config.write_text(yaml.safe_dump(document))
        coordinator = subprocess.Popen(
            [sys.executable, "-m", "fusion_dd.cli", "search"], cwd=search, env=cli_env({"FUSION_DD_DASK_RECONNECT": "5"}),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        try:
            try:
                wait_until(lambda: len(started_trials(search)) == 2, 90, "the references never started")
            except AssertionError:
                coordinator.kill()
                raise AssertionError(coordinator.communicate()[1]) from None
            os.killpg(first.pid, signal.SIGKILL)
            first.wait(timeout=30)
            _, stderr = coordinator.communicate(timeout=120)
        finally:
            if coordinator.poll() is None:
                coordinator.kill()
                coordinator.wait()
        assert coordinator.returncode == 2, stderr
        last = stderr.strip().splitlines()[-1]
        assert f"the dask scheduler at {address} is gone" in last and "fusion-dd resume" in last, stderr
        assert "Traceback" not in stderr
        losses = [r for r in journal(search) if r["type"] == "trial_cancelled"
                  or (r["type"] == "trial_finished" and r["kind"] != "metric")]
        assert losses == [], "the lost scheduler was journaled as a loss of trainings"
        # A new scheduler at the same address; the workers come back to it, or new ones do.
        scheduler()
        for process in processes[1:3]:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        workers()
        result = run_fusion_dd("resume", "--scheduler", address, cwd=search)
        assert result.returncode == 0, result.stderr
        assert_found(search)
        assert sorted(started_trials(search)) == sorted(set(started_trials(search))), "a trial trained twice"
    finally:
        for process in processes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
