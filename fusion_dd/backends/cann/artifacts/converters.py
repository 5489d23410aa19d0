"""A user's format converters: the plug-in point for device formats fusion-dd does not rebuild.

A converter is a Python file named ``convert_<FROM>_to_<TO>.py`` (msaccucmp's
naming) in a folder given with ``fusion-dd compare --converters DIR`` (or in the
``FUSION_DD_CONVERTERS`` environment variable, folders separated by ``os.pathsep``,
which is how worker processes see them). ``FROM`` is the dump's format name as
fusion-dd spells it (``FRACTAL_Z_3D``, ``FRACTAL_ZN_LSTM``, ``NC1HWC0_C04``...),
or ``FRACTAL_Z_G<groups>`` for grouped-convolution weights; ``TO`` is free (it
only documents the result). The file defines::

    def convert(data, original_shape, sub_format):
        # data: numpy array in the device shape; original_shape: tuple of ints
        # (may be empty); sub_format: int. Return the array in framework layout.

A converter takes precedence over fusion-dd's own conversion of that format, so
a user can also correct one. A converter that cannot be loaded is a LayoutError
naming the file, listed for every tensor that needed it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path


class LayoutError(ValueError):
    """A tensor that cannot be decoded; the message is the reason, shown per tensor.

    Declared here, below the layouts, because a user's converter that fails is one too."""


ENV = "FUSION_DD_CONVERTERS"
_NAME = re.compile(r"^convert_([A-Za-z0-9_]{1,128}?)_to_([A-Za-z0-9_]{1,128})\.py$")

Converter = Callable[..., object]


def find_converter(name: str, sub_format: int = 0) -> Converter | None:
    """The user's converter for the format named ``name`` (``layout.format_name``) and ``sub_format``, or None."""
    folders = os.environ.get(ENV, "")
    if not folders:
        return None
    table = _converters(folders)
    if name == "FRACTAL_Z" and sub_format > 1 and f"FRACTAL_Z_G{sub_format}" in table:
        name = f"FRACTAL_Z_G{sub_format}"
    path = table.get(name)
    if path is None:
        return None
    return _load(str(path))


@lru_cache(maxsize=8)
def _converters(folders: str) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for folder in folders.split(os.pathsep):
        if not folder:
            continue
        try:
            entries = sorted(Path(folder).iterdir())
        except OSError:
            continue
        for entry in entries:
            match = _NAME.match(entry.name)
            if match and entry.is_file():
                found.setdefault(match.group(1), entry)
    return found


@lru_cache(maxsize=None)
def _load(path: str) -> Converter:
    namespace: dict[str, object] = {"__file__": path, "__name__": Path(path).stem}
    try:
        source = Path(path).read_text(encoding="utf-8")
        exec(compile(source, path, "exec"), namespace)  # noqa: S102 - the user's own plug-in file
    except Exception as exc:  # noqa: BLE001 - any failure of the user's file is reported as its problem
        raise LayoutError(f"converter {path} cannot be loaded: {type(exc).__name__}: {exc}") from None
    convert = namespace.get("convert")
    if not callable(convert):
        raise LayoutError(f"converter {path} defines no convert(data, original_shape, sub_format)")

    def run(data, original_shape, sub_format):
        import numpy as np

        try:
            return np.asarray(convert(data, original_shape, sub_format))
        except Exception as exc:  # noqa: BLE001
            raise LayoutError(f"converter {path} failed: {type(exc).__name__}: {exc}") from None

    return run


def check_folder(folder: Path) -> list[str]:
    """The converter file names in ``folder`` (for the CLI to validate ``--converters``)."""
    return sorted(entry.name for entry in folder.iterdir() if _NAME.match(entry.name))
