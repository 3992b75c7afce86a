"""A real HDFS and YARN for the tests and the docs' walk-throughs: Hadoop's mini clusters (a NameNode and a
DataNode, a ResourceManager and a NodeManager) in one JVM on 127.0.0.1, from the jars Maven puts in its local
repository (~/.m2); no Hadoop installation. Spark jobs reach it as they reach a cluster of an operator's:
spark-submit --master yarn with HADOOP_CONF_DIR set to the client configuration it writes. Nothing here is
sparkpoint's.

    .venv/bin/python scripts/local_hadoop.py fetch            # the jars into ~/.m2 (once: then nothing)
    .venv/bin/python scripts/local_hadoop.py cluster --dir D  # HDFS and YARN until Ctrl-C; prints their URLs

Needs Java 17 and Maven (`mvn`). The launcher, scripts/hadoop/MiniHdfsYarn.java, runs in java's source-file
mode: no build step.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from xml.sax.saxutils import escape

sys.path.insert(0, str(Path(__file__).resolve().parent))
from local_kafka import await_service, classpath, run_until_interrupted  # noqa: E402 - shared with Kafka's broker

HADOOP = "3.5.0"  # the Hadoop of the project's Spark (pyspark 4.3 ships hadoop-client-api 3.5.0)
HERE = Path(__file__).resolve().parent / "hadoop"
# The shaded mini cluster (it brings hadoop-client-api and -runtime), and what it needs that it neither bundles
# nor depends on: JUnit, because MiniYARNCluster's constructor asks GenericTestUtils for its directory, which
# asserts with junit-jupiter; BouncyCastle (bcprov and bcpkix), which the ResourceManager's web proxy CA
# references unrelocated at its start; reload4j and its SLF4J binding, or the cluster logs nothing at all.
# (commons-lang3, also referenced unrelocated, is not needed: only a constant of it, inlined at compile time.)
JARS = [f"org.apache.hadoop:hadoop-client-minicluster:{HADOOP}", "org.junit.jupiter:junit-jupiter-api:5.13.3",
        "org.bouncycastle:bcprov-jdk18on:1.82", "org.bouncycastle:bcpkix-jdk18on:1.82",
        "ch.qos.reload4j:reload4j:1.2.22", "org.slf4j:slf4j-reload4j:1.7.36"]
# Hadoop's own test runs open these to its reflection on Java 17 (hadoop-project's surefire argLine).
ADD_OPENS = [f"--add-opens=java.base/{package}=ALL-UNNAMED" for package in (
    "java.io", "java.lang", "java.lang.reflect", "java.math", "java.net", "java.text", "java.util",
    "java.util.concurrent", "java.util.zip", "sun.security.util", "sun.security.x509")]
SETTINGS = {
    "dfs.replication": "1",
    # Tests write as whoever runs them, and YARN's containers run as the same user: no one to keep out.
    "dfs.permissions.enabled": "false",
    # Room for a few applications at once (a Spark application master or executor of 512 MB takes a 1 GB
    # container); MiniYARNCluster reads the NodeManager's memory from this key, not the usual one.
    "yarn.minicluster.yarn.nodemanager.resource.memory-mb": "8192",
    "yarn.scheduler.minimum-allocation-mb": "256",
    "yarn.scheduler.capacity.maximum-am-resource-percent": "0.5",
    # No capacity-scheduler.xml is on the classpath: without a queue the ResourceManager does not start.
    "yarn.scheduler.capacity.root.queues": "default",
    "yarn.scheduler.capacity.root.default.capacity": "100",
    "yarn.scheduler.capacity.root.default.maximum-capacity": "100",
    # A disk over 90% full would mark the NodeManager unhealthy, and no container would ever start.
    "yarn.nodemanager.disk-health-checker.max-disk-utilization-per-disk-percentage": "99.0",
    # The capacity scheduler's asynchronous thread looks for work every 5 ms by default, which kept 3% of a core
    # busy with nothing to place; a container now waits up to 0.1 s more.
    "yarn.scheduler.capacity.schedule-asynchronously.scheduling-interval-ms": "100",
}
START_SECONDS = 120.0


def java_home() -> Path:
    """The Java the cluster runs on; its NodeManager hands it to the containers (Spark's application master and
    executors run $JAVA_HOME/bin/java)."""
    if os.environ.get("JAVA_HOME"):
        return Path(os.environ["JAVA_HOME"])
    return Path(os.path.realpath(shutil.which("java") or "/usr/bin/java")).parents[1]


def spark_submit_confs(cluster_mode: bool, spark_home: Path) -> list[str]:
    """spark-submit's options for a job on these mini clusters: the Spark's own jars read where they are (the
    NodeManager runs here: nothing to upload), small containers, and every address on loopback."""
    confs = [f"spark.yarn.jars=local:{spark_home}/jars/*", "spark.executor.instances=1", "spark.executor.memory=512m",
             "spark.yarn.am.memory=512m", "spark.driver.memory=512m"]
    # In cluster mode YARN sets spark.driver.host to the container's host itself (which an explicit one
    # breaks: its executors never reach the driver); the driver's own SPARK_LOCAL_IP keeps it on loopback.
    confs += (["spark.yarn.appMasterEnv.SPARK_LOCAL_IP=127.0.0.1", "spark.yarn.maxAppAttempts=1"] if cluster_mode
              else ["spark.driver.host=127.0.0.1", "spark.driver.bindAddress=127.0.0.1"])
    return [arg for conf in confs for arg in ("--conf", conf)]


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def _site(path: Path, properties: dict[str, str]) -> None:
    path.write_text('<?xml version="1.0"?>\n<configuration>\n' + "".join(
        f"  <property><name>{escape(name)}</name><value>{escape(value)}</value></property>\n"
        for name, value in properties.items()) + "</configuration>\n")


class HadoopCluster:
    """HDFS and YARN in ``directory`` (their data, containers' logs, client configuration and the JVM's log,
    cluster.log), on ephemeral ports of 127.0.0.1."""

    def __init__(self, directory: Path):
        self.directory = Path(directory).resolve()
        self.process: subprocess.Popen | None = None
        self.ready: dict = {}

    @property
    def fs(self) -> str:
        """fs.defaultFS: hdfs://127.0.0.1:PORT."""
        return f"hdfs://127.0.0.1:{self.ready['nn_rpc_port']}"

    @property
    def webhdfs_port(self) -> int:
        return self.ready["nn_http_port"]

    @property
    def rm_web(self) -> str:
        """The ResourceManager's web address, with its REST API under /ws/v1/cluster."""
        return f"http://{self.ready['yarn.resourcemanager.webapp.address']}"

    @property
    def conf_dir(self) -> Path:
        """A client's configuration, for HADOOP_CONF_DIR."""
        return self.directory / "conf"

    def start(self, timeout: float = START_SECONDS) -> HadoopCluster:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.ready = {}
        # A fresh cluster each time: the NameNode is formatted anyway, and the ready file must be this run's.
        for stale in ("dfs", "yarn", "tmp", "conf", "ready.json"):
            path = self.directory / stale
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
        scratch = self.directory / "tmp"
        scratch.mkdir()
        java_classpath = os.pathsep.join(classpath(JARS))
        settings = {**SETTINGS, "hadoop.tmp.dir": str(scratch)}  # not /tmp/hadoop-USER
        java = [str(java_home() / "bin" / "java"), *ADD_OPENS,
                # Small heap, serial GC, C1 only: it shares 2 cores with Spark's JVMs and starts sooner so.
                "-Xmx1g", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                # The NodeManager binds "localhost" whatever is set: 127.0.0.1 then, never ::1.
                "-Djava.net.preferIPv4Stack=true",
                # Jetty unpacks each web app under java.io.tmpdir and leaves it there (/tmp/jetty-*).
                f"-Djava.io.tmpdir={scratch}", f"-Dlog4j.configuration=file:{HERE / 'log4j.properties'}",
                "-cp", java_classpath, str(HERE / "MiniHdfsYarn.java"), str(self.directory),
                *(f"{key}={value}" for key, value in settings.items())]
        # Containers get the NodeManager's JAVA_HOME, and HADOOP_CONF_DIR and the like (its env-whitelist): the
        # one needed, and none of a client's, which would put another cluster's configuration on their classpath.
        environment = {key: value for key, value in os.environ.items() if not key.startswith("HADOOP_")}
        environment["JAVA_HOME"] = str(java_home())
        log = open(self.directory / "cluster.log", "ab")  # noqa: SIM115 - the cluster's, for its whole life
        # Its own process group: stop() ends the JVM and nothing else. Its stdin is a pipe this process holds:
        # when it closes (stop(), or this process dies however it dies) the JVM stops the cluster and exits.
        self.process = subprocess.Popen(java, cwd=self.directory, env=environment, stdin=subprocess.PIPE,
                                        stdout=log, stderr=log, start_new_session=True)
        log.close()
        await_service(self, timeout, f"HDFS and YARN did not start; see {self.directory / 'cluster.log'}")
        self._write_client_conf()
        return self

    def _ready(self) -> bool:
        """ready.json is written (both clusters started, the NodeManager registered) and both web APIs answer."""
        if not self.ready:
            try:
                self.ready = json.loads((self.directory / "ready.json").read_text())
            except FileNotFoundError:
                return False
        return (_answers(f"http://127.0.0.1:{self.webhdfs_port}/webhdfs/v1/?op=LISTSTATUS")
                and _answers(f"{self.rm_web}/ws/v1/cluster/info"))

    def _write_client_conf(self) -> None:
        """Only addresses: the servers' whole configuration names classes a client lacks (MiniDFSCluster's
        net.topology.node.switch.mapping.impl, StaticMapping, is a test class of hadoop-common, and Spark's YARN
        scheduler fails on it before it submits anything)."""
        self.conf_dir.mkdir(exist_ok=True)
        # A job's files (Spark's staging, checkpoints) on the single DataNode, without under-replication.
        _site(self.conf_dir / "core-site.xml", {"fs.defaultFS": self.fs, "dfs.replication": "1"})
        # Where a WebHDFS client (sparkpoint's) finds the NameNode's HTTP side of fs.defaultFS.
        _site(self.conf_dir / "hdfs-site.xml", {"dfs.namenode.http-address": f"127.0.0.1:{self.webhdfs_port}"})
        # The scheduler's address is for the application master, which reads this directory's files from
        # Spark's staging; the web address is where it registers its tracking URL.
        _site(self.conf_dir / "yarn-site.xml", {
            key: self.ready[key] for key in ("yarn.resourcemanager.address", "yarn.resourcemanager.scheduler.address",
                                             "yarn.resourcemanager.webapp.address")})

    def stop(self) -> None:
        if self.process is None:
            return
        with contextlib.suppress(OSError):
            self.process.stdin.close()
        try:
            # MiniHdfsYarn.java waits up to 30 s for the NodeManager to end its containers.
            self.process.wait(timeout=40)
        except subprocess.TimeoutExpired:
            for each in (signal.SIGTERM, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, each)
                try:
                    self.process.wait(timeout=20)
                    break
                except subprocess.TimeoutExpired:
                    continue


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("fetch", help="the jars into ~/.m2")
    cluster = commands.add_parser("cluster", help="run HDFS and YARN until interrupted")
    cluster.add_argument("--dir", required=True, type=Path)
    args = parser.parse_args()
    if args.command == "fetch":
        print(f"Hadoop {HADOOP}'s mini clusters: {len(classpath(JARS))} jars in ~/.m2", file=sys.stderr)
        return 0
    # SIGTERM ends it as Ctrl-C does: the cluster, in a process group of its own, is stopped, never left behind.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    running = HadoopCluster(args.dir).start()
    run_until_interrupted(running, lambda: (
        print(running.fs, flush=True), print(running.rm_web, flush=True),
        print(f"HDFS {running.fs} (WebHDFS on port {running.webhdfs_port}), YARN {running.rm_web}; clients: "
              f"HADOOP_CONF_DIR={running.conf_dir}; Ctrl-C stops it", file=sys.stderr)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
