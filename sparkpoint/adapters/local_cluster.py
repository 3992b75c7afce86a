"""A Spark standalone master and worker on this machine, from the user's Spark (--spark-home, $SPARK_HOME, or
the installed pyspark): for trying sparkpoint against a real cluster, and for its tests.

Everything lives under one directory: ``conf/spark-defaults.conf`` (mode 0600: the RPC secret and the
JWS key that the master's REST server and web UIs require), ``ports.json`` (the ports the last start chose:
status and clients of this directory must find that cluster, not whichever answers on Spark's default ports),
``logs/``, ``pids/`` (each process's pid and start time, so that a pid reused since is not taken for it) and
the worker's ``work/`` (drivers and executors write their output there). Clients point SPARK_CONF_DIR at
``conf``.
Every port listens on 127.0.0.1 only.

The security each Spark offers (spark_versions): from 4.0 the JWSFilter guards the REST server and the web
UIs. A master that refuses the RPC secret beside its REST server (3.5, 4.0.0, 4.1.0) gets no REST server:
its RPC keeps the secret, so only client mode runs on it; 3.5's web UIs have no token check, and stay on
127.0.0.1.
"""

from __future__ import annotations

import base64
import contextlib
import os
import secrets
import subprocess
import sys
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from sparkpoint.adapters.spark_install import Spark, find_spark
from sparkpoint.adapters.cluster_managers.standalone import JWS_KEY, StandaloneMaster, read_properties
from sparkpoint.results import Result
from sparkpoint.times import poll_until
from sparkpoint.errors import EnvironmentSetupError, CorruptRecordError, SparkpointError, TargetNotEmptyError
from sparkpoint.adapters.processes import pid_alive, process_start, terminate_group
from sparkpoint.adapters.local_files import MalformedRecord, read_json_record, read_record, write_json, write_private
from sparkpoint.spark_versions import master_takes_secret_with_rest, spark_minor

HOST = "127.0.0.1"
PID_FILE_BYTES = 4096  # a pid and a start time
JWS_FILTER = "org.apache.spark.ui.JWSFilter"
PORTS_FILE = "ports.json"
SECRET_KEY = "spark.authenticate.secret"


@dataclass(frozen=True)
class Ports:
    master: int = 7077
    master_ui: int = 8080
    rest: int = 6066
    worker_ui: int = 8081


@dataclass(frozen=True)
class ClusterStatus(Result):
    directory: str
    master_url: str
    rest_url: str | None  # None: no REST server (its Spark cannot run one beside the RPC secret)
    conf_dir: str
    master_pid: int | None  # None: not running (no pid file, or its process is gone)
    worker_pid: int | None
    workers_alive: int  # as the master counts them
    active_apps: list[str]
    active_drivers: list[str]

    @property
    def up(self) -> bool:
        return bool(self.master_pid and self.worker_pid)


@dataclass(frozen=True)
class ClusterStopped(Result):
    directory: str
    stopped: list[str]  # worker, master: the processes that were running and were ended


def conf_dir(directory: Path) -> Path:
    return directory / "conf"


def _conf_file(directory: Path) -> Path:
    return conf_dir(directory) / "spark-defaults.conf"


def _pid_file(directory: Path, role: str) -> Path:
    return directory / "pids" / f"{role}.pid"


def _read_pid(directory: Path, role: str) -> tuple[int | None, str | None]:
    """The pid of a role's process, and its start time if that is still the process (else None)."""
    try:
        text, _, start = read_record(_pid_file(directory, role), PID_FILE_BYTES).partition(" ")
        pid = int(text)
    except (FileNotFoundError, ValueError):  # none; or not a pid file (MalformedRecord too): no process known
        return None, None
    # A pid file of an earlier sparkpoint holds the pid alone: the process then shows by its command line.
    start = start.strip() or process_start(pid, mark=str(_conf_file(directory)))
    return pid, start if start and pid_alive(pid, start) else None


