"""JSON from outside, refused when too deep before the decoder recurses into it (a CI run's "Exception ignored"
traceback came from a finalizer the garbage collector ran at the recursion limit, inside json.loads)."""

from __future__ import annotations

import json
import sys

import pytest

from sparkpoint import json_input
from sparkpoint.json_input import NESTING, TooDeepError


def stack_depth() -> int:
    frame, depth = sys._getframe(), 0
    while frame is not None:
        frame, depth = frame.f_back, depth + 1
    return depth


def test_too_deep_a_text_is_refused_without_the_decoder_recursing_into_it():
    deep = "[" * 100_000 + "]" * 100_000
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(stack_depth() + 60)  # json.loads would exhaust this within 60 levels
    try:
        with pytest.raises(TooDeepError) as refused:
            json_input.loads(deep)
    finally:
        sys.setrecursionlimit(limit)
    assert isinstance(refused.value, json.JSONDecodeError) and refused.value.pos == NESTING
    assert str(refused.value).startswith(f"nested deeper than {NESTING} levels")


def test_the_deepest_text_allowed_is_parsed_and_one_level_more_refused():
    assert json_input.loads("[" * 3 + "]" * 3, nesting=3) == [[[]]]
    assert json_input.loads('{"a": {"b": [1, {"c": 2}]}}', nesting=4) == {"a": {"b": [1, {"c": 2}]}}
    with pytest.raises(TooDeepError):
        json_input.loads('{"a": {"b": [1, {"c": [2]}]}}', nesting=4)
    # siblings do not add up: ten arrays side by side nest two deep
    assert json_input.loads("[" + ",".join(["[1]"] * 10) + "]", nesting=2) == [[1]] * 10


def test_brackets_inside_strings_do_not_nest():
    text = json.dumps(["[" * 500 + '"\\' + "{" * 500])  # escaped quotes and backslashes inside the string
    assert json_input.loads(text, nesting=1) == ["[" * 500 + '"\\' + "{" * 500]


def test_an_unterminated_string_is_the_decoders_error_found_in_linear_time():
    # Quadratic backtracking on this text would take hours; the string's closing quote is optional in the scan.
    text = "[" * 300 + '"' + '\\"' * 2_000_000 + "[" * 300
    with pytest.raises(json.JSONDecodeError) as refused:
        json_input.loads(text, nesting=400)
    assert not isinstance(refused.value, TooDeepError) and "Unterminated string" in str(refused.value)


def test_bytes_are_decoded_as_json_loads_decodes_them():
    assert json_input.loads('{"a": ["é"]}'.encode("utf-16")) == {"a": ["é"]}
    assert json_input.loads(bytearray(b'{"a": 1}')) == {"a": 1}
    with pytest.raises(TooDeepError):
        json_input.loads(("[" * 300 + "]" * 300).encode("utf-32"))
