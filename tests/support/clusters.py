"""The clusters the launcher tests run on: a localhost dask cluster, and whether a Slurm answers.

``DaskCluster`` starts a real dask scheduler and one worker per device on
127.0.0.1 (each worker one device: ``ASCEND_DEVICE_ID`` in its environment,
``--nthreads 1 --resources device=1``). Where ``unshare`` is allowed every worker
runs in a PID namespace of its own, so the coordinator and the trainings never
share a ``/proc``. ``slurm_refusal`` says why no Slurm job can run here (None
when one can); the Slurm tests skip with it.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.support.cli import CULPRIT, write_config
from tests.support.fake_training import FAKE_TRAIN, cli_env, wrapper_script
from tests.support.searches import FEW_RULES

try:
    import distributed
except ImportError:  # the cluster tests skip
    distributed = None

DEVICES = ("0", "1")
DASK = Path(sys.executable).parent / "dask"


def dask_refusal() -> str | None:
    """Why no localhost dask cluster can start here, None when one can."""
    if distributed is None:
        return "dask.distributed is not installed (pip install 'fusion-dd[dask]')"
    if not DASK.exists():
        return "the dask command is not installed next to this Python"
    return None


@functools.lru_cache(maxsize=None)
def slurm_refusal() -> str | None:
    """Why no search can run on Slurm here, None when one can (probed once per process).

    ``slurm_in_use`` asks it once it holds Slurm: a test that stops the controller
    holds Slurm alone, and a probe made meanwhile would take the stopped controller for none.
    """
    for tool in ("sbatch", "squeue", "scontrol", "scancel", "sinfo"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install slurm-wlm munge; then scripts/start-slurm)"
    try:
        done = subprocess.run(["sinfo", "-h", "-o", "%T %G"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"sinfo: {exc}"
    if done.returncode != 0:
        return f"Slurm is not running ({done.stderr.strip() or done.returncode}); start it with scripts/start-slurm"
    lines = done.stdout.split("\n")
    if not any(line.split()[:1] and line.split()[0].rstrip("*") in ("idle", "mixed", "allocated") for line in lines):
        return f"no Slurm node is up ({done.stdout.strip() or 'none listed'}); scripts/start-slurm"
    if "gpu:" not in done.stdout:
        return "the Slurm node offers no gres/gpu (scripts/start-slurm gives it fake ones)"
    return None


#: Every test that uses this machine's Slurm holds it shared; one that stops the controller holds it
#: alone. The xdist workers run Slurm tests of different files at once (the launcher's own and
#: the launcher conformance tests).
SLURM_LOCK = Path(tempfile.gettempdir()) / "fusion-dd-tests-slurm.lock"


@contextlib.contextmanager
def slurm_in_use(alone: bool = False) -> Iterator[None]:
    """Hold the machine's Slurm for one test: shared, or ``alone`` to stop its controller meanwhile.

    The test is skipped, saying why, where no search can run on Slurm; that is
    asked once the lock is held (``slurm_refusal``).
    """
    with open(SLURM_LOCK, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        try:
            refusal = slurm_refusal()
            if refusal is not None:
                pytest.skip(refusal)
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@functools.lru_cache(maxsize=None)
def unshare_refusal(*argv: str) -> str | None:
    """Why ``unshare ARGV true`` cannot run here, None when it can (probed once per argv)."""
    what = " ".join(["unshare", *argv])
    if shutil.which("unshare") is None:
        return "the unshare command is missing"
    try:
        done = subprocess.run(["unshare", *argv, "true"], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{what}: {exc}"
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip().splitlines()
        return f"{what} is not allowed here ({said[-1] if said else f'exit code {done.returncode}'})"
    return None


PID_NAMESPACES = ("-p", "-f", "--mount-proc")


def _children(pid: int) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = Path(f"/proc/{name}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(") ", 1)[1].split()[1]) == pid:
                found.append(int(name))
    return found


def _descendants(pid: int) -> list[int]:
    result, stack = [], [pid]
    while stack:
        for child in _children(stack.pop()):
            result.append(child)
            stack.append(child)
    return result


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def trial_processes(marker_dir: Path) -> list[int]:
    """Live (non-zombie) processes of trainings under ``marker_dir``, seen from here (the parent namespace)."""
    found = []
    needle = f"FUSION_DD_TRIAL_DIR={marker_dir}".encode()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            environ = Path(f"/proc/{name}/environ").read_bytes()
            state = Path(f"/proc/{name}/stat").read_text().rsplit(") ", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and any(item.startswith(needle) for item in environ.split(b"\0")):
            found.append(int(name))
    return found


class DaskCluster:
    """A scheduler and one worker per device, all on 127.0.0.1."""

    def __init__(self, root: Path, pid_namespaces: bool, devices: tuple[str, ...] = DEVICES) -> None:
        self.root = root
        self.pid_namespaces = pid_namespaces
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        file = root / "scheduler.json"
        self.scheduler = subprocess.Popen(
            [str(DASK), "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
             "--scheduler-file", str(file)],
            stdout=subprocess.DEVNULL, stderr=open(root / "scheduler.log", "wb"), start_new_session=True,
        )
        self.client = None
        try:
            deadline = time.monotonic() + 60
            while not file.exists() or not file.read_text().strip():
                assert time.monotonic() < deadline and self.scheduler.poll() is None, "the scheduler did not start"
                time.sleep(0.1)
            self.address = json.loads(file.read_text())["address"]
            self.client = distributed.Client(self.address, timeout=30, set_as_default=False)
            for device in devices:
                self.start_worker(device)
            self.wait_for(len(devices))
        except BaseException:
            self.close()
            raise

    def start_worker(
        self, device: str, name: str | None = None, prefix: tuple[str, ...] = (), *extra: str,
        namespace: bool = True, env: dict[str, str] | None = None,
    ) -> None:
        argv = [str(DASK), "worker", self.address, "--host", "127.0.0.1", "--nthreads", "1", "--no-nanny",
                "--resources", "device=1", "--name", name or f"npu{device}", "--no-dashboard", *extra]
        if self.pid_namespaces and namespace and not prefix:
            # sh stays PID 1 of the namespace after the worker dies, so that the namespace (and an
            # orphaned training in it) is not torn down by the kernel: the watcher must do that.
            argv = ["unshare", "-p", "-f", "--mount-proc", "sh", "-c", '"$@"; exec sleep 100000', "sh", *argv]
        name = name or f"npu{device}"
        log = open(self.root / f"worker-{name}.log", "ab")
        self.workers[name] = subprocess.Popen(
            [*prefix, *argv], env={**cli_env(), "ASCEND_DEVICE_ID": device, **(env or {})}, stdout=subprocess.DEVNULL,
            stderr=log, start_new_session=True,
        )

    def worker_pid(self, name: str) -> int:
        """The pid (here) of the worker's own Python process."""
        top = self.workers[name]
        for pid in [top.pid, *_descendants(top.pid)]:
            if "dask" in _cmdline(pid) and "worker" in _cmdline(pid) and "unshare" not in _cmdline(pid):
                if not _cmdline(pid).startswith("sh "):
                    return pid
        raise AssertionError(f"no worker process for {name}")

    def wait_for(self, count: int) -> None:
        self.client.wait_for_workers(count, timeout=60)

    def stop_worker(self, name: str, wait: bool = True) -> None:
        process = self.workers.pop(name)
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(timeout=30)
        if not wait:
            return
        deadline = time.monotonic() + 30
        while any(info.get("name") == name for info in self.client.scheduler_info(n_workers=-1)["workers"].values()):
            assert time.monotonic() < deadline
            time.sleep(0.1)

    def close(self) -> None:
        for name in list(self.workers):
            self.stop_worker(name, wait=False)
        os.killpg(self.scheduler.pid, signal.SIGKILL)
        self.scheduler.wait(timeout=30)
        if self.client is not None:
            self.client.close()


