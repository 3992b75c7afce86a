"""What the commands that open an endpoint share (`metrics --serve`, `ui`): the address to listen on, the token
a client must send, and a warning for an address beyond this machine."""

from __future__ import annotations

import ipaddress
import re
import secrets
import socket
from pathlib import Path

from sparkpoint.cli.context import echo
from sparkpoint.errors import BadArgumentError

_ADDRESS = re.compile(r"(?:(?:\[(?P<ipv6>[0-9A-Fa-f:.%\w]+)\]|(?P<host>[^:\[\]]+)):)?(?P<port>[0-9]{1,5})")


def address(text: str, any_port: bool = False) -> tuple[str, int]:
    """[HOST:]PORT, an IPv6 host in brackets ([::1]:9464); with ``any_port``, port 0 asks for any free one."""
    found = _ADDRESS.fullmatch(text)
    lowest = 0 if any_port else 1
    if not found or not lowest <= int(found["port"]) < 65536:
        raise BadArgumentError(f"--serve {text!r}: give [HOST:]PORT, a port from {lowest} to 65535 (an IPv6 host "
                               "in brackets: [::1]:9464)")
    return found["ipv6"] or found["host"] or "127.0.0.1", int(found["port"])


_TOKEN = re.compile(r"[\x21-\x7e]+")  # what an Authorization header carries as it is (RFC 7235 token68 and more)


def token_from(path: Path, make: bool) -> str:
    """The token in ``path`` (made there first, private, if ``make`` and it is missing). Read as sparkpoint's
    records are (a FIFO or a link to /dev/zero is refused, not waited on or read for ever): one line of printable
    ASCII."""
    from sparkpoint.adapters.local_files import MalformedRecord, read_record, write_private
    from sparkpoint.adapters.storage import translate_errors
    from sparkpoint.jobs.registry import TOKEN_BYTES

    with translate_errors(str(path)):
        if make and not path.exists():
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            write_private(path, secrets.token_urlsafe(32) + "\n")
    try:
        token = read_record(path, TOKEN_BYTES).strip()
    except FileNotFoundError:
        raise BadArgumentError(f"the token file {path} does not exist") from None
    except MalformedRecord as exc:
        raise BadArgumentError(f"the token file {path} {exc}") from None
    if not _TOKEN.fullmatch(token):
        raise BadArgumentError(f"the token file {path} must hold one token: one line of printable ASCII, no "
                               "spaces" + (" (it is empty)" if not token else ""))
    if path.stat().st_mode & 0o004:
        echo(f"sparkpoint: warning: the token file {path} is readable by every user of this machine: "
             f"chmod o-r {path}", err=True)
    return token


def beyond_loopback(host: str, port: int) -> bool:
    """Whether ``host`` names an address outside the loopback range (a name that does not resolve: not known to)."""
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)}
    except OSError:
        return False
    return any(not _loopback(ipaddress.ip_address(address.split("%", 1)[0])) for address in addresses)


def _loopback(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:127.0.0.1 is 127.0.0.1
    return (mapped or address).is_loopback