def _write_conf(directory: Path, ports: Ports, spark: Spark) -> None:
    """The cluster's settings, secrets included, as much security as its Spark offers: owner-only, atomically.
    A restart keeps the secrets the clients of this directory already hold, and takes its own ports and Spark."""
    path = _conf_file(directory)
    earlier = read_properties(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rest = master_takes_secret_with_rest(spark.version)
    lines = {
        "spark.authenticate": "true",
        SECRET_KEY: earlier.get(SECRET_KEY) or secrets.token_hex(32),
        "spark.master.rest.enabled": str(rest).lower(),
        **({"spark.master.rest.host": HOST, "spark.master.rest.port": str(ports.rest),
            "spark.master.rest.filters": JWS_FILTER} if rest else {}),
        "spark.master.ui.port": str(ports.master_ui),
        **({"spark.ui.filters": JWS_FILTER,
            # Spark's JWSFilter reads the key as base64url; 48 bytes encode without padding.
            JWS_KEY: earlier.get(JWS_KEY) or base64.urlsafe_b64encode(secrets.token_bytes(48)).decode(),
            "spark.org.apache.spark.ui.JWSFilter.param.requireExpiration": "true"}
           if spark_minor(spark.version).jws_filter else {}),
        "spark.pyspark.python": sys.executable,
    }
    write_private(path, "# Written by sparkpoint cluster start. Secrets: keep this file private.\n"
                  + "".join(f"{key} {value}\n" for key, value in lines.items()))
    write_json(directory / PORTS_FILE, asdict(ports))


def recorded_ports(directory: Path) -> Ports:
    """The ports the cluster of ``directory`` was last started with; Spark's defaults for a directory that records
    none (a cluster of an earlier sparkpoint, or none started yet). A record of another shape is refused."""
    try:
        recorded = read_json_record(directory / PORTS_FILE)
    except FileNotFoundError:
        return Ports()
    except MalformedRecord as error:
        raise CorruptRecordError(f"{directory / PORTS_FILE} is not a record of ports: it {error}") from None
    names = {field.name for field in fields(Ports)}
    if not (isinstance(recorded, dict) and set(recorded) == names
            and all(type(port) is int and 1 <= port <= 65535 for port in recorded.values())):
        raise CorruptRecordError(f"{directory / PORTS_FILE} is not a record of ports: {recorded!r:.200}")
    return Ports(**recorded)


def _spawn(directory: Path, spark: Spark, role: str, main_class: str, args: list[str]) -> int:
    spark_class = spark.spark_class
    env = dict(os.environ, SPARK_HOME=spark.home, SPARK_LOCAL_IP=HOST, SPARK_MASTER_HOST=HOST,
               SPARK_CONF_DIR=str(conf_dir(directory)),
               PYSPARK_PYTHON=sys.executable)
    (directory / "logs").mkdir(exist_ok=True)
    with open(directory / "logs" / f"{role}.log", "ab") as log:
        process = subprocess.Popen([spark_class, main_class, *args, "--properties-file", str(_conf_file(directory))],
                                   env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    _pid_file(directory, role).parent.mkdir(exist_ok=True)
    write_private(_pid_file(directory, role), f"{process.pid} {process_start(process.pid)}")
    return process.pid


def master_url(ports: Ports = Ports()) -> str:
    return f"spark://{HOST}:{ports.master}"


def start(directory: Path, ports: Ports = Ports(), cores: int = 2, memory: str = "4g", timeout: float = 90.0,
          spark_home: str | None = None) -> ClusterStatus:
    directory = directory.resolve()
    spark = find_spark(spark_home)
    directory.mkdir(parents=True, exist_ok=True)
    if any(_read_pid(directory, role)[1] for role in ("master", "worker")):
        raise TargetNotEmptyError(f"a cluster already runs from {directory}: 'sparkpoint cluster stop' first")
    _write_conf(directory, ports, spark)
    _spawn(directory, spark, "master", "org.apache.spark.deploy.master.Master",
           ["--host", HOST, "--port", str(ports.master), "--webui-port", str(ports.master_ui)])
    _spawn(directory, spark, "worker", "org.apache.spark.deploy.worker.Worker",
           ["--host", HOST, "--webui-port", str(ports.worker_ui), "--cores", str(cores), "--memory", memory,
            "--work-dir", str(directory / "work"), master_url(ports)])
    def settled() -> ClusterStatus | None:
        info = status(directory, ports)
        # Up, or never: a master or worker process that has ended will not come up.
        return info if info.workers_alive or not info.up else None

    info = poll_until(settled, timeout, 0.5)
    if info and info.workers_alive:
        return info
    stop(directory)
    raise EnvironmentSetupError(f"the cluster did not come up within {timeout:g} s; see {directory / 'logs'}")


def status(directory: Path, ports: Ports | None = None) -> ClusterStatus:
    """The cluster of ``directory``, on the ports its start recorded unless ``ports`` are given."""
    directory = directory.resolve()
    ports = ports or recorded_ports(directory)
    pids = {role: _read_pid(directory, role) for role in ("master", "worker")}
    alive = {role: pid if start else None for role, (pid, start) in pids.items()}
    overview: dict[str, Any] = {}
    properties = read_properties(_conf_file(directory))
    if alive["master"] and properties:
        with contextlib.suppress(SparkpointError):
            overview = StandaloneMaster(master_url(ports), properties, timeout=2.0).overview()
    return ClusterStatus(
        directory=str(directory),
        master_url=master_url(ports),
        rest_url=f"http://{HOST}:{ports.rest}" if properties.get("spark.master.rest.enabled") != "false" else None,
        conf_dir=str(conf_dir(directory)),
        master_pid=alive["master"],
        worker_pid=alive["worker"],
        workers_alive=sum(1 for w in overview.get("workers", []) if w.get("state") == "ALIVE"),
        active_apps=[a.get("id") for a in overview.get("activeapps", [])],
        active_drivers=[d.get("id") for d in overview.get("activedrivers", [])],
    )


def stop(directory: Path, grace: float = 10.0) -> ClusterStopped:
    """End the worker (and the drivers and executors it runs), then the master."""
    directory = directory.resolve()
    stopped = []
    for role in ("worker", "master"):
        pid, start = _read_pid(directory, role)
        if start:
            terminate_group(pid, start, grace)
            stopped.append(role)
        _pid_file(directory, role).unlink(missing_ok=True)
    return ClusterStopped(directory=str(directory), stopped=stopped)
