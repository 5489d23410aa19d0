"""Two or three lines a training script adds so that fusion-dd can drive it.

fusion-dd hands each trial its own switch file through ``FUSION_DD_SWITCH_FILE``
(CANN reads no environment variable for it) and collects metrics from the JSON
lines file named by ``FUSION_DD_METRICS_FILE``. The helpers here do the one thing
each framework needs (docs/architecture.md 2.2) and do nothing when the variables are unset,
so a script keeps working outside fusion-dd. Frameworks are imported lazily, only
inside the helper that needs one: fusion-dd never depends on them.

TensorFlow 1.x session::

    from fusion_dd.integrations import apply_to_tf1_session_config
    apply_to_tf1_session_config(config)   # after adding the NpuOptimizer custom_op

TensorFlow 1.x Estimator::

    from fusion_dd.integrations import apply_to_npu_run_config_kwargs
    run_config = NPURunConfig(**apply_to_npu_run_config_kwargs({"model_dir": model_dir}))

TensorFlow 2.x (before ``npu_device.open()``)::

    from fusion_dd.integrations import apply_to_tf2_npu_device
    apply_to_tf2_npu_device()

PyTorch graph mode (torchair)::

    from fusion_dd.integrations import apply_to_torchair
    config = apply_to_torchair(CompilerConfig())
    backend = torchair.get_npu_backend(compiler_config=config)

ONNX Runtime (one changed line; nothing to do for XLA, it reads XLA_FLAGS)::

    from fusion_dd.integrations import ort_session_kwargs
    session = ort.InferenceSession(path, so, providers=providers, **ort_session_kwargs())

Metrics, from any framework::

    from fusion_dd.integrations import report_metric
    report_metric(step=step, loss=loss, accuracy=acc)

Tensor dumps for ``fusion-dd compare`` where the framework has none::

    from fusion_dd.integrations import dump_tensors
    dump_tensors("encoder/layer_3/ln", output)   # a .npy under FUSION_DD_DUMP_DIR

Compile caches: CANN re-reads a switch file only when its path changes, and
compiled ``.om`` files and compile caches keep the fusion decisions of the run
that built them. Disable them, or give every trial its own cache directory (for
example under ``$FUSION_DD_TRIAL_DIR``), or every trial trains the same network.
"""

from .frameworks import (
    GE_OPTION,
    SWITCH_ENV,
    apply_to_ge_options,
    apply_to_npu_run_config_kwargs,
    apply_to_tf1_session_config,
    apply_to_tf2_npu_device,
    apply_to_torchair,
    switch_file,
)
from .dump import DUMP_ENV, dump_tensors
from .ort import DISABLED_ENV, ort_session_kwargs, ort_session_options
from .metrics import METRICS_ENV, report_metric

__all__ = [
    "DISABLED_ENV",
    "DUMP_ENV",
    "GE_OPTION",
    "METRICS_ENV",
    "SWITCH_ENV",
    "apply_to_ge_options",
    "apply_to_npu_run_config_kwargs",
    "apply_to_tf1_session_config",
    "apply_to_tf2_npu_device",
    "apply_to_torchair",
    "dump_tensors",
    "ort_session_kwargs",
    "ort_session_options",
    "report_metric",
    "switch_file",
]
