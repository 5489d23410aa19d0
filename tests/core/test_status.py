"""Every way a search ends maps to one exit code, and the words stay the journal's."""

import json

from fusion_dd.core.status import ANSWERS, ExitCode, SearchStatus, exit_code_of


def test_each_ending_gives_the_exit_code_the_readme_documents():
    assert {status: exit_code_of(status) for status in SearchStatus} == {
        SearchStatus.FOUND: ExitCode.OK,
        SearchStatus.NO_FAILURE: ExitCode.OK,
        SearchStatus.BASELINE_FAILS: ExitCode.OK,
        SearchStatus.TOO_NOISY: ExitCode.OK,
        SearchStatus.RUNNING: ExitCode.OK,
        SearchStatus.BUDGET_EXHAUSTED: ExitCode.BUDGET,
        SearchStatus.INTERRUPTED: ExitCode.INTERRUPTED,
        SearchStatus.TRAINING_BROKEN: ExitCode.USAGE,
        SearchStatus.SWITCH_IGNORED: ExitCode.USAGE,
    }
    assert [int(code) for code in ExitCode] == [0, 1, 2, 3, 130]
    assert exit_code_of("budget_exhausted") == 3  # a word read back from an old journal


def test_a_status_is_the_bare_word_in_json_text_and_comparisons():
    assert json.dumps({"status": SearchStatus.NO_FAILURE}) == '{"status": "no_failure"}'
    assert f"{SearchStatus.FOUND}" == str(SearchStatus.FOUND) == "found" == SearchStatus.FOUND
    assert SearchStatus("too_noisy") in ANSWERS and "found" in ANSWERS
