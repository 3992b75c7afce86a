"""Apache Kafka for the tests and the docs' walk-throughs: a single-node KRaft broker (broker and controller in
one JVM) on 127.0.0.1, from the jars Maven puts in its local repository (~/.m2), and Spark's Kafka connector for
each supported Spark minor, as jars to hand spark-submit with --jars. Nothing here is sparkpoint's: an operator's
own broker and connector stand in their place.

    .venv/bin/python scripts/local_kafka.py fetch           # every jar below into ~/.m2 (once: then nothing)
    .venv/bin/python scripts/local_kafka.py jars 4.3        # the --jars value for a job on Spark 4.3
    .venv/bin/python scripts/local_kafka.py broker --dir D  # a broker until Ctrl-C; prints its bootstrap address

Needs Java 17 and Maven (`mvn`).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

KAFKA = "4.1.1"  # the broker: Kafka 4 has no ZooKeeper; KRaft in one process
BROKER = [f"org.apache.kafka:kafka_2.13:{KAFKA}",
          # Kafka 4 logs through SLF4J 2 to Log4j 2; its own pom leaves the backend to the application.
          "org.slf4j:slf4j-api:2.0.17", "org.apache.logging.log4j:log4j-slf4j2-impl:2.25.3"]
# Spark's Kafka connector per supported minor: a release of that minor that Maven Central serves whole, with its
# token provider (the patch releases this project runs, 3.5.9 to 4.2.1, are not served there, nor are 4.0.1 to
# 4.0.4 or 4.1.2 to 4.1.3 whole); 4.3 has none yet, and reads Kafka through 4.2's (verified: a keyed aggregation
# over a topic, exact, on 4.3.0).
CONNECTORS = {"3.5": ("2.12", "3.5.7"), "4.0": ("2.13", "4.0.0"), "4.1": ("2.13", "4.1.1"),
              "4.2": ("2.13", "4.2.0"), "4.3": ("2.13", "4.2.0")}
# What spark-submit needs beside Spark's own jars (Spark's docs list these four for --jars).
CONNECTOR_JARS = ("spark-sql-kafka-0-10", "spark-token-provider-kafka-0-10", "kafka-clients", "commons-pool2")
START_SECONDS = 60.0


def connector(minor: str) -> str:
    scala, version = CONNECTORS[minor]
    return f"org.apache.spark:spark-sql-kafka-0-10_{scala}:{version}"


def classpath(coordinates: list[str], exclusions: dict[str, list[str]] | None = None) -> list[str]:
    """The jars of ``coordinates`` and their runtime dependencies, resolved by Maven into ~/.m2 (what is there
    already is not downloaded again); ``exclusions`` maps a coordinate to the "group:artifact"s (``*`` for any)
    left out of its dependencies. Never offline (-o): offline, a parent pom not yet fetched makes Maven drop
    an artifact's dependencies with a warning, and the connector came without kafka-clients."""
    with tempfile.TemporaryDirectory() as scratch:
        listing = Path(scratch) / "classpath.txt"
        _maven(coordinates, exclusions or {}, Path(scratch),
               ["org.apache.maven.plugins:maven-dependency-plugin:3.8.1:build-classpath",
                f"-Dmdep.outputFile={listing}", "-Dmdep.includeScope=runtime"])
        return listing.read_text().strip().split(os.pathsep)


def dependency_tree(coordinate: str) -> str:
    """Maven's tree of ``coordinate``'s dependencies, as text (their poms only: no jar is downloaded)."""
    with tempfile.TemporaryDirectory() as scratch:
        tree = Path(scratch) / "tree.txt"
        _maven([coordinate], {}, Path(scratch),
               ["org.apache.maven.plugins:maven-dependency-plugin:3.8.1:tree", f"-DoutputFile={tree}"])
        return tree.read_text()


def _maven(coordinates: list[str], exclusions: dict[str, list[str]], scratch: Path, goal: list[str]) -> None:
    def dependency(coordinate: str) -> str:
        group, artifact, version = coordinate.split(":")
        excluded = "".join("<exclusion><groupId>{}</groupId><artifactId>{}</artifactId></exclusion>".format(
            *each.split(":")) for each in exclusions.get(coordinate, []))
        return (f"<dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId><version>{version}"
                f"</version><exclusions>{excluded}</exclusions></dependency>")

    pom = scratch / "pom.xml"
    pom.write_text('<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
                   "<groupId>sparkpoint.tests</groupId><artifactId>jars</artifactId><version>1</version>"
                   f"<packaging>pom</packaging><dependencies>{''.join(map(dependency, coordinates))}</dependencies>"
                   "</project>")
    done = subprocess.run(["mvn", "-q", "-B", "-f", str(pom), *goal], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"Maven could not resolve {coordinates}: {done.stdout[-2000:]}{done.stderr[-2000:]}")


def connector_jars(minor: str) -> list[str]:
    """The jars a Spark ``minor`` job needs to read and write Kafka (spark-submit --jars)."""
    return [jar for jar in classpath([connector(minor)]) if Path(jar).name.startswith(CONNECTOR_JARS)]


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for each in sockets:
        each.bind(("127.0.0.1", 0))
    ports = [each.getsockname()[1] for each in sockets]
    for each in sockets:
        each.close()
    return ports


