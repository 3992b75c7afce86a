"""Shared fixtures. One local[2] SparkSession serves every Spark test (a start costs ~6 s)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
# The tests' drivers live for seconds, and their JIT's optimising compiler costs more CPU than it returns on 2 cores:
# a local job of 6 batches took 53-55 s of CPU, and 30-31 s with the first tier alone (-XX:TieredStopAtLevel=1).
# Every client-mode driver spark-submit starts, the shared session's too, reads SPARK_SUBMIT_OPTS; sparkpoint puts
# its own options before the user's. Benchmarks (scripts/bench_*.py) run without it.
os.environ["SPARK_SUBMIT_OPTS"] = " ".join(filter(None, [os.environ.get("SPARK_SUBMIT_OPTS"),
                                                          "-XX:TieredStopAtLevel=1"]))


@pytest.fixture(scope="session")
def spark():
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.fail("Java 17 is required for the Spark tests: install it "
                    "(e.g. apt-get install openjdk-17-jre-headless)")
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("sparkpoint-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.streaming.stateStore.maintenanceInterval", "1s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory):
    """A single-node KRaft broker on 127.0.0.1 (scripts/local_kafka.py), started by the first test that asks for
    it, once per run, and stopped at the end."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    import local_kafka

    broker = local_kafka.Broker(tmp_path_factory.mktemp("kafka")).start()
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def hadoop_cluster(tmp_path_factory):
    """HDFS and YARN on 127.0.0.1 (scripts/local_hadoop.py: a NameNode, a DataNode, a ResourceManager and a
    NodeManager in one JVM), started by the first test that asks for it, once per run, and stopped at the end.
    Jobs reach it with HADOOP_CONF_DIR=hadoop_cluster.conf_dir; its REST API is at hadoop_cluster.rm_web."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    import local_hadoop

    cluster = local_hadoop.HadoopCluster(tmp_path_factory.mktemp("hadoop")).start()
    yield cluster
    cluster.stop()


@pytest.fixture
def home(tmp_path, monkeypatch):
    """An isolated sparkpoint home, also exported for commands run by the test."""
    path = tmp_path / "home"
    monkeypatch.setenv("SPARKPOINT_HOME", str(path))
    monkeypatch.delenv("SPARKPOINT_CONFIG", raising=False)
    return path
