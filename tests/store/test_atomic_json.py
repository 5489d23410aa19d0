"""report.json and status files: the fast indented writer gives exactly json.dumps(indent=2, sort_keys=True)."""

import json
import random

from fusion_dd.store.atomic import dumps_indented, write_json_atomic


def _document(rng: random.Random, depth: int = 0):
    """A random JSON document mixing scalars, flat and nested containers, empty ones, odd strings and numbers."""
    scalars = [None, True, False, 0, -7, 10**20, 0.1, -0.0, 1e-300, float("nan"), float("inf"), "", "é\n\"\\", "\u2603"]
    if depth > 3 or rng.random() < 0.3:
        return rng.choice(scalars)
    if rng.random() < 0.5:
        return [_document(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    keys = ["a", "B", "é", "", "z z", "10", "2"]
    return {rng.choice(keys): _document(rng, depth + 1) for _ in range(rng.randint(0, 4))}


def test_the_text_is_the_standard_librarys():
    for seed in range(300):
        document = _document(random.Random(seed))
        assert dumps_indented(document) == json.dumps(document, indent=2, sort_keys=True), seed


def test_tuples_and_non_string_keys_are_written_as_json_dumps_writes_them(tmp_path):
    document = {"t": (1, (2, 3)), "k": {1: "a", 2: [1]}, "trials": [{"configuration": ["A", "B"], "metric": 0.5}]}
    write_json_atomic(tmp_path / "r.json", document)
    assert (tmp_path / "r.json").read_text() == json.dumps(document, indent=2, sort_keys=True) + "\n"