def await_service(service, timeout: float, failure: str) -> None:
    """Until ``service._ready()``; its process exiting first, or the timeout, raises ``failure``. A service half
    started (an interrupt too) is stopped, never left behind."""
    deadline = time.monotonic() + timeout
    try:
        while not service._ready():
            if service.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(failure)
            time.sleep(0.2)
    except BaseException:
        service.stop()
        raise


class Broker:
    """A single-node KRaft broker in ``directory`` (its data, configuration and log), on free ports of
    127.0.0.1. ``settings`` are added to its server.properties (retention for a test, say)."""

    def __init__(self, directory: Path, settings: dict[str, str] | None = None):
        self.directory = Path(directory)
        self.settings = settings or {}
        self.port, self.controller_port = free_ports(2)
        self.process: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = START_SECONDS) -> Broker:
        self.directory.mkdir(parents=True, exist_ok=True)
        java_classpath = os.pathsep.join(classpath(BROKER))
        properties, logging = self.directory / "server.properties", self.directory / "log4j2.properties"
        data = self.directory / "data"
        shutil.rmtree(data, ignore_errors=True)
        settings = {
            "process.roles": "broker,controller", "node.id": "1",
            "controller.quorum.bootstrap.servers": f"127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER", "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(data), "num.partitions": "1", "group.initial.rebalance.delay.ms": "0",
            "offsets.topic.replication.factor": "1", "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1", "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            # Retention is checked every second, so a test that shortens a topic's sees it applied at once.
            "log.retention.check.interval.ms": "1000", "log.segment.delete.delay.ms": "0",
            # Fewer threads, and KRaft's no-op metadata record every 5 s rather than 0.5 s: idle, the broker with
            # the defaults kept 12% of a core busy (7 s of CPU a minute), with these 5%, beside the tests on 2 cores.
            "background.threads": "1", "num.network.threads": "1", "num.io.threads": "2",
            "metadata.max.idle.interval.ms": "5000",
            **self.settings,
        }
        properties.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
        logging.write_text("rootLogger.level = WARN\nrootLogger.appenderRef.err.ref = ERR\n"
                           "appender.err.type = Console\nappender.err.name = ERR\n"
                           "appender.err.target = SYSTEM_ERR\nappender.err.layout.type = PatternLayout\n"
                           "appender.err.layout.pattern = [%d] %p %m (%c)%n\n")
        java = [shutil.which("java") or "java", "-cp", java_classpath, f"-Dlog4j2.configurationFile={logging}"]
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        subprocess.run([*java, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(properties),
                        "--standalone"], check=True, capture_output=True, timeout=120)
        log = open(self.directory / "broker.log", "ab")  # noqa: SIM115 - the broker's, for its whole life
        # Its own process group: stop() ends the JVM and nothing else; small heap, serial GC: it shares 2 cores.
        self.process = subprocess.Popen([*java[:1], "-Xms128m", "-Xmx512m", "-XX:+UseSerialGC", *java[1:],
                                         "kafka.Kafka", str(properties)], stdout=log, stderr=log,
                                        start_new_session=True)
        log.close()
        await_service(self, timeout, f"the Kafka broker did not start; see {self.directory / 'broker.log'}")
        return self

    def _ready(self) -> bool:
        """The broker answers a client: its metadata lists itself."""
        try:
            from kafka import KafkaAdminClient
        except ImportError:  # no client here: an open port will do
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return True
            except OSError:
                return False
        try:
            admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=2000,
                                     bootstrap_timeout_ms=2000)
        except Exception:  # noqa: BLE001 - not up yet, whatever the client says
            return False
        try:
            return bool(admin.describe_cluster().get("brokers"))
        except Exception:  # noqa: BLE001
            return False
        finally:
            admin.close()

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=20)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("fetch", help="every jar into ~/.m2")
    jars = commands.add_parser("jars", help="the --jars value for a Spark minor")
    jars.add_argument("minor", choices=sorted(CONNECTORS))
    broker = commands.add_parser("broker", help="run a broker until interrupted")
    broker.add_argument("--dir", required=True, type=Path)
    args = parser.parse_args()
    if args.command == "fetch":
        classpath(BROKER)
        for minor in CONNECTORS:
            connector_jars(minor)
        print(f"Kafka {KAFKA} and Spark's connector for {', '.join(CONNECTORS)} are in ~/.m2", file=sys.stderr)
    elif args.command == "jars":
        print(",".join(connector_jars(args.minor)))
    else:
        # SIGTERM ends it as Ctrl-C does: the broker, in a process group of its own, is stopped, never left behind.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        running = Broker(args.dir).start()
        run_until_interrupted(running, lambda: (
            print(running.bootstrap, flush=True),
            print(f"Kafka {KAFKA} on {running.bootstrap} (data in {args.dir}); Ctrl-C stops it", file=sys.stderr)))
    return 0


def run_until_interrupted(service, announce) -> None:
    """``announce()`` where it runs, then wait until the service's process ends, or Ctrl-C (or SIGTERM, made an
    exit by the caller); then it is stopped, whenever the interrupt came (during the announcement too)."""
    try:
        announce()
        service.process.wait()
    except KeyboardInterrupt:
        pass
    finally:
        service.stop()


if __name__ == "__main__":
    sys.exit(main())
