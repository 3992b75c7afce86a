"""metrics, and the --metrics-file option of savepoint, stop and cancel: thin commands over sparkpoint.jobs.metrics."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import click

from sparkpoint.cli.context import AppContext, echo, emit, output_option, pass_app
from sparkpoint.cli.serving import address as serving_address
from sparkpoint.cli.serving import beyond_loopback, token_from
from sparkpoint.config import local_home
from sparkpoint.errors import BadArgumentError

TOKEN_FILE = "metrics.token"
DEFAULT_PORT = 9464  # the port OpenTelemetry's Prometheus exporter registered; any free one does


def _write_metrics(app: AppContext, path: str) -> None:
    from sparkpoint.adapters.storage import translate_errors
    from sparkpoint.jobs import metrics

    data, scrape = metrics.exposition(app.settings)
    _warn(scrape.problems)
    with translate_errors(path):
        metrics.write_textfile(path, data)


def _write_metrics_or_warn(app: AppContext, path: str) -> None:
    """After the command: a metrics file that cannot be written is a warning, never the command's exit status (a
    cron line that retried a savepoint that worked would take it twice; an alert on the savepoint's age still
    fires, as the file goes stale)."""
    try:
        _write_metrics(app, path)
    except Exception as exc:  # noqa: BLE001 - whatever the scrape or the disk raised: the command's outcome stands
        echo(f"sparkpoint: warning: the metrics file {path} was not written: {exc}", err=True)


def _warn(problems: list[str]) -> None:
    for problem in problems:
        echo(f"sparkpoint: warning: metrics: {problem}", err=True)


def metrics_file_option(command: Callable) -> Callable:
    """--metrics-file PATH: once the command has ended, successfully or not (a failed savepoint is what the
    metrics are for; an interrupt writes nothing), the home's metrics are written to PATH for node_exporter's
    textfile collector."""

    @functools.wraps(command)
    def with_metrics_file(*args, metrics_file: str | None = None, **kwargs):
        if metrics_file is None:
            return command(*args, **kwargs)
        if kwargs.get("detached") or kwargs.get("poll"):
            raise BadArgumentError("--metrics-file writes the metrics once the savepoint has ended: not with "
                                   "--detached or --status (run `sparkpoint metrics --metrics-file` after it)")
        from sparkpoint.jobs.metrics import textfile_target

        textfile_target(metrics_file)  # a file that could never be written is refused before the command acts
        app = click.get_current_context().find_object(AppContext)
        try:
            outcome = command(*args, **kwargs)
        except Exception:  # an interrupt is not one: its user wants out, not a scrape of every job first
            _write_metrics_or_warn(app, metrics_file)
            raise
        _write_metrics_or_warn(app, metrics_file)
        return outcome

    return _metrics_file(with_metrics_file)


def _not_empty(_ctx, param, value: str | None) -> str | None:
    """An empty path (an unset variable in a cron line) is a usage error, not the option left out: the file
    would silently stop being written, or the token silently become the home's."""
    if value == "":
        raise click.BadParameter("is empty: name a file (an unset variable in a cron line?)", param=param)
    return value


_metrics_file = click.option("--metrics-file", metavar="PATH", callback=_not_empty,
                             help="Write the home's metrics to PATH (Prometheus text, replaced atomically, for "
                                  "node_exporter's textfile collector); after the command, even a failed one.")


def _token(app: AppContext, token_file: str | None) -> tuple[str, Path]:
    """The bearer token scrapes must send: ``token_file``'s, or the home's metrics.token, made on first use."""
    path = Path(token_file) if token_file else Path(local_home(app.settings.home)) / TOKEN_FILE
    return token_from(path, make=token_file is None), path


def _serve(app: AppContext, address: str, token_file: str | None) -> None:
    from prometheus_client.exposition import choose_encoder

    from sparkpoint.adapters.scrape_server import ScrapeServer
    from sparkpoint.jobs import metrics

    host, port = serving_address(address)
    token, path = _token(app, token_file)
    registry, _collector = metrics.registry_of(app.settings, scraped=lambda scrape: _warn(scrape.problems))

    def render(accept: str) -> tuple[bytes, str]:
        encoder, content_type = choose_encoder(accept)
        return encoder(registry), content_type

    try:
        server = ScrapeServer((host, port), token, render)
    except OSError as exc:
        raise BadArgumentError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    if beyond_loopback(host, port):
        echo(f"sparkpoint: warning: --serve {address} listens beyond this machine, in plain HTTP: the bearer "
             "token travels in clear text to whoever can see the traffic (use 127.0.0.1 behind a TLS proxy, "
             "or a private network)", err=True)
    shown = f"[{host}]" if ":" in host else host
    echo(f"Serving the metrics of {app.settings.home} on http://{shown}:{server.server_address[1]}/metrics; "
         f"scrapes send the bearer token in {path} (Ctrl-C ends)", err=True)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()


@click.command("metrics")
@click.option("--openmetrics", is_flag=True, help="OpenMetrics text instead of Prometheus' text format.")
@click.option("--serve", "serve_address", metavar="[HOST:]PORT",
              help=f"Serve GET /metrics for Prometheus to scrape, computed per scrape (host: 127.0.0.1; "
                   f"e.g. {DEFAULT_PORT}).")
@click.option("--token-file", metavar="FILE", callback=_not_empty,
              help=f"With --serve: the bearer token scrapes must send [default: <home>/{TOKEN_FILE}, made once].")
@_metrics_file
@output_option
@pass_app
def metrics_cmd(app, openmetrics, serve_address, token_file, metrics_file, output):
    """The home's jobs, savepoints, stops and catalog as Prometheus metrics.

    Prints them once (to a file with --metrics-file, as node_exporter's textfile collector reads them), or with
    --serve answers Prometheus' scrapes; see docs/howto/metrics.md for each metric and example alerts.
    """
    from sparkpoint.jobs import metrics

    if token_file is not None and not serve_address:
        raise BadArgumentError("--token-file goes with --serve")
    if serve_address and metrics_file is not None:
        raise BadArgumentError("give --serve or --metrics-file, not both")
    if metrics_file is not None:
        _write_metrics(app, metrics_file)
        return
    if serve_address:
        _serve(app, serve_address, token_file)
        return
    if output == "json":
        scrape = metrics.scrape(app.settings)
        _warn(scrape.problems)
        emit(output, {"metrics": [_as_json(metric, samples) for metric, samples in scrape.samples.items()],
                      "problems": scrape.problems}, print)
        return
    data, scrape = metrics.exposition(app.settings, openmetrics=openmetrics)
    _warn(scrape.problems)
    click.echo(data.decode(), nl=False)


def _as_json(metric, samples) -> dict:
    return {"name": metric.name, "type": metric.kind, "help": metric.help,
            "samples": [{"labels": dict(zip(metric.labels, labels, strict=True)), "value": value}
                        for labels, value in samples]}


COMMANDS = (metrics_cmd,)
