"""The ``sparkpoint`` command: the only place that turns errors into exit statuses.

Exit statuses: 0 success; 1 an unexpected internal error; 2 bad usage (flags, arguments);
3..21 the classes in ``sparkpoint.errors`` (see docs/reference/exit-codes.md); 130 interrupted (Ctrl-C);
143 terminated (SIGTERM: cleaned up as for Ctrl-C). Each
error is one line on stderr; an unexpected exception says it is a bug, and shows its traceback only
when ``SPARKPOINT_DEBUG`` is set.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import traceback

import click

from sparkpoint.cli import (catalog_cmds, class_archive_cmds, cluster_cmds, job_cmds, metrics_cmds, savepoint_cmds,
                            standby_cmds, ui_cmds)
from sparkpoint.cli.context import OUTPUT_HELP, OUTPUTS, AppContext, echo
from sparkpoint.errors import SparkpointError
from sparkpoint.spark.state_rows import session_exists


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--home", metavar="PATH", help="Home of the job registry and the jobs' checkpoints, and by default of "
              "the savepoint catalog [env SPARKPOINT_HOME].")
@click.option("--config", "config_path", metavar="FILE", help="Configuration file [env SPARKPOINT_CONFIG].")
@click.option("-q", "--quiet", is_flag=True, help="No progress display on stderr.")
@click.option("-o", "--output", type=OUTPUTS, help=OUTPUT_HELP + " The command's own -o means the same.")
@click.version_option(package_name="sparkpoint")
@click.pass_context
def cli(ctx: click.Context, home: str | None, config_path: str | None, quiet: bool, output: str | None) -> None:
    """Flink-style savepoints for Spark Structured Streaming.

    Run streaming applications as managed jobs; savepoint them while they run; stop them at a
    micro-batch boundary with a savepoint; start upgraded versions from any savepoint. Savepoints of
    plain checkpoints, restore for any launcher, and a catalog with retention.
    """
    ctx.obj = AppContext(config_path=config_path, overrides={"home": home}, quiet=quiet, output=output)


DEBUG_ENV = "SPARKPOINT_DEBUG"

for command in (*job_cmds.COMMANDS, *savepoint_cmds.COMMANDS, *catalog_cmds.COMMANDS, *metrics_cmds.COMMANDS,
                *cluster_cmds.COMMANDS, *ui_cmds.COMMANDS, *standby_cmds.COMMANDS,
                *class_archive_cmds.COMMANDS):
    cli.add_command(command)


def main(argv: list[str] | None = None) -> int:
    try:
        cli.main(args=argv, prog_name="sparkpoint", standalone_mode=False)
    except SparkpointError as exc:
        line, code = f"sparkpoint: error: {exc}", exc.exit_code
    except (click.exceptions.Abort, KeyboardInterrupt) as exc:
        # Click turns an interrupt inside a command into Abort, the interrupt its cause.
        if isinstance(exc, Terminated) or isinstance(exc.__cause__, Terminated):
            line, code = "sparkpoint: terminated", 128 + signal.SIGTERM
        else:
            line, code = "sparkpoint: interrupted", 130
    except click.exceptions.NoArgsIsHelpError as exc:
        exc.show()  # a bare 'sparkpoint' or 'sparkpoint cluster' asks for the help
        return exc.exit_code
    except click.ClickException as exc:
        line, code = f"sparkpoint: error: {exc.format_message()}{_help_hint(exc)}", exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except Exception as exc:
        if os.environ.get(DEBUG_ENV):
            for text in "".join(traceback.format_exception(exc)).splitlines():
                echo(text, err=True)
        line = (f"sparkpoint: internal error, a bug: please report it to sparkpoint's maintainers with the traceback "
                f"{DEBUG_ENV}=1 shows ({type(exc).__name__}: {exc})")
        code = 1
    else:
        return 0
    echo(line, err=True)
    return code


def _help_hint(exc: click.ClickException) -> str:
    context = getattr(exc, "ctx", None)
    return f" (see '{context.command_path} --help')" if context is not None else ""


class Terminated(KeyboardInterrupt):
    """SIGTERM (a CI runner's timeout, systemd, kill): taken as Ctrl-C is, so what is under way is cleaned up
    (a check's sandbox and its driver, a foreground job's driver) and recorded (an interrupted probation)."""


def _terminate(signum, frame) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the clean-up too
    raise Terminated()


def run() -> None:
    signal.signal(signal.SIGTERM, _terminate)
    code = main()
    if session_exists():
        # A command that ran a local Spark holds thousands of py4j proxies, each of which, collected as the
        # interpreter ends, tells the JVM to drop its object: 0.2 s of a rescale, for a JVM that ends with us.
        gc.freeze()
    sys.exit(code)
