"""``fusion-dd init``: a commented ``fusion-dd.yaml`` for the user's case.

The template is text, not a YAML dump, because its comments are the point: they
tell a newcomer what each key does and the one line their framework needs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from ..core.rules import AUTOFUSE_POINTS, Rule, Section

# framework -> (device variable, the line the training needs)
FRAMEWORKS: dict[str, tuple[str, str]] = {
    "tf1": (
        "ASCEND_DEVICE_ID",
        'custom_op.parameter_map["fusion_switch_file"].s = tf.compat.as_bytes(os.environ["FUSION_DD_SWITCH_FILE"])\n'
        '#   (Estimator: NPURunConfig(..., fusion_switch_file=os.environ["FUSION_DD_SWITCH_FILE"]))',
    ),
    "tf2": (
        "ASCEND_DEVICE_ID",
        'npu_device.global_options().fusion_switch_file = os.environ["FUSION_DD_SWITCH_FILE"]'
        "  # before npu_device.open()",
    ),
    "torchair": (
        "ASCEND_RT_VISIBLE_DEVICES",
        'config = CompilerConfig(); config.fusion_config.fusion_switch_file = os.environ["FUSION_DD_SWITCH_FILE"]\n'
        "#   (the training then uses npu:0, the one device it can see)",
    ),
    "mindspore": (
        "ASCEND_RT_VISIBLE_DEVICES",
        'set_context(ascend_config={"ge_options": {"global": {"ge.fusionSwitchFile": os.environ["FUSION_DD_SWITCH_FILE"]}}})\n'
        "#   (unconfirmed for MindSpore: check that fusion_result.json changes between trials)",
    ),
    "generic": (
        "ASCEND_DEVICE_ID",
        "pass $FUSION_DD_SWITCH_FILE (or the {switch_file} placeholder) to your compiler",
    ),
}


def _rule_lines(rules: Sequence[Rule], section: Section) -> str:
    names = [rule.name for rule in rules if rule.section is section]
    if not names:
        return f"  {section.value}: []"
    return f"  {section.value}:\n" + "\n".join(f"    - {name}" for name in names)


def render_init_config(
    *,
    rules: Sequence[Rule] = (),
    sources: Sequence[str] = (),
    command: Sequence[str] | None = None,
    framework: str = "generic",
    devices: Sequence[str] = ("0",),
    autofuse: bool = False,
) -> str:
    """The text of a new ``fusion-dd.yaml``; ``autofuse``: AutoFuse is on, offer its switch points."""
    device_env, wiring = FRAMEWORKS[framework]
    argv = list(command) if command else ["python", "train.py", "--fusion-switch", "{switch_file}"]
    if not any("{switch_file}" in arg for arg in argv):
        note = "  # the training reads $FUSION_DD_SWITCH_FILE"
    else:
        note = ""
    origin = f"# Candidate rules taken from: {', '.join(sources)}\n" if sources else (
        "# Candidate rules: the passes that fired in your network. `fusion-dd rules fusion_result.json`\n"
        "# prints them from your compiler's artifacts; or use `from: [path/to/fusion_result.json]`.\n"
    )
    rules_block = "\n".join([_rule_lines(rules, Section.GRAPH), _rule_lines(rules, Section.UB)])
    if not rules:
        rules_block = (
            "  GraphFusion: []   # e.g. [ConvBatchnormFusionPass, SoftmaxFusionPass]\n"
            "  UBFusion: []      # e.g. [TbeEltwiseFusionPass]"
        )
    if autofuse:
        rules_block += (
            f"\n  {Section.AUTOFUSE.value}: [{', '.join(AUTOFUSE_POINTS)}]   "
            "# AUTOFUSE_FLAGS switches AutoFuse on: its switch points are candidates too"
        )
    return f"""\
# fusion-dd.yaml: which fusion rules break my network's accuracy?
# Written by `fusion-dd init --framework {framework}`. Check it with `fusion-dd search --dry-run`.
#
# Your training must apply the switch file fusion-dd gives each trial. For {framework}:
#   {wiring}
# CANN re-reads the file only when its path changes and compile caches keep old decisions:
# every trial gets a fresh path and its own ASCEND_WORK_PATH; keep your own caches per trial.

{origin}rules:
{rules_block}
  # base_cfg: my_fusion_switch.cfg   # your own switch file: its other entries are kept
  # graphs: [dump/ge_proto_*_Build.txt]  # graph dumps of an all-on run: name the culprits' layers

