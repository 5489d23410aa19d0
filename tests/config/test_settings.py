"""fusion-dd.yaml validation: every mistake is one line naming the key, exit code 2, nothing launched."""

import re
import textwrap
from pathlib import Path

import pytest

from fusion_dd.cli import main
from fusion_dd.config.settings import config_state_dir, load_config, parse_devices
from fusion_dd.core.errors import UsageError
from fusion_dd.core.rules import Section

GOOD = """\
rules:
  GraphFusion: [ConvBatchnormFusionPass, SoftmaxFusionPass]
  UBFusion: [TbeEltwiseFusionPass]
train:
  command: ["python", "train.py", "--fusion-switch", "{switch_file}"]
  devices: [0, 1]
metric:
  pattern: 'accuracy[=:]\\s*(\\S+)'
"""


def write(tmp_path, text):
    path = tmp_path / "fusion-dd.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_good_config_with_defaults(tmp_path):
    config = load_config(write(tmp_path, GOOD))
    assert [rule.name for rule in config.rules] == [
        "ConvBatchnormFusionPass",
        "SoftmaxFusionPass",
        "TbeEltwiseFusionPass",
    ]
    assert config.rules[2].section is Section.UB
    assert config.train.devices == (("0",), ("1",))
    assert config.train.device_env == "ASCEND_DEVICE_ID"
    assert config.metric.goal == "max"
    assert config.search.budget == 200
    assert config.state_dir == (tmp_path / ".fusion-dd").resolve()



def test_config_state_dir_reads_only_the_state_dir(tmp_path):
    """Relative to the file's folder, like load_config; the rest of the file is not validated."""
    (tmp_path / "sub").mkdir()
    path = write(tmp_path / "sub", "state_dir: ../runs\nnot_a_section: [1]\nrules: {GraphFusion: []}\n")
    assert config_state_dir(path) == (tmp_path / "runs").resolve()
    with pytest.raises(UsageError, match="not_a_section: unknown key"):
        load_config(path)
    assert config_state_dir(write(tmp_path, "train: {}\n")) == (tmp_path / ".fusion-dd").resolve()
    assert config_state_dir(write(tmp_path, "")) == (tmp_path / ".fusion-dd").resolve()


@pytest.mark.parametrize("text, problem", [
    ("state_dir: 3\n", "state_dir: must be a non-empty string, got 3"),
    ("state_dir: ''\n", "state_dir: must be a non-empty string, got ''"),
    ("- a list\n", "the top level must be a mapping of sections"),
    ("state_dir: [\n", "not valid YAML"),
    ("state_dir: a\nstate_dir: b\n", "duplicate key 'state_dir'"),
])
def test_config_state_dir_names_the_file_and_the_problem(tmp_path, text, problem):
    with pytest.raises(UsageError, match=r"fusion-dd\.yaml") as info:
        config_state_dir(write(tmp_path, text))
    assert problem in str(info.value)


def test_command_string_is_split_with_shlex(tmp_path):
    config = load_config(write(tmp_path, GOOD.replace(
        'command: ["python", "train.py", "--fusion-switch", "{switch_file}"]',
        "command: python 'my train.py' --cfg {switch_file}",
    )))
    assert config.train.command == ("python", "my train.py", "--cfg", "{switch_file}")


def test_definition_ignores_budget_devices_and_timeouts(tmp_path):
    config = load_config(write(tmp_path, GOOD))
    changed = config.with_overrides(budget=5, devices=(("7",),))
    assert config.definition() == changed.definition()


def test_fix_prefer_speed_is_part_of_the_definition_and_the_default_leaves_it_as_it_was(tmp_path):
    from fusion_dd.store.state import definition_changes

    default = load_config(write(tmp_path, GOOD))
    assert "fix" not in default.definition()
    speed = load_config(write(tmp_path, GOOD + "fix:\n  prefer: speed\n"))
    assert speed.definition()["fix"] == {"prefer": "speed", "max_alternatives": 3}
    assert definition_changes(default.definition(), speed.definition()) == ["fix.prefer"]


def test_fix_trainings_is_part_of_the_definition_only_when_it_is_not_the_default(tmp_path):
    from fusion_dd.store.state import definition_changes

    default = load_config(write(tmp_path, GOOD))
    assert default.search.fix_trainings == 2 and "fix_trainings" not in default.definition()["noise"]
    three = load_config(write(tmp_path, GOOD + "search:\n  fix_trainings: 3\n"))
    assert three.search.fix_trainings == 3 and three.definition()["noise"]["fix_trainings"] == 3
    assert definition_changes(default.definition(), three.definition()) == ["search.fix_trainings"]


