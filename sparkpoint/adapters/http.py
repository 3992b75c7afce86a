"""The one HTTP session factory of sparkpoint's clients (the agent, a standalone master, a driver UI).

Their requests carry secrets (the agent's token, the master's signed token, the cluster's RPC secret in
a submission): none may go to an HTTP proxy named by ``http_proxy``/``https_proxy``, which would read
them in clear text, so the environment's proxy settings (and .netrc) are not used at all.
"""

from __future__ import annotations

import os


def session(headers: dict[str, str] | None = None):
    import requests  # here, not at the top: `sparkpoint list` must start fast when nothing is asked

    made = requests.Session()
    made.trust_env = False
    # trust_env also drops the CA bundle named in the environment, which an HTTPS driver UI may need.
    made.verify = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE") or True
    made.headers.update({"User-Agent": "sparkpoint", **(headers or {})})
    return made


def request_errors() -> type[Exception]:
    import requests

    return requests.RequestException