train:
  # A relative script path (train.py) is taken from this file's directory when it is there, else from workdir.
  command: {json.dumps(argv)}{note}
  workdir: "{{trial_dir}}"     # each trial runs in its own directory: no shared caches
  timeout: 14400             # seconds per training
  devices: {json.dumps([int(d) if d.isdigit() else d for d in devices])}                # one concurrent training per entry; [[0,1],[2,3]] for groups
  device_env: {device_env}
  env: {{}}

metric:
  pattern: 'accuracy\\s*[=:]\\s*(\\S+)'   # last match in the output; group 1 is the value
  goal: max                          # max for accuracy, min for a loss

score:
  tolerance: auto        # auto | an absolute number | "2%" of the baseline
  crash_is_failure: false

search:
  budget: 60             # maximum trainings, resumes included
"""



# Frameworks on other compilers (rules.compiler): framework -> (compiler, device variable, what the training needs).
COMPILER_FRAMEWORKS: dict[str, tuple[str, str, str]] = {
    "onnxruntime": (
        "onnxruntime",
        "CUDA_VISIBLE_DEVICES",
        "session = ort.InferenceSession(path, so, providers=providers, **ort_session_kwargs())\n"
        "#   (from fusion_dd.integrations import ort_session_kwargs; an empty dict outside fusion-dd)",
    ),
    "jax": (
        "xla",
        "CUDA_VISIBLE_DEVICES",
        "nothing: XLA reads XLA_FLAGS, which fusion-dd sets per trial (append to XLA_FLAGS, never replace it)",
    ),
    "tensorflow-xla": (
        "xla",
        "CUDA_VISIBLE_DEVICES",
        "nothing: XLA reads XLA_FLAGS, which fusion-dd sets per trial (append to XLA_FLAGS, never replace it;\n"
        "#   only what XLA compiles is searched: jit_compile=True or TF_XLA_FLAGS=--tf_xla_auto_jit=2)",
    ),
}

_EXAMPLE_NAMES = {
    "onnxruntime": "[GeluFusionL2, LayerNormFusionL1, MatMulAddFusion]",
    "xla": "[algsimp, float-normalization-bf16, xla_allow_excess_precision]",
}


def training_line(framework: str) -> str:
    """The one line (or none) a training on this framework needs, for ``fusion-dd init`` to show."""
    if framework in COMPILER_FRAMEWORKS:
        return COMPILER_FRAMEWORKS[framework][2]
    return FRAMEWORKS[framework][1]


def render_compiler_init_config(*, framework: str, command: Sequence[str] | None = None, names: Sequence[str] = ()) -> str:
    """The text of a new ``fusion-dd.yaml`` for ONNX Runtime or an XLA framework."""
    compiler, device_env, wiring = COMPILER_FRAMEWORKS[framework]
    argv = list(command) if command else ["python", "train.py"]
    listed = f"[{', '.join(names)}]" if names else f"{_EXAMPLE_NAMES[compiler]}   # e.g.; replace with yours"
    source = (
        "a log of one run with ONNX Runtime's info log on: `fusion-dd rules --compiler onnxruntime run.log`"
        if compiler == "onnxruntime"
        else "a dump of one run (XLA_FLAGS='--xla_dump_to=DIR --xla_dump_hlo_pass_re=.*'): "
        "`fusion-dd rules --compiler xla DIR`"
    )
    return f"""\
# fusion-dd.yaml: which {compiler} passes change my model's numbers?
# Written by `fusion-dd init --framework {framework}`. Check it with `fusion-dd search --dry-run`.
#
# What your training needs for {framework}:
#   {wiring}

rules:
  compiler: {compiler}
  # The candidates: the passes that fired in your model, from {source}
  names: {listed}
  closure: false         # true: first add what fires once the candidates are off (the all-off baseline)

train:
  command: {json.dumps(argv)}
  workdir: "{{trial_dir}}"     # each trial runs in its own directory
  timeout: 14400             # seconds per training
  devices: [0]               # one concurrent training per entry
  device_env: {device_env}
  env: {{}}

metric:
  pattern: 'accuracy\\s*[=:]\\s*(\\S+)'   # last match in the output; group 1 is the value
  goal: max                          # max for accuracy, min for a loss or a difference

score:
  tolerance: auto        # auto | an absolute number | "2%" of the baseline | 0 = bitwise, any difference fails

search:
  budget: 60             # maximum trainings, resumes included
"""