def test_a_default_keeps_the_value_the_search_started_with_but_a_written_value_is_the_users(tmp_path):
    default = load_config(write(tmp_path, GOOD))
    assert default.search.max_trainings == 7
    started_under_0_1_0 = {**default.definition(), "noise": {"confirm": "auto", "max_trainings": 5}}
    resumed = default.with_started_defaults(started_under_0_1_0)
    assert resumed.search.max_trainings == 5
    assert resumed.definition() == started_under_0_1_0  # so resume sees the same search
    written = load_config(write(tmp_path, GOOD + "search:\n  max_trainings: 9\n"))
    assert written.with_started_defaults(started_under_0_1_0).search.max_trainings == 9  # refused as changed
    assert default.with_started_defaults(None) == default  # a new search: today's default


@pytest.mark.parametrize(
    "old, new, message",
    [
        ("  devices: [0, 1]", "  devices: [0, 1]\n  comand: x", "train.comand: unknown key; did you mean 'train.command'?"),
        ("  devices: [0, 1]", "  timeout: soon", "train.timeout: must be a number"),
        ("  devices: [0, 1]", "  timeout: 4h", "train.timeout: must be a number (seconds, e.g. 14400 for 4 hours"),
        ("  devices: [0, 1]", "  timeout: -5", "train.timeout: must be a positive number"),
        ("  devices: [0, 1]", "  devices: [0, 0]", "train.devices: device 0 appears twice"),
        (
            "  GraphFusion: [ConvBatchnormFusionPass, SoftmaxFusionPass]\n  UBFusion: [TbeEltwiseFusionPass]",
            "  GraphFusion: []",
            "rules: no candidate rules",
        ),
        ("  devices: [0, 1]", "  devices: [0, 1]\n  devices: [2]", "duplicate key 'devices'"),
        ("[TbeEltwiseFusionPass]", "[ConvBatchnormFusionPass]", "duplicate rule 'ConvBatchnormFusionPass'"),
        ("'accuracy[=:]\\s*(\\S+)'", "'accuracy[=:]\\s*\\S+'", "metric.pattern: the pattern needs a group"),
        ("'accuracy[=:]\\s*(\\S+)'", "'accuracy[(\\S+)'", "metric.pattern: invalid regular expression"),
        ("'accuracy[=:]\\s*(\\S+)'", "'(accuracy)[=:]\\s*(\\S+)'", "metric.pattern: the pattern has 2 groups; the value must be the only one"),
        ("metric:", "metric:\n  speed_pattern: '(samples|tokens)/s (\\S+)'", "metric.speed_pattern: the pattern has 2 groups"),
        ("metric:", "metric:\n  loss_pattern: loss", "metric.loss_pattern: the pattern needs a group around the value, e.g. 'loss[=:]"),
        ("metric:", "metric:\n  speed_pattern: speed", "metric.speed_pattern: the pattern needs a group around the value, e.g. 'samples/s"),
        ("metric:", "search:\n  suspects: [Zzzz]\nmetric:", "search.suspects: 'Zzzz' is not a candidate rule; name a candidate rule (listed under rules.GraphFusion"),
        ("metric:", "metric:\n  goal: up", "metric.goal: must be 'max' (accuracy) or 'min' (loss)"),
        ("metric:", "score:\n  tolerance: lots\nmetric:", "score.tolerance: must be 'auto'"),
        ("metric:", "search:\n  strategy: magic\nmetric:", "search.strategy: unknown strategy 'magic'"),
        ("metric:", "search:\n  strategy: [bisect]\nmetric:", "search.strategy: unknown strategy ['bisect']"),
        ("metric:", "search:\n  budget: -1\nmetric:", "search.budget: must be at least 3"),
        ("metric:", "search:\n  budget: 2\nmetric:", "search.budget: must be at least 3, got 2"),
        ("metric:", "search:\n  fix_trainings: 1\nmetric:", "search.fix_trainings: must be at least 2"),
        (
            "metric:", "search:\n  fix_trainings: 4\n  max_trainings: 3\nmetric:",
            "search.fix_trainings: 4 is more than search.max_trainings (3), which caps the trainings of one configuration",
        ),
        ('"{switch_file}"', '"{swich_file}"', "train.command[3]: unknown placeholder {swich_file}; did you mean {switch_file}?"),
        ("  devices: [0, 1]", '  workdir: "{trail_dir}"', "train.workdir: unknown placeholder {trail_dir}"),
        ("  devices: [0, 1]", "  env: {CACHE: '{trial_dir}/{cache}'}", "train.env.CACHE: unknown placeholder {cache}"),
        ("  devices: [0, 1]", '  devices: "0,,1"', "train.devices: empty device id (number 2) in '0,,1'"),
        ("  devices: [0, 1]", '  devices: ["0\\0"]', "train.devices: invalid device id"),
        ("SoftmaxFusionPass]", "SoftmaxFusionPas]", "rules.GraphFusion[1]: SoftmaxFusionPas (GraphFusion) is not a known CANN pass name (did you mean SoftmaxFusionPass"),
        ("SoftmaxFusionPass]", "ALL]", "rules.GraphFusion[1]: must be a pass name: 'ALL' is the switch file's default entry"),
        ("rules:", "rules:\n  unknown: maybe", "rules.unknown: must be error, warn or ignore"),
        ("metric:", "rules2: {}\nmetric:", "rules2: unknown key; did you mean 'rules'?"),
        ("  command: [", "  workdir: 3\n  command: [", "train.workdir: must be a non-empty string"),
        ("metric:", "score:\n  baseline_repeats: 0\nmetric:", "score.baseline_repeats: must be at least 1"),
        ("metric:", "fix:\n  prefr: speed\nmetric:", "fix.prefr: unknown key; did you mean 'fix.prefer'?"),
        ("  devices: [0, 1]", "  devices_given: true", "train.devices_given: unknown key"),
        ("metric:", "metric:\n  speed_patern: x", "metric.speed_patern: unknown key; did you mean 'metric.speed_pattern'?"),
    ],
)
def test_config_errors_name_the_key_and_exit_2(tmp_path, capsys, old, new, message):
    assert old in GOOD
    path = write(tmp_path, GOOD.replace(old, new, 1))
    with pytest.raises(SystemExit) as info:
        main(["search", "-c", str(path)])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert message in err
    assert str(path) in err or path.name in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / ".fusion-dd").exists(), "nothing may be launched or written"