def localhost_cluster(tmp_path_factory: pytest.TempPathFactory):
    """The ``cluster`` fixture's body (tests/conftest.py): one localhost dask cluster per test module.

    Workers in PID namespaces of their own where unshare is allowed (the kill and resume tests need it).
    """
    refusal = dask_refusal()
    if refusal is not None:
        pytest.skip(refusal)
    started = DaskCluster(tmp_path_factory.mktemp("cluster"), pid_namespaces=unshare_refusal(*PID_NAMESPACES) is None)
    try:
        yield started
    finally:
        started.close()


def dask_config(
    tmp_path: Path, cluster: "DaskCluster", prelude: str | None = None, *train_args: str, small: bool = True, **train: object
) -> Path:
    """The CLI tests' config, run on the cluster; ``prelude`` makes some trainings slow (see wrapper_script)."""
    config = write_config(tmp_path, "--culprits", CULPRIT, *train_args)
    document = yaml.safe_load(config.read_text())
    if small:
        document["rules"] = FEW_RULES
    del document["train"]["devices"]  # every worker with a device resource
    document["train"].update(launcher="dask", scheduler=cluster.address, kill_grace=2, **train)
    if prelude is not None:
        # Each training says it started (before the prelude's sleep) in started.log.
        said = f'open({str(tmp_path / "started.log")!r}, "a").write(os.environ["FUSION_DD_TRIAL_ID"] + "\\n")\n'
        command = document["train"]["command"]
        command[command.index(str(FAKE_TRAIN))] = str(wrapper_script(tmp_path / "wrapped_train.py", said + prelude))
    config.write_text(yaml.safe_dump(document))
    return config
