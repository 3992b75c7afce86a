"""The Spark driver UI's REST API, for applications sparkpoint did not launch.

It has no Structured Streaming resource, but each micro-batch's Spark job carries the description
``"<query name>\\nid = <query id>\\nrunId = <run id>\\nbatch = <batch id>"``: the only REST route to
a query's identity and latest batch without code in the driver.
"""

from __future__ import annotations

import re
from typing import Any

from sparkpoint.adapters import http
from sparkpoint.errors import JobNotRunningError, SparkFailureError

_DESCRIPTION = re.compile(
    r"^(?P<name>[^\n]*)\nid = (?P<id>[0-9a-fA-F-]+)\nrunId = (?P<run_id>[0-9a-fA-F-]+)\nbatch = (?P<batch>\d+)"
)


def parse_description(text: str) -> dict[str, Any] | None:
    match = _DESCRIPTION.match(text or "")
    if not match:
        return None
    name = match.group("name").strip()
    return {"name": None if name in ("", "null") else name, "id": match.group("id"),
            "run_id": match.group("run_id"), "batch_id": int(match.group("batch"))}


def streaming_queries(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The latest batch of every query (of its latest run) among an application's Spark jobs."""
    latest: dict[str, dict[str, Any]] = {}
    for job in jobs:
        parsed = parse_description(job.get("description", ""))
        if parsed and (parsed["id"] not in latest or parsed["batch_id"] > latest[parsed["id"]]["batch_id"]):
            latest[parsed["id"]] = parsed
    return sorted(latest.values(), key=lambda q: (q["name"] or "", q["id"]))


def applications(ui_url: str, timeout: float = 5.0) -> list[dict[str, Any]]:
    base = ui_url.rstrip("/") + "/api/v1/applications"
    client = http.session()

    def get(url: str) -> Any:
        status, answer = http.call(client, "GET", url, timeout=timeout, what=f"the Spark UI at {ui_url}",
                                   unreachable=lambda reason: JobNotRunningError(f"no Spark UI answers at {ui_url}: "
                                                                                 f"{reason}"))
        if status != 200:
            raise SparkFailureError(f"the Spark UI at {ui_url} answered {status} for {url}")
        return answer

    return [
        {"app_id": app["id"], "app_name": app.get("name"),
         "queries": streaming_queries(get(f"{base}/{app['id']}/jobs"))}
        for app in get(base)
    ]
