"""cluster start|stop|status: a local standalone master and worker for trying sparkpoint on a real cluster."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from sparkpoint.cli.context import echo, emit, output_option

if TYPE_CHECKING:  # the adapter is imported inside each command, so that --help stays fast
    from sparkpoint.adapters.local_cluster import ClusterStatus, ClusterStopped

DEFAULT_DIR = ".sparkpoint-cluster"


def _directory_option(command):
    return click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path), default=DEFAULT_DIR,
                        show_default=True, envvar="SPARKPOINT_CLUSTER_DIR",
                        help="Holds conf/ (secrets, 0600), logs/, pids/ and the worker's work/ "
                             "[env SPARKPOINT_CLUSTER_DIR].")(command)


PORTS = (("--rest-port", 6066, "the master's REST submission server (--deploy-mode cluster)"),
         ("--worker-ui-port", 8081, "the worker's web UI"),
         ("--master-ui-port", 8080, "the master's web UI and its JSON status page"),
         ("--master-port", 7077, "the master's RPC (spark://127.0.0.1:PORT)"))


def _ports_options(command):
    for name, default, what in PORTS:
        command = click.option(name, type=click.IntRange(1, 65535), default=default, show_default=True,
                               help=f"Port of {what}, on 127.0.0.1.")(command)
    return command


def _recorded_ports_options(command):
    for name, _, what in PORTS:
        command = click.option(name, type=click.IntRange(1, 65535),
                               help=f"Port of {what} [default: as `cluster start` recorded it in DIR].")(command)
    return command


@click.group("cluster")
def cluster_group():
    """A Spark standalone master and worker on 127.0.0.1, from your Spark (--spark-home, $SPARK_HOME, pyspark).

    The master's RPC, REST submission server (for --deploy-mode cluster) and web UIs require the
    secrets written to DIR/conf/spark-defaults.conf; point SPARK_CONF_DIR at DIR/conf to use it.
    """


def _ports(master_port, master_ui_port, worker_ui_port, rest_port):
    from sparkpoint.adapters.local_cluster import Ports

    return Ports(master=master_port, master_ui=master_ui_port, rest=rest_port, worker_ui=worker_ui_port)


@cluster_group.command("start")
@_directory_option
@_ports_options
@click.option("--cores", type=click.IntRange(min=1), default=2, show_default=True, help="The worker's cores.")
@click.option("--memory", default="4g", show_default=True, help="The worker's memory.")
@click.option("--spark-home", metavar="DIR",
              help="The Spark the master and worker run [default: $SPARK_HOME, else this environment's pyspark].")
@output_option
def start_cmd(directory, master_port, master_ui_port, worker_ui_port, rest_port, cores, memory, spark_home, output):
    """Start the master and one worker; return once the worker has registered.

    Secured as far as their Spark allows: from 4.0, tokens for the REST server and web UIs; a 3.5, 4.0.0 or
    4.1.0 master runs no REST server (it refuses one beside the RPC secret), so it takes client mode only.
    """
    from sparkpoint.adapters import local_cluster

    info = local_cluster.start(directory, _ports(master_port, master_ui_port, worker_ui_port, rest_port), cores, memory,
                               spark_home=spark_home)
    emit(output, info, _render_status)


@cluster_group.command("status")
@_directory_option
@_recorded_ports_options
@output_option
def status_cmd(directory, master_port, master_ui_port, worker_ui_port, rest_port, output):
    """Processes, registered workers, running applications and drivers of the cluster started from DIR."""
    from dataclasses import replace

    from sparkpoint.adapters import local_cluster

    given = {"master": master_port, "master_ui": master_ui_port, "worker_ui": worker_ui_port, "rest": rest_port}
    ports = replace(local_cluster.recorded_ports(directory), **{k: v for k, v in given.items() if v is not None})
    emit(output, local_cluster.status(directory, ports), _render_status)


@cluster_group.command("stop")
@_directory_option
@output_option
def stop_cmd(directory, output):
    """Stop the worker (with its drivers and executors) and the master."""
    from sparkpoint.adapters import local_cluster

    result = local_cluster.stop(directory)
    emit(output, result, _render_stopped)


def _render_stopped(result: ClusterStopped) -> None:
    echo(f"stopped: {', '.join(result.stopped) or 'nothing was running'}")


def _render_status(info: ClusterStatus) -> None:
    echo(f"cluster {info.master_url}: {'up' if info.up else 'down'} (master pid {info.master_pid or '-'}, "
         f"worker pid {info.worker_pid or '-'}, {info.workers_alive} worker(s) registered)")
    echo(f"  REST {info.rest_url or 'off (client mode only)'}; export SPARK_CONF_DIR={info.conf_dir}")
    echo(f"  applications: {', '.join(map(str, info.active_apps)) or '-'}; "
         f"drivers: {', '.join(map(str, info.active_drivers)) or '-'}")


COMMANDS = (cluster_group,)
