"""HTTP client of a job's agent: timeouts, the job's token on every request, never through a proxy."""

from __future__ import annotations

from typing import Any

from sparkpoint.adapters import http
from sparkpoint.errors import JobNotRunningError


class AgentClient:
    def __init__(self, host: str, port: int, job_id: str, token: str, timeout: float = 5.0):
        self.base = f"http://{host}:{port}"
        self.job_id = job_id
        self.timeout = timeout
        self.session = http.plain_session({"Authorization": f"Bearer {token}", "X-Sparkpoint-Job": job_id})

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None, timeout: float | None = None) -> dict:
        def unreachable(reason: str) -> JobNotRunningError:
            return JobNotRunningError(f"the agent of job {self.job_id} does not answer at {self.base}: {reason}")

        status, answer = http.call(self.session, method, self.base + path, json=body, timeout=timeout or self.timeout,
                                   unreachable=unreachable, what=f"the agent of job {self.job_id}")
        if status != 200:
            # A token that is not the job's (401), an agent of another version (404): this agent cannot be used.
            raise JobNotRunningError(f"the agent of job {self.job_id} refused {path}: {status} {str(answer)[:200]}")
        return answer

    def status(self) -> dict[str, Any]:
        return self._call("GET", "/v1/status")

    def request_stop(self, timeout: float) -> dict[str, Any]:
        """Ask every query to end at its next batch boundary (``timeout``: then interrupted); the stop's
        first report: ``done``, ``seconds`` and per query ``state``, ``batch_id``, ``at_boundary``."""
        # An agent started by an earlier sparkpoint answers only once it has stopped, with "stopped".
        reply = self._call("POST", "/v1/stop", {"timeout": timeout}, timeout=timeout + 30)
        return reply["stop"] if "stop" in reply else {"done": True, "seconds": None, "queries": reply["stopped"]}

    def stop_report(self) -> dict[str, Any]:
        return self._call("GET", "/v1/stop")["stop"]

    def cancel(self) -> list[str]:
        """The queries being stopped: the agent answers at once, and the driver exits once they have ended."""
        return self._call("POST", "/v1/cancel", {})["cancelled"]
