"""The demo's throughput in simulated time: fused kernels are faster, as on a device."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from fusion_dd.demo.trainer import simulated_samples_per_second

SPEED = re.compile(r"speed (\S+) samples/s")


def test_fewer_kernels_per_step_train_faster() -> None:
    assert simulated_samples_per_second(100, 128) > simulated_samples_per_second(140, 128) > 0


def _speed(tmp_path: Path, *args: str) -> float:
    done = subprocess.run(
        [sys.executable, "-m", "fusion_dd.demo.train", "--scenario", "quick", "--steps", "3", *args],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    return float(SPEED.findall(done.stdout)[-1])


def test_the_demo_training_prints_its_speed_and_all_off_is_slower(tmp_path: Path) -> None:
    off = tmp_path / "off.cfg"
    off.write_text('{"Switch": {"GraphFusion": {"ALL": "off"}, "UBFusion": {"ALL": "off"}}}')
    all_on, all_off = _speed(tmp_path), _speed(tmp_path, "--fusion-switch", str(off))
    assert all_off < all_on


def test_the_demo_config_reads_the_speed() -> None:
    from fusion_dd.demo.config import write_demo_config
    import tempfile

    import yaml

    with tempfile.TemporaryDirectory() as work:
        document = yaml.safe_load(write_demo_config(Path(work), "quick").read_text())
    assert SPEED.pattern == document["metric"]["speed_pattern"]
