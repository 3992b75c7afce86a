"""Property tests: the manifest and checkpoint-log parsers never fail other than with sparkpoint's
own errors, and never accept a path that leaves the savepoint."""

from __future__ import annotations

import contextlib
import json
import posixpath

from hypothesis import given, settings
from hypothesis import strategies as st

from sparkpoint.core import manifest as mf
from sparkpoint.core.checkpoint import parse_commit, parse_offsets
from sparkpoint.errors import NotACheckpointError, SavepointInvalidError

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_manifest_parser_accepts_or_refuses_cleanly(raw):
    with contextlib.suppress(SavepointInvalidError):
        mf.parse(raw, "m")


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_manifest_validation_refuses_any_shape_cleanly(value):
    with contextlib.suppress(SavepointInvalidError):
        mf.validate(value, "m")


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet="ab./\\:\x00-_", max_size=30))
def test_accepted_paths_stay_inside(path):
    try:
        checked = mf.check_relative_path(path, "m")
    except SavepointInvalidError:
        return
    normalized = posixpath.normpath(posixpath.join("/savepoint", checked))
    assert normalized.startswith("/savepoint/")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.integers(min_value=0, max_value=10))
def test_log_parsers_accept_or_refuse_cleanly(raw, batch):
    for parse in (lambda: parse_offsets(raw, batch, "o"), lambda: parse_commit(raw, "c")):
        with contextlib.suppress(NotACheckpointError):
            parse()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.just("-"), json_values.map(json.dumps)), max_size=3))
def test_offsets_round_trip_source_lines(lines):
    raw = "\n".join(["v1", json.dumps({"batchWatermarkMs": 0, "conf": {}}), *lines]).encode()
    entry = parse_offsets(raw, 3, "o")
    assert entry.sources == [None if line == "-" else json.loads(line) for line in lines]
