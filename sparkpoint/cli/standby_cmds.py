"""standby start|list|stop: warm drivers waiting for a job's next version (jobs.standby)."""

from __future__ import annotations

import time

import click

from sparkpoint.cli.context import PATH_PART, Seconds, echo, emit, literal, output_option, pass_app


@click.group("standby")
def standby_group():
    """Warm drivers for a job's next version: the two-step upgrade without a cold start.

    A standby is a client-mode driver launched with a job's spark-submit options (its master, --conf,
    spark-submit options and Spark), warmed up with a few batches of a stateful query, and waiting. A later
    `run --detach` of JOB's name whose driver would be launched exactly so (the same options, Spark,
    `checkpoints` setting, working directory, environment, and files the JVM reads as it starts) is handed to it
    instead of starting a JVM and Spark: its application builds its own Spark session there from those options.
    `run` says in the job's history which standby it adopted, or why it passed one over; --no-standby launches a
    cold driver all the same.
    """


@standby_group.command("start")
@click.argument("job", type=PATH_PART)
@click.option("--idle-timeout", type=Seconds(min=1), default=3600.0, show_default=True,
              help="Seconds to wait for a run to adopt it; then it ends and removes its directory.")
@click.option("--timeout", type=Seconds(min=1), default=300.0, show_default=True,
              help="Seconds to wait for its warm-up (it is stopped if it does not finish in time).")
@output_option
@pass_app
def start_cmd(app, job, idle_timeout, timeout, output):
    """Launch a standby driver with the options of JOB (a running or ended job), once warmed up."""
    from sparkpoint.jobs.registry import Registry
    from sparkpoint.jobs.standby import start_standby

    standby = start_standby(Registry(app.settings.home_url()), job, app.settings.checkpoints,
                            app.settings.class_archives_dir(), idle_timeout, timeout, time.sleep, time.monotonic)
    emit(output, standby.describe(), _render_one)


@standby_group.command("list")
@output_option
@pass_app
def list_cmd(app, output):
    """The standbys not adopted: warming, ready, ending (stopped, or retiring), or ended."""
    from sparkpoint.jobs.registry import Registry
    from sparkpoint.jobs.standby import standbys

    emit(output, [s.describe() for s in standbys(Registry(app.settings.home_url()))], _render_all)


@standby_group.command("stop")
@click.argument("standby", type=PATH_PART)
@output_option
@pass_app
def stop_cmd(app, standby, output):
    """End a standby that no run has adopted, and remove its directory."""
    from sparkpoint.jobs.registry import Registry
    from sparkpoint.jobs.standby import stop_standby

    stopped = stop_standby(Registry(app.settings.home_url()), standby)
    emit(output, {"id": stopped.id, "state": "stopped"}, lambda data: echo(f"Standby {literal(data['id'])} stopped"))


def _render_one(data: dict) -> None:
    echo(f"Standby {literal(data['id'])} ({data['state']}), like {literal(data['like'])}: warmed up in "
         f"{data['warm_up_seconds']} s; ends after {data['idle_seconds']:g} s unadopted; log {literal(data['log'])}")


def _render_all(rows: list[dict]) -> None:
    if not rows:
        echo("No standby drivers.")
    for data in rows:
        echo(f"{literal(data['id'])}  {data['state']:<8}  like {literal(data['like'])}  since {data['started_at']}")


COMMANDS = (standby_group,)
