"""The compare tests write dumps with the independent writer of ``tests/ascend``."""

from __future__ import annotations

import sys
from pathlib import Path

_ASCEND_TESTS = str(Path(__file__).resolve().parents[1] / "ascend")
if _ASCEND_TESTS not in sys.path:
    sys.path.insert(0, _ASCEND_TESTS)
