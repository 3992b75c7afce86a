"""class-archive build|list|remove: the class data sharing archives drivers start from (jobs.class_archives)."""

from __future__ import annotations

import click

from sparkpoint.cli.context import PATH_PART, Seconds, echo, emit, literal, output_option, pass_app
from sparkpoint.results import human_bytes


@click.group("class-archive")
def class_archive_group():
    """Archives of the classes a Spark driver loads: a faster start for every driver.

    A cold driver spends seconds loading and verifying Spark's classes before the application's first line and
    in its first batch. `build` runs a training driver of a Spark installation (local mode, a few stateful
    batches) whose JVM writes those classes to an archive as it exits (Java's class data sharing, Java 13 and
    later), kept in the `class_archives` directory. From then on, every driver launched with that Spark and java
    maps the archive: `run`, a standby, `check`, and the local Spark of `rescale` and `inspect --state`. The JVM
    uses an archive only for the Java build and class path it was written for; otherwise the driver starts as it
    would without one.
    """


@class_archive_group.command("build")
@click.option("--spark-home", metavar="DIR",
              help="The Spark whose drivers will map it [default: $SPARK_HOME, else this environment's pyspark].")
@click.option("--timeout", type=Seconds(min=1), default=600.0, show_default=True,
              help="Seconds to wait for the training driver (it is stopped, and nothing written, after that).")
@output_option
@pass_app
def build_cmd(app, spark_home, timeout, output):
    """Build (or build again) the archive of a Spark installation and this environment's java."""
    from sparkpoint.jobs.class_archives import build_archive

    archive = build_archive(app.settings, spark_home, timeout, app.progress())
    emit(output, archive.describe(), _render_one)


@class_archive_group.command("list")
@output_option
@pass_app
def list_cmd(app, output):
    """The archives in the `class_archives` directory (by default <home>/jvm)."""
    from sparkpoint.adapters.class_archives import archives

    emit(output, [a.describe() for a in archives(app.settings.class_archives_dir())], _render_all)


@class_archive_group.command("remove")
@click.argument("archive", type=PATH_PART)
@output_option
@pass_app
def remove_cmd(app, archive, output):
    """Remove an archive (by id, or a unique prefix): drivers launched after start without it."""
    from sparkpoint.jobs.class_archives import remove

    removed = remove(app.settings, archive)
    emit(output, {"id": removed.id, "state": "removed"},
         lambda data: echo(f"Class archive {literal(data['id'])} removed"))


def _render_one(data: dict) -> None:
    echo(f"Class archive {literal(data['id'])}: Spark {data['spark_version']} at {literal(data['spark_home'])}, "
         f"{literal(data['java_version'])}; {human_bytes(data['bytes'])}, built in {data['seconds']} s: "
         f"{literal(data['path'])}")


def _render_all(rows: list[dict]) -> None:
    if not rows:
        echo("No class archives: drivers start cold (sparkpoint class-archive build).")
    for data in rows:
        echo(f"{literal(data['id'])}  Spark {data['spark_version']}  {human_bytes(data['bytes'])}  "
             f"built {data['built_at'] or '-'}  {literal(data['spark_home'] or '-')}")


COMMANDS = (class_archive_group,)
