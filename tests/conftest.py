"""Shared fixtures. One local[2] SparkSession serves every Spark test (a start costs ~6 s)."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from clitools import FIRST_TIER_ONLY

from sparkpoint.adapters.local_files import locked

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
# The tests' drivers live for seconds, and their JIT's optimising compiler costs more CPU than it returns on 2 cores:
# a local job of 6 batches took 53-55 s of CPU, and 30-31 s with the first tier alone (-XX:TieredStopAtLevel=1).
# Every client-mode driver spark-submit starts, the shared session's too, reads SPARK_SUBMIT_OPTS; sparkpoint puts
# its own options before the user's. Benchmarks (scripts/bench_*.py) run without it.
os.environ["SPARK_SUBMIT_OPTS"] = " ".join(filter(None, [os.environ.get("SPARK_SUBMIT_OPTS"),
                                                          FIRST_TIER_ONLY]))


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


CLASS_ARCHIVES = "SPARKPOINT_CLASS_ARCHIVES"
SERVICES = ("kafka_broker", "hadoop_cluster")  # session fixtures that start a service once per run
# The modules whose tests use them: run on one pytest-xdist worker, so that each service starts once.
SERVICE_MODULES = frozenset({"tests/compat/test_kafka_versions.py", "tests/compat/test_yarn_versions.py",
                             "tests/spark/test_demo.py", "tests/spark/test_hdfs.py", "tests/spark/test_kafka_input.py",
                             "tests/spark/test_kafka_jobs.py", "tests/spark/test_yarn.py"})


def _serves(module: str) -> bool:
    """Whether a test id's module (relative to where pytest runs) is one of SERVICE_MODULES."""
    return any(module == name or module.endswith("/" + name) for name in SERVICE_MODULES)


def _heaviest_first(scope: str) -> int:
    """The order the workers take the scopes in: the service modules (about a third of the suite's time), the
    other Spark tests, the unit tests last. What is handed out last decides how long one worker finishes alone:
    a unit module takes seconds, a Spark module minutes (test_cluster ran alone for its last 4 of 5)."""
    if scope == "services":
        return 0
    return 2 if "tests/unit/" in scope else 1


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """scripts/test.sh's two workers take whole modules (a module's fixtures, a cluster or an S3 server, start
    once), and the service modules as one, heaviest first."""
    from xdist.scheduler import LoadFileScheduling

    class ModulesAndServices(LoadFileScheduling):
        ordered = False

        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return "services" if _serves(module) else module

        def _assign_work_unit(self, node) -> None:
            # The queue is complete at the first assignment; sorted() keeps xdist's own order within a tier.
            if not self.ordered:
                for scope in sorted(self.workqueue, key=_heaviest_first):
                    self.workqueue.move_to_end(scope)
                self.ordered = True
            super()._assign_work_unit(node)

    return ModulesAndServices(config, log)


def pytest_collection_modifyitems(config, items):
    strays = sorted({module for item in items if set(SERVICES) & set(item.fixturenames)
                     and not _serves(module := item.nodeid.split("::", 1)[0])})
    if strays:
        raise pytest.UsageError(f"{', '.join(strays)} use(s) {' or '.join(SERVICES)}: add to SERVICE_MODULES "
                                "(tests/conftest.py), or each pytest-xdist worker starts the service again")


def _run_directory(tmp_path_factory, worker_id) -> Path:
    """The directory of the whole run: pytest-xdist's workers each have theirs inside it."""
    base = tmp_path_factory.getbasetemp()
    return base if worker_id == "master" else base.parent


@pytest.fixture(scope="session")
def class_archive(tmp_path_factory, worker_id):
    """One class archive for the run, built once (40-80 s) and mapped by every driver the CLI launches on the
    project's Spark, whatever the test's home (tests/spark's and tests/compat's, whose conftests ask for it): a
    local job of 8 batches took 26-29 s of CPU without it, 17-19 s with it. Under pytest-xdist the first worker
    to ask builds it in the run's directory, which the workers share; the other maps the same one.
    tests/spark/test_class_archive.py checks this build's result."""
    from clitools import cli

    run_directory = _run_directory(tmp_path_factory, worker_id)
    directory = run_directory / "class-archives"
    env = {**os.environ, CLASS_ARCHIVES: str(directory)}
    home = tmp_path_factory.mktemp("archive-home")
    with locked(run_directory / "class-archives.lock"):
        code, out, err = cli(home, "-o", "json", "class-archive", "list", env=env)
        assert code == 0, err[-3000:]
        built = json.loads(out)
        if not built:
            code, out, err = cli(home, "-o", "json", "class-archive", "build", env=env)
            assert code == 0, err[-3000:]
            built = [json.loads(out)]
    before = os.environ.get(CLASS_ARCHIVES)
    os.environ[CLASS_ARCHIVES] = str(directory)
    yield built[0]
    if before is None:
        os.environ.pop(CLASS_ARCHIVES, None)
    else:
        os.environ[CLASS_ARCHIVES] = before


def _services_worker(tmp_path_factory, worker_id) -> None:
    """Fails a service's start on a second pytest-xdist worker: the scheduler above sends every module that asks
    for one to a single worker, and a scheduler xdist no longer calls would otherwise start each service twice."""
    claim = _run_directory(tmp_path_factory, worker_id) / "services-worker"
    with locked(claim.with_suffix(".lock")):
        if not claim.exists():
            claim.write_text(worker_id)
        owner = claim.read_text()
    assert owner == worker_id, (f"{worker_id} starts a service that {owner} runs: the services' modules were "
                                "split between workers (tests/conftest.py, pytest_xdist_make_scheduler)")


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory, worker_id):
    """A single-node KRaft broker on 127.0.0.1 (scripts/local_kafka.py), started by the first test that asks for
    it, once per run, and stopped at the end."""
    _services_worker(tmp_path_factory, worker_id)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    import local_kafka

    broker = local_kafka.Broker(tmp_path_factory.mktemp("kafka")).start()
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def hadoop_cluster(tmp_path_factory, worker_id):
    """HDFS and YARN on 127.0.0.1 (scripts/local_hadoop.py: a NameNode, a DataNode, a ResourceManager and a
    NodeManager in one JVM), started by the first test that asks for it, once per run, and stopped at the end.
    Jobs reach it with HADOOP_CONF_DIR=hadoop_cluster.conf_dir; its REST API is at hadoop_cluster.rm_web."""
    _services_worker(tmp_path_factory, worker_id)
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