@pytest.mark.parametrize("state_dir, problem", [("/", "is a filesystem root"), ("~", "is the home directory")])
def test_state_dir_root_or_home_is_refused(tmp_path, capsys, state_dir, problem):
    # --dry-run: on a version without the check this test must fail without writing into / or ~.
    path = write(tmp_path, GOOD.replace("metric:", f"state_dir: {str(Path(state_dir).expanduser())!r}\nmetric:"))
    with pytest.raises(SystemExit) as info:
        main(["search", "--dry-run", "-c", str(path)])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert f"state_dir: {Path(state_dir).expanduser()} {problem}" in err and len(err.strip().splitlines()) == 1


def test_missing_command(tmp_path):
    with pytest.raises(UsageError, match="train.command: missing"):
        load_config(write(tmp_path, "rules:\n  GraphFusion: [SoftmaxFusionPass]\n"))


def test_missing_config_file(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        main(["search", "-c", str(tmp_path / "absent.yaml")])
    assert info.value.code == 2
    assert "config file not found" in capsys.readouterr().err


def test_invalid_yaml_names_the_line(tmp_path):
    with pytest.raises(UsageError, match=r"fusion-dd.yaml:\d+: not valid YAML"):
        load_config(write(tmp_path, "rules:\n  GraphFusion: [A\ntrain: {}\n"))


def test_a_regex_in_double_quotes_is_told_to_go_in_single_quotes(tmp_path):
    text = 'rules:\n  GraphFusion: [SoftmaxFusionPass]\ntrain:\n  command: [python, t.py]\nmetric:\n  pattern: "accuracy: (\\S+)"\n'
    with pytest.raises(UsageError) as info:
        load_config(write(tmp_path, text))
    message = str(info.value)
    assert "fusion-dd.yaml:6: not valid YAML (found unknown escape character)" in message, message
    advised = message.rsplit("e.g. ", 1)[1]
    # The advice is valid YAML for the pattern the user meant.
    pattern = load_config(write(tmp_path, text.replace('"accuracy: (\\S+)"', advised))).metric.pattern
    assert re.search(pattern, "accuracy=0.5").group(1) == "0.5"


def test_a_tab_in_the_indentation_is_named(tmp_path):
    with pytest.raises(UsageError, match=r"fusion-dd.yaml:2: .*a tab: YAML indents with spaces only"):
        load_config(write(tmp_path, "rules:\n\tGraphFusion: [A]\n"))
    with pytest.raises(UsageError) as info:
        load_config(write(tmp_path, "rules:\n  GraphFusion: [A\ntrain: {}\n"))
    assert "indents with spaces" not in str(info.value)


def test_base_cfg_missing_and_malformed(tmp_path):
    with pytest.raises(UsageError, match="rules.base_cfg: file not found"):
        load_config(write(tmp_path, GOOD.replace("rules:", "rules:\n  base_cfg: base.cfg")))
    (tmp_path / "base.cfg").write_text("A:on\nA:off\n")
    with pytest.raises(UsageError, match=r"base.cfg:2: 'A' is listed twice"):
        load_config(write(tmp_path, GOOD.replace("rules:", "rules:\n  base_cfg: base.cfg")))


def test_a_candidate_that_the_base_cfg_keeps_on_is_refused_naming_the_rule(tmp_path):
    # FE looks ExceptionalPassOfO1Level up before the switches: such a rule is never off.
    (tmp_path / "base.cfg").write_text('{"ExceptionalPassOfO1Level": ["SoftmaxFusionPass", "OtherPass"]}')
    with pytest.raises(UsageError) as info:
        load_config(write(tmp_path, GOOD.replace("rules:", "rules:\n  base_cfg: base.cfg")))
    message = str(info.value)
    assert "rules.base_cfg: its ExceptionalPassOfO1Level lists the candidate rule SoftmaxFusionPass" in message
    assert "take it out of that list, or out of the candidates" in message


def test_the_base_cfgs_priorities_are_part_of_the_search_definition(tmp_path):
    from fusion_dd.store.state import definition_changes

    plain = load_config(write(tmp_path, GOOD))
    (tmp_path / "base.cfg").write_text('{"Switch": {}}')
    empty_base = load_config(write(tmp_path, GOOD.replace("rules:", "rules:\n  base_cfg: base.cfg")))
    (tmp_path / "base.cfg").write_text('{"Priority": {"GraphFusion": {"Top": {"OtherPass": "5"}}}}')
    prioritized = load_config(write(tmp_path, GOOD.replace("rules:", "rules:\n  base_cfg: base.cfg")))
    assert "base_cfg_extra" not in plain.definition()  # without a base cfg, definitions stay as they were
    assert empty_base.definition()["base_cfg_extra"] == {}
    assert definition_changes(empty_base.definition(), prioritized.definition()) == ["rules.base_cfg"]
    assert definition_changes(plain.definition(), prioritized.definition()) == ["rules.base_cfg"]
    # A search journaled before the key was recorded resumes as before (it could not record it).
    older = {key: value for key, value in prioritized.definition().items() if key != "base_cfg_extra"}
    assert definition_changes(older, prioritized.definition()) == []


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("0,1,2", (("0",), ("1",), ("2",))),
        ("0,1;2,3", (("0", "1"), ("2", "3"))),
        ([0, [1, 2]], (("0",), ("1", "2"))),
    ],
)
def test_device_pool_spellings(raw, expected):
    assert parse_devices(raw) == expected


