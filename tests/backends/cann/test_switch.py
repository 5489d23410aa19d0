"""fusion_switch.cfg: the writer follows CANN's format, the reader accepts both formats."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusion_dd.backends.cann.switch import exceptional_passes, load_switch_file, parse_switch_text, render_switch
from fusion_dd.core.errors import UsageError
from fusion_dd.core.rules import Rule, Section

CONV = Rule("ConvBatchnormFusionPass", Section.GRAPH)
SOFTMAX = Rule("SoftmaxFusionPass", Section.GRAPH)
ELTWISE = Rule("TbeEltwiseFusionPass", Section.UB)


def test_every_candidate_gets_an_exact_entry_in_its_section_and_no_all():
    text = render_switch([CONV, SOFTMAX, ELTWISE], [SOFTMAX])
    document = json.loads(text)
    assert document == {
        "Switch": {
            "GraphFusion": {"ConvBatchnormFusionPass": "off", "SoftmaxFusionPass": "on"},
            "UBFusion": {"TbeEltwiseFusionPass": "off"},
        }
    }


def test_base_cfg_entries_for_other_rules_are_kept_and_candidates_override_them():
    base = parse_switch_text(
        json.dumps(
            {
                "Switch": {"GraphFusion": {"ALL": "on", "ConvBatchnormFusionPass": "on", "OtherPass": "off"}},
                "ExceptionalPassOfO1Level": ["X"],
            }
        )
    )
    document = json.loads(render_switch([CONV], [], base))
    assert document["Switch"]["GraphFusion"] == {"ALL": "on", "OtherPass": "off", "ConvBatchnormFusionPass": "off"}
    assert document["ExceptionalPassOfO1Level"] == ["X"]


def test_line_format_base_is_written_into_both_sections():
    base = parse_switch_text("OtherPass:off\n")
    document = json.loads(render_switch([ELTWISE], [ELTWISE], base))
    assert document["Switch"]["GraphFusion"] == {"OtherPass": "off"}
    assert document["Switch"]["UBFusion"] == {"OtherPass": "off", "TbeEltwiseFusionPass": "on"}


def test_line_format_is_split_at_the_first_colon_and_trimmed_as_cann_does():
    # CANN's FusionConfigParser splits a line at its first ':' and trims key and value.
    switch = parse_switch_text("PassA : off\n  PassB:on  \nPassC:\ton\n")
    assert switch.state("PassA", Section.GRAPH) is False
    assert switch.state("PassB", Section.UB) is True
    assert switch.state("PassC", Section.GRAPH) is True
    assert FAKE.load_switch_text("PassA : off\n", "cfg").state("PassA", "GraphFusion") is False


def test_a_json_file_with_a_byte_order_mark_is_read_as_cann_reads_it():
    text = '\ufeff{"Switch": {"GraphFusion": {"SoftmaxFusionPass": "off"}}}'
    assert parse_switch_text(text).state("SoftmaxFusionPass", Section.GRAPH) is False
    assert FAKE.load_switch_text(text, "cfg").state("SoftmaxFusionPass", "GraphFusion") is False


def test_a_line_format_file_with_a_byte_order_mark_is_refused_with_the_fix():
    # CANN would read the mark as part of the first pass name, which then matches no pass.
    with pytest.raises(UsageError) as info:
        parse_switch_text("\ufeffPassA:off\n", "base.cfg")
    assert str(info.value).startswith("base.cfg:1: starts with a UTF-8 byte-order mark")
    assert "without BOM" in str(info.value)


def test_exact_name_beats_all():
    switch = parse_switch_text('{"Switch": {"GraphFusion": {"ALL": "off", "SoftmaxFusionPass": "on"}}}')
    assert switch.state("SoftmaxFusionPass", Section.GRAPH) is True
    assert switch.state("ConvBatchnormFusionPass", Section.GRAPH) is False
    assert switch.state("TbeEltwiseFusionPass", Section.UB) is None


@pytest.mark.parametrize(
    "text, fragment",
    [
        ('{"Switch": {"GraphFusion": {"A": "ON"}}}', "exactly \"on\" or \"off\""),
        ('{"Switch": {"GraphFusion": {"A": "on "}}}', "exactly"),
        ('{"Switch": {"Graph": {}}}', "unknown section"),
        ('{"Swtich": {}}', "unknown top-level key"),
        ('{"Switch": {"GraphFusion": {"A": "on",}}}', ":1: not valid JSON"),
        ('{"Switch": {"GraphFusion": {"A": "on", "A": "off"}}}', "duplicate key"),
        ("A:on\nA:off\n", ":2: 'A' is listed twice"),
        ("A:on\nB=off\n", ":2: expected 'PassName:on'"),
        ('{"Switch": {"GraphFusion": {"A": []}}}', "exactly \"on\" or \"off\""),
        ('{"Switch": {"GraphFusion": {"A": {"B": "on"}}}}', "exactly \"on\" or \"off\""),
        # FE's own checks of a user cfg: an empty file, a line of spaces (it holds no ':'),
        # and Priority / ExceptionalPassOfO1Level, which fusion-dd copies into every trial's file.
        ("", "the file is empty, and CANN refuses"),
        ("\n  \n", "the file is empty"),
        ("A:on\n   \nB:off\n", ":2: a line of only spaces"),
        ("A:on\r\n\r\nB:off\r\n", ":2: a line of only spaces"),
        ('{"Priority": 3}', "'Priority' must be an object"),
        ('{"Priority": {"Graph": {}}}', "unknown section 'Priority.Graph'"),
        ('{"Priority": {"GraphFusion": []}}', "'Priority.GraphFusion' must be an object"),
        ('{"Priority": {"GraphFusion": {"Middle": {}}}}', "unknown level 'Priority.GraphFusion.Middle'"),
        ('{"Priority": {"GraphFusion": {"Top": ["A"]}}}', "must be an object of pass names"),
        ('{"Priority": {"GraphFusion": {"Top": {"A": 5}}}}', "'Priority.GraphFusion.Top.A' is 5; CANN expects"),
        ('{"Priority": {"GraphFusion": {"Top": {"A": "high"}}}}', "expects a whole number in quotes"),
        ('{"Priority": {"GraphFusion": {"Main": {"A": "999"}}}}', "Main priority from 1000 to 1999"),
        ('{"Priority": {"UBFusion": {"Down": {"A": "3000"}}}}', "Down priority from 2000 to 2999"),
        ('{"Priority": {"GraphFusion": {"Top": {"A": "1"}, "Main": {"A": "1001"}}}}', "'A' has two priorities"),
        ('{"ExceptionalPassOfO1Level": "A"}', "must be a list of pass names"),
        ('{"ExceptionalPassOfO1Level": ["A", 3]}', "must be a list of pass names"),
    ],
)
def test_malformed_files_name_the_problem(text, fragment):
    with pytest.raises(UsageError) as info:
        parse_switch_text(text, "my.cfg")
    assert "my.cfg" in str(info.value)
    assert fragment in str(info.value)


def test_priorities_in_their_levels_ranges_are_read_and_kept_for_every_trials_file():
    text = json.dumps(
        {
            "Priority": {
                "GraphFusion": {"Top": {"A": "0"}, "Main": {"B": " 1999 "}},
                "UBFusion": {"Down": {"A": "2000"}},
            },
            "ExceptionalPassOfO1Level": ["C", ""],
        }
    )
    base = parse_switch_text(text)
    assert json.loads(render_switch([CONV], [], base))["Priority"] == json.loads(text)["Priority"]
    assert exceptional_passes(base) == {"C"}


def test_missing_file(tmp_path):
    with pytest.raises(UsageError, match="not found"):
        load_switch_file(tmp_path / "nope.cfg")


names = st.text(alphabet="ABCDEFGHabcdefgh0123456789", min_size=1, max_size=12)


@settings(deadline=None, max_examples=60)
@given(st.dictionaries(names, st.tuples(st.sampled_from(list(Section)), st.booleans()), min_size=1, max_size=20))
def test_reader_agrees_with_writer(table):
    rules = [Rule(name, section) for name, (section, _) in table.items()]
    enabled = [Rule(name, section) for name, (section, on) in table.items() if on]
    switch = parse_switch_text(render_switch(rules, enabled))
    for name, (section, on) in table.items():
        # AutoFuse points (AUTOFUSE_FLAGS) and other compilers' rules are never written into the file.
        assert switch.state(name, section) is (on if section in (Section.GRAPH, Section.UB) else None)


def test_a_rule_hashes_as_its_fields_and_survives_another_process() -> None:
    """The cached hash equals the dataclass hash, and a pickled rule rebuilds its own."""
    import pickle
    import subprocess
    import sys

    rule = Rule("ConvBatchnormFusionPass", Section.GRAPH)
    assert hash(rule) == hash(("ConvBatchnormFusionPass", Section.GRAPH))
    assert pickle.loads(pickle.dumps(rule)) == rule
    code = (
        "import pickle, sys; rule = pickle.loads(sys.stdin.buffer.read()); "
        "from fusion_dd.core.rules import Rule; print({rule: 1}[Rule(rule.name, rule.section)])"
    )
    out = subprocess.run([sys.executable, "-c", code], input=pickle.dumps(rule), capture_output=True, check=True)
    assert out.stdout.strip() == b"1"


def _fake_training_module():
    """tests/fakes/fake_train.py as a module: its own, stdlib-only reader of the switch file."""
    import importlib.util

    from tests.support.fake_training import FAKE_TRAIN

    spec = importlib.util.spec_from_file_location("fake_train_under_test", FAKE_TRAIN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FAKE = _fake_training_module()


@settings(deadline=None, max_examples=40)
@given(
    st.dictionaries(names, st.tuples(st.sampled_from([Section.GRAPH, Section.UB]), st.booleans()), min_size=1, max_size=12),
    st.sampled_from(["", '{"Switch": {"GraphFusion": {"ALL": "off", "Base1": "on"}}, "Priority": {}}', "Base1:on\nBase2:off\n"]),
)
def test_the_fake_trainings_own_reader_sees_what_the_writer_meant(table, base_text):
    """The fake training decides with its own reader (no fusion-dd import): it must see every
    candidate's state and the base cfg's entries as fusion-dd's reader does, under CANN's precedence."""
    rules = [Rule(name, section) for name, (section, _) in table.items()]
    enabled = [Rule(name, section) for name, (section, on) in table.items() if on]
    text = render_switch(rules, enabled, parse_switch_text(base_text) if base_text else None)
    for written in (text, base_text) if base_text else (text,):  # the base as a user wrote it, too
        ours, fake = parse_switch_text(written), FAKE.load_switch_text(written, "cfg")
        assert FAKE._enabled_names(fake) == sorted({name for name, section in ours.names() if ours.state(name, section)})
        for name in [*table, "Base1", "Base2", "Unlisted"]:
            for section in (Section.GRAPH, Section.UB):
                assert fake.state(name, section.value) is ours.state(name, section)


@pytest.mark.parametrize(
    "text",
    ['{"Switch": {"GraphFusion": {"A": "ON"}}}', '{"Switch": {"Graph": {}}}', '{"Swtich": {}}', "A:on\nA:off\n", "A=on\n"],
)
def test_the_fake_training_refuses_a_malformed_switch_file_like_cann(text):
    with pytest.raises(SystemExit, match="fake_train: cfg: "):
        FAKE.load_switch_text(text, "cfg")


@pytest.mark.parametrize(
    "text", ["", "A:on\n  \nB:off\n", '{"ExceptionalPassOfO1Level": "A"}', '{"Switch": {"GraphFusion": {"A": []}}}']
)
def test_the_fake_training_refuses_what_cann_refuses(text):
    with pytest.raises(SystemExit):
        FAKE.load_switch_text(text, "cfg")


def test_the_fake_training_keeps_the_exceptional_passes_on_as_cann_does():
    switch = FAKE.load_switch_text('{"Switch": {"GraphFusion": {"A": "off"}}, "ExceptionalPassOfO1Level": ["A"]}', "cfg")
    assert FAKE._is_on(switch, "A")
