"""The ``sparkpoint`` command: the only place that turns errors into exit statuses.

Exit statuses: 0 success; 1 an unexpected internal error; 2 bad usage (flags, arguments);
3..10 the classes in ``sparkpoint.errors`` (see README.md, "Exit codes"); 130 interrupted.
"""

from __future__ import annotations

import sys

import click

from sparkpoint.cli import catalog_cmds, cluster_cmds, job_cmds, savepoint_cmds
from sparkpoint.cli.context import AppContext
from sparkpoint.errors import SparkpointError


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--home", metavar="URL", help="Home of registry, checkpoints and savepoints [env SPARKPOINT_HOME].")
@click.option("--config", "config_path", metavar="FILE", help="Configuration file [env SPARKPOINT_CONFIG].")
@click.option("-q", "--quiet", is_flag=True, help="No progress display on stderr.")
@click.version_option(package_name="sparkpoint")
@click.pass_context
def cli(ctx: click.Context, home: str | None, config_path: str | None, quiet: bool) -> None:
    """Flink-style savepoints for Spark Structured Streaming.

    Run streaming applications as managed jobs; savepoint them while they run; stop them at a
    micro-batch boundary with a savepoint; start upgraded versions from any savepoint. Savepoints of
    plain checkpoints, restore for any launcher, and a catalog with retention.
    """
    ctx.obj = AppContext(config_path=config_path, overrides={"home": home}, quiet=quiet)


for command in (*job_cmds.COMMANDS, *savepoint_cmds.COMMANDS, *catalog_cmds.COMMANDS, *cluster_cmds.COMMANDS):
    cli.add_command(command)


def main(argv: list[str] | None = None) -> int:
    try:
        cli.main(args=argv, prog_name="sparkpoint", standalone_mode=False)
    except SparkpointError as exc:
        click.echo(f"sparkpoint: error: {exc}", err=True)
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("sparkpoint: interrupted", err=True)
        return 130
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except KeyboardInterrupt:
        click.echo("sparkpoint: interrupted", err=True)
        return 130
    return 0


def run() -> None:
    sys.exit(main())
