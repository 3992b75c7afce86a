"""`cluster start/stop` without Spark: its secrets file and its pid files."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from clitools import spark_home

from sparkpoint.adapters import local_cluster
from sparkpoint.adapters.spark_install import find_spark
from sparkpoint.adapters.cluster_managers.standalone import StandaloneMaster, read_properties
from sparkpoint.errors import EnvironmentSetupError
from sparkpoint.adapters.processes import pid_alive, process_start


def test_the_secrets_go_to_their_file_only_not_through_a_planted_link(tmp_path):
    conf = tmp_path / "conf"
    conf.mkdir()
    loot = tmp_path / "loot"
    loot.write_text("")
    for name in (".spark-defaults.conf.tmp", ".spark-defaults.conf.tmp.1"):  # names an earlier version used
        (conf / name).symlink_to(loot)
    local_cluster._write_conf(tmp_path, local_cluster.Ports(), find_spark(str(spark_home(tmp_path / "spark", "4.3.0"))))
    written = conf / "spark-defaults.conf"
    assert loot.read_text() == ""
    assert stat.S_IMODE(os.stat(written).st_mode) == 0o600 and "spark.authenticate.secret" in written.read_text()
    assert sorted(p.name for p in conf.iterdir()) == sorted([".spark-defaults.conf.tmp", ".spark-defaults.conf.tmp.1",
                                                             "spark-defaults.conf"])


@pytest.mark.parametrize(("version", "rest", "tokens"), [
    ("3.5.9", False, False),  # no JWSFilter, and a master that refuses REST beside the RPC secret
    ("4.0.0", False, True),  # its master refuses REST beside the secret; the UIs take tokens
    ("4.0.5", True, True), ("4.1.0", False, True), ("4.1.4", True, True), ("4.2.1", True, True), ("4.3.0", True, True),
])
def test_the_cluster_is_as_secure_as_its_spark_allows_and_a_master_without_rest_refuses_cluster_mode(
        tmp_path, version, rest, tokens):
    local_cluster._write_conf(tmp_path, local_cluster.Ports(), find_spark(str(spark_home(tmp_path / "spark", version))))
    conf = read_properties(tmp_path / "conf" / "spark-defaults.conf")
    assert conf["spark.authenticate"] == "true" and len(conf["spark.authenticate.secret"]) == 64  # RPC, always
    assert conf["spark.master.rest.enabled"] == str(rest).lower()
    assert ("spark.master.rest.filters" in conf, "spark.master.rest.host" in conf) == (rest, rest)
    assert ("spark.ui.filters" in conf, "spark.org.apache.spark.ui.JWSFilter.param.secretKey" in conf) == (tokens,
                                                                                                          tokens)
    master = StandaloneMaster(local_cluster.master_url(), conf)
    if rest:
        master.require_rest()
    else:
        with pytest.raises(EnvironmentSetupError, match="runs no REST submission server"):
            master.require_rest()


def test_stop_leaves_a_process_that_reuses_a_stale_pid_alone(tmp_path):
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    try:
        (tmp_path / "pids").mkdir()
        # An earlier sparkpoint's pid file (the pid alone), and one whose process started at another time.
        (tmp_path / "pids" / "worker.pid").write_text(str(other.pid))
        (tmp_path / "pids" / "master.pid").write_text(f"{other.pid} {int(process_start(other.pid)) + 1}")
        info = local_cluster.status(tmp_path)
        assert (info.master_pid, info.worker_pid) == (None, None)
        assert local_cluster.stop(tmp_path, grace=1).stopped == []
        assert other.poll() is None and pid_alive(other.pid)
        assert not (tmp_path / "pids" / "worker.pid").exists()
    finally:
        other.kill()
        other.wait()


def test_stop_ends_the_process_its_pid_file_names(tmp_path):
    conf_file = str(tmp_path.resolve() / "conf" / "spark-defaults.conf")
    # An earlier sparkpoint's pid file: its process is recognised by the properties file on its command line.
    legacy = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "--properties-file", conf_file],
                              start_new_session=True)
    current = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    # Popen returns before the child has exec'd: until then its command line is this test's (seen failing once).
    deadline = time.monotonic() + 10
    while conf_file not in Path(f"/proc/{legacy.pid}/cmdline").read_bytes().decode(errors="replace"):
        assert time.monotonic() < deadline, "the legacy process did not start"
        time.sleep(0.01)
    (tmp_path / "pids").mkdir()
    (tmp_path / "pids" / "worker.pid").write_text(str(legacy.pid))
    (tmp_path / "pids" / "master.pid").write_text(f"{current.pid} {process_start(current.pid)}")
    assert local_cluster.stop(tmp_path, grace=5).stopped == ["worker", "master"]
    assert legacy.wait(timeout=30) < 0 and current.wait(timeout=30) < 0


def test_status_finds_the_cluster_on_the_ports_its_start_chose_and_a_restart_keeps_the_secrets(tmp_path, capsys):
    """A cluster started on other ports than Spark's defaults (which another Spark may hold) is reported on its own
    ports by a plain `cluster status --dir`: before, status took Spark's defaults and named another cluster's."""
    import json

    from sparkpoint.cli.main import main

    spark = find_spark(str(spark_home(tmp_path / "spark", "4.3.0")))
    directory = tmp_path / "cluster"
    local_cluster._write_conf(directory, local_cluster.Ports(), spark)
    first = read_properties(directory / "conf" / "spark-defaults.conf")
    chosen = local_cluster.Ports(master=7177, master_ui=8180, rest=6166, worker_ui=8181)
    local_cluster._write_conf(directory, chosen, spark)
    again = read_properties(directory / "conf" / "spark-defaults.conf")
    for secret in (local_cluster.SECRET_KEY, local_cluster.JWS_KEY):
        assert again[secret] == first[secret]  # the clients of this directory hold them
    assert (again["spark.master.rest.port"], again["spark.master.ui.port"]) == ("6166", "8180")
    assert stat.S_IMODE(os.stat(directory / local_cluster.PORTS_FILE).st_mode) == 0o600

    assert main(["cluster", "status", "--dir", str(directory), "-o", "json"]) == 0
    reported = json.loads(capsys.readouterr().out)
    assert (reported["master_url"], reported["rest_url"]) == ("spark://127.0.0.1:7177", "http://127.0.0.1:6166")
    assert reported["master_pid"] is None  # nothing runs: no process, no request
    assert main(["cluster", "status", "--dir", str(directory), "--master-port", "7300", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["master_url"] == "spark://127.0.0.1:7300"

    assert local_cluster.status(tmp_path / "never-started").master_url == "spark://127.0.0.1:7077"
    (directory / local_cluster.PORTS_FILE).write_text('{"master": "7177"}')
    assert main(["cluster", "status", "--dir", str(directory)]) == 15
    assert "ports.json is not a record of ports" in capsys.readouterr().err
