"""ui: the operator's page (sparkpoint.web), served until Ctrl-C."""

from __future__ import annotations

import re
import secrets
import socket
from pathlib import Path

import click

from sparkpoint.cli.context import Seconds, echo, pass_app
from sparkpoint.cli.serving import address as serving_address
from sparkpoint.cli.serving import beyond_loopback, token_from
from sparkpoint.errors import BadArgumentError, EnvironmentSetupError

DEFAULT_ADDRESS = "127.0.0.1:9465"
URL_SAFE = re.compile(r"[A-Za-z0-9._~-]+")


@click.command("ui")
@click.option("--serve", "address", default=DEFAULT_ADDRESS, show_default=True, metavar="[HOST:]PORT",
              help="Where the page listens (port 0: any free one). Beyond loopback the token travels in clear "
                   "text: prefer an SSH tunnel to 127.0.0.1.")
@click.option("--token-file", metavar="FILE",
              help="The token the page asks for [default: a new one at each start, printed in the URL].")
@click.option("--refresh", type=Seconds(min=1), default=5.0, show_default=True,
              help="Seconds between refreshes of the jobs table while the page is visible.")
@click.option("--allow-actions", is_flag=True,
              help="Offer savepoint, stop (with a savepoint) and dispose on the page, each behind a confirmation.")
@pass_app
def ui_cmd(app, address, token_file, refresh, allow_actions):
    """Serve a web page of this home: jobs and their queries (refreshed live), the savepoint catalog per job,
    what a savepoint holds, and what changed between two.

    It listens on 127.0.0.1 and asks for a token: the URL it prints once carries it, and the first visit trades
    it for a cookie. Needs the `ui` extra (pip install 'sparkpoint[ui]'); no Spark, Kafka client or Hadoop."""
    try:
        import uvicorn

        from sparkpoint.web.app import make_app
    except ImportError as exc:
        raise EnvironmentSetupError(f"`sparkpoint ui` needs the ui extra: pip install 'sparkpoint[ui]' ({exc})") \
            from None
    host, port = serving_address(address, any_port=True)
    token = token_from(Path(token_file), make=False) if token_file else secrets.token_urlsafe(24)
    if not URL_SAFE.fullmatch(token):  # it travels in a URL and a cookie, as it is
        raise BadArgumentError(f"the token in {token_file} must be letters, digits and . _ ~ - only (as "
                               "`python -c 'import secrets; print(secrets.token_urlsafe(32))'` makes one)")
    try:
        listening = socket.create_server((host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET)
    except OSError as exc:
        raise BadArgumentError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    bound = listening.getsockname()[1]
    if beyond_loopback(host, bound):
        echo(f"sparkpoint: warning: --serve {address} listens beyond this machine, in plain HTTP: the token "
             "travels in clear text to whoever can see the traffic (use 127.0.0.1 and an SSH tunnel, or a TLS "
             "proxy)", err=True)
    shown = f"[{host}]" if ":" in host else host
    echo(f"Serving {app.settings.home} on http://{shown}:{bound}/?token={token} (Ctrl-C ends)", err=True)
    page = make_app(app.settings, token, cookie=f"sparkpoint-ui-{bound}", refresh_seconds=refresh,
                    allow_actions=allow_actions)
    # No access log: the first request's URL carries the token.
    server = uvicorn.Server(uvicorn.Config(page, access_log=False, log_level="warning", server_header=False,
                                           limit_concurrency=32, lifespan="off"))
    server.run(sockets=[listening])


COMMANDS = (ui_cmd,)