def test_cli_overrides_are_validated(tmp_path, capsys):
    path = write(tmp_path, GOOD)
    with pytest.raises(SystemExit) as info:
        main(["search", "-c", str(path), "--jobs", "2", "--devices", "0"])
    assert info.value.code == 2
    assert "--devices and --jobs" in capsys.readouterr().err


def test_a_percentage_tolerance_of_a_zero_baseline_is_refused(tmp_path):
    path = write(tmp_path, "train: {command: [python, t.py]}\nscore: {tolerance: '2%', baseline_metric: 0}\nrules: {GraphFusion: [ConvToFullyConnectionFusionPass], unknown: ignore}\n")
    with pytest.raises(UsageError, match=r"score.tolerance: 2% of a zero baseline .*absolute"):
        load_config(path)


def test_the_summary_prints_the_tolerance_once_with_its_unit():
    from fusion_dd.report.build import _tolerance_text

    assert _tolerance_text({"tolerance": 0.018, "tolerance_setting": "2%"}) == "2% of the baseline = 0.018"
    assert _tolerance_text({"tolerance": 0.5, "tolerance_setting": "0.5"}) == "0.5 in the metric's units"
    assert _tolerance_text({"tolerance": 0.1, "tolerance_setting": "auto"}) == "0.1, auto"


def test_an_unquoted_confirm_off_is_off_although_yaml_reads_it_as_false(tmp_path):
    assert load_config(write(tmp_path, GOOD + "search:\n  confirm: off\n")).search.confirm == "off"
    with pytest.raises(UsageError, match="search.confirm: must be auto, strict or off"):
        load_config(write(tmp_path, GOOD + "search:\n  confirm: on\n"))


def test_rules_graphs_that_name_nothing_yet_are_warned_about_when_the_config_is_read(tmp_path):
    (tmp_path / "graphs").mkdir()
    (tmp_path / "graphs" / "ge_proto_00001_Build.txt").write_text("graph {}\n")
    text = GOOD.replace("rules:", "rules:\n  graphs: [graphs/ge_proto_*_Build.txt, nothere/*.txt, missing.txt]", 1)
    config = load_config(write(tmp_path, text))
    said = [warning for warning in config.warnings if warning.startswith("rules.graphs")]
    assert said == [
        f"rules.graphs[{index}]: {tmp_path / name}: no such file or match yet; the report names culprits' layers only "
        "from graph dumps it finds when the search ends"
        for index, name in ((1, "nothere/*.txt"), (2, "missing.txt"))
    ]
