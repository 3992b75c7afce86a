"""`run -s SAVEPOINT --fork`: two variants from one savepoint, running side by side, are two queries (new query
ids) that continue from the same state. `rescale` and `run -s --partitions` from the command line: the version
restored from a rescaled savepoint continues the same counts on the new partitions, and `savepoints --tree`
shows the rescaled savepoint under the one it came from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from browser import chromium, served, states_shown
from clitools import cli_json, wait_for
from posts import APP, batches, feed, final_counts, v1_after_two_batches

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_two_forks_of_one_savepoint_are_two_queries_with_the_same_state(tmp_path):
    home, inputs = tmp_path / "home", tmp_path / "in"
    v1 = v1_after_two_batches(home, inputs, tmp_path / "out-v1")
    original_id = cli_json(home, "list")[0]["queries"][0]["id"]
    stopped = cli_json(home, "stop", v1["id"])
    assert stopped["queries"][0]["query_id"] == original_id

    forks = [cli_json(home, "run", "--detach", "--no-check", "--name", f"posts-{variant}", "-s", stopped["id"],
                      "--fork", APP, "v1", str(inputs), str(tmp_path / f"out-{variant}")) for variant in "ab"]
    feed(inputs, 2)
    for variant in "ab":
        wait_for(lambda v=variant: batches(tmp_path / f"out-{v}"), what=f"fork {variant}'s first batch")
    listed = {job["id"]: job for job in cli_json(home, "list")}
    ids = [listed[fork["id"]]["queries"][0]["id"] for fork in forks]
    assert len({original_id, *ids}) == 3  # two queries of their own, neither the original
    for fork, query_id in zip(forks, ids, strict=True):
        checkpoint = Path(fork["checkpoint_root"]) / "posts"
        assert json.loads((checkpoint / "metadata").read_text())["id"] == query_id
    # The same state continued: each fork's counts after file 2 are v1's counts plus file 2's posts.
    counts = [final_counts(tmp_path / f"out-{variant}") for variant in "ab"]
    assert counts[0] == counts[1] and counts[0] == {"p2/like": 3, "p3/like": 2, "p0/like": 2}
    # The page, in Chromium: the stopped v1 and its two forks, running, each in its state.
    with chromium() as browser, served(home) as url:
        page = browser.new_page()
        page.goto(url)
        shown = states_shown(page, url.split("?")[0])
    assert shown == {v1["id"]: "finished", **{fork["id"]: f"running a fork of {v1['id']}" for fork in forks}}
    for fork in forks:
        assert cli_json(home, "cancel", fork["id"])["state"] == "cancelled"


def test_run_s_partitions_continues_the_same_counts_on_the_new_partitions(tmp_path):
    home, inputs = tmp_path / "home", tmp_path / "in"
    v1 = v1_after_two_batches(home, inputs, tmp_path / "out-v1")
    stopped = cli_json(home, "stop", v1["id"])

    rescaled = cli_json(home, "rescale", stopped["id"], "--partitions", "3", str(tmp_path / "rescaled"))
    (query,) = rescaled["queries"]
    assert (rescaled["source_id"], query["partitions_before"], query["partitions"]) == (stopped["id"], 2, 3)
    assert query["batch_id"] == stopped["queries"][0]["batch_id"] + 1
    assert query["stores"] and all(s["rows"] > 0 for s in query["stores"])
    assert list(rescaled["phases"]) == ["restore", "state_read", "spark_session", "state_placed", "read_back",
                                        "savepoint"], rescaled["phases"]
    assert 0 < sum(rescaled["phases"].values()) <= rescaled["seconds"]
    assert cli_json(home, "verify", rescaled["savepoint"]["path"])["valid"]

    wide = cli_json(home, "run", "--detach", "--name", "posts-wide", "-s", stopped["id"], "--partitions", "5", APP,
                    "v1", str(inputs), str(tmp_path / "out-wide"))
    assert wide["upgrade_check"]["compatible"]  # the application's 2 partitions do not refuse a rescaled savepoint
    feed(inputs, 2)
    wait_for(lambda: batches(tmp_path / "out-wide"), what="the rescaled version's first batch")
    assert final_counts(tmp_path / "out-wide") == {"p2/like": 3, "p3/like": 2, "p0/like": 2}
    checkpoint = Path(wide["checkpoint_root"]) / "posts"
    last = max(int(p.name) for p in (checkpoint / "offsets").iterdir() if p.name.isdigit())
    conf = json.loads((checkpoint / "offsets" / str(last)).read_text().splitlines()[1])["conf"]
    assert conf["spark.sql.shuffle.partitions"] == "5"

    (root,) = [node for node in cli_json(home, "savepoints", "--tree") if node["id"] == stopped["id"]]
    children = {child["origin"]["partitions"]: child for child in root["children"]}
    assert set(children) == {5} and children[5]["parent"] == stopped["id"]
    assert Path(wide["restored_from"]).name == children[5]["id"]
    assert cli_json(home, "cancel", wide["id"])["state"] == "cancelled"
