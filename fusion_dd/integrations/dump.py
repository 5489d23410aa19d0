"""``dump_tensors``: ``.npy`` dumps for trainings that have no CANN dump.

PyTorch eager, GPU runs and plain numpy have no data dump of their own;
``fusion-dd compare`` reads a folder of ``.npy`` files named by op instead. One
call per tensor, e.g. in a forward hook::

    from fusion_dd.integrations import dump_tensors
    dump_tensors("encoder/layer_3/ln", output)      # -> $FUSION_DD_DUMP_DIR/encoder/layer_3/ln.npy

The name's ``/`` become folders, ``name:1`` names output 1 of an op. Calls are
also recorded, in order, in ``fusion_dd_order.txt``, so that the comparison walks
the tensors in execution order (file times are too coarse for that). Nothing is
written when neither ``dump_dir`` nor ``FUSION_DD_DUMP_DIR`` is set, so a script
keeps working outside fusion-dd.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath
from typing import Any

DUMP_ENV = "FUSION_DD_DUMP_DIR"
ORDER_FILE = "fusion_dd_order.txt"


def dump_tensors(name: str, array: Any, dump_dir: str | os.PathLike[str] | None = None) -> Path | None:
    """Save ``array`` (numpy, or a torch/TensorFlow tensor) as ``{dump_dir}/{name}.npy``.

    Returns the file written, or None when no dump directory is configured.
    A name that would leave the dump directory (absolute, or with ``..``) is a
    ValueError: a hook must never overwrite files elsewhere.
    """
    import numpy as np

    directory = dump_dir if dump_dir is not None else os.environ.get(DUMP_ENV, "").strip()
    if not directory:
        return None
    parts = PurePosixPath(name.replace("\\", "/")).parts
    if not name or name.startswith("/") or any(part in ("..", ".") for part in parts):
        raise ValueError(f"dump_tensors: {name!r} is not a relative op name")
    root = Path(directory)
    target = root.joinpath(*parts[:-1], parts[-1] + ".npy")
    target.parent.mkdir(parents=True, exist_ok=True)
    value = _to_numpy(array)
    temporary = target.with_name(target.name + ".tmp")
    with open(temporary, "wb") as handle:
        np.save(handle, value, allow_pickle=False)
    os.replace(temporary, target)
    with open(root / ORDER_FILE, "a", encoding="utf-8") as order:
        order.write("/".join(parts) + "\n")
    return target


def _to_numpy(value: Any) -> Any:
    import numpy as np

    if hasattr(value, "detach"):  # torch
        value = value.detach()
        if hasattr(value, "float") and str(getattr(value, "dtype", "")) == "torch.bfloat16":
            value = value.float()
        value = value.cpu()
    if hasattr(value, "numpy") and not isinstance(value, np.ndarray):
        value = value.numpy()
    return np.asarray(value)
