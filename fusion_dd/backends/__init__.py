"""Compiler backends: everything that knows one compiler, behind one interface.

The engine and the search layer know rules only as candidates with a name and
an opaque group, and configurations only as "these candidates on, the others
off". A backend turns that into what its compiler reads and back:

* ``render``: the files a trial gets (CANN: ``fusion_switch.cfg``) and the
  environment defaults it needs (CANN: ``ASCEND_WORK_PATH`` per trial, so no
  compile cache is shared);
* ``hooks``: the artifact hooks that turn a trial's files into journaled facts
  (CANN: ``fusion_result.json`` as the proof the switch file was applied, and
  how often each rule fused), see ``fusion_dd.core.hooks``;
* ``realize``: the configuration really trained when one is asked for (CANN:
  AutoFuse's reduce and concat do nothing while AutoFuse is off);
* ``chooser``: which rule of an interacting set to switch off, given the all-on
  run's journaled fusion counts (CANN: the rule that fused the fewest places,
  else a UBFusion rule, else the first by name).

Backends: CANN (``fusion_dd.backends.cann``, the default), ONNX Runtime
(``fusion_dd.backends.ort``) and XLA (``fusion_dd.backends.xla``), chosen by
``rules.compiler``; ``backend_for`` names the one a search uses.
"""

from __future__ import annotations

from .base import COMPILERS, FIX_NAMES, CompilerBackend, Rendered, fix_env_of, fix_name_of


def backend_for(config: object) -> CompilerBackend:
    """The backend of a search, by ``rules.compiler`` (``config.compiler``; CANN when absent).

    The user's environment settings are inputs of the backends that merge into
    a variable the user may set too (CANN: ``AUTOFUSE_FLAGS``, XLA: ``XLA_FLAGS``).
    """
    train = getattr(config, "train", None)
    user_env = getattr(train, "env", None)
    compiler = getattr(config, "compiler", "cann")
    if compiler == "onnxruntime":
        from .ort import OrtBackend

        return OrtBackend()
    if compiler == "xla":
        from .xla import XlaBackend

        return XlaBackend(user_env=user_env)
    from .cann import CannBackend

    return CannBackend(base_cfg=getattr(config, "base_cfg", None), user_env=user_env)


__all__ = ["COMPILERS", "FIX_NAMES", "CompilerBackend", "Rendered", "backend_for", "fix_env_of", "fix_name_of"]
