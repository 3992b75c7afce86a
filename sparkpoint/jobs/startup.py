"""Where a job's start went: the phases from the `run` command to each query's first batch.

Two writers each record their own milestones (UTC times), and the phases are read from both:
- the CLI, in job.json's ``launch``: ``at`` (the command began), ``restored`` (the savepoint in place, with what
  `run` did before it: the savepoint read, its checks, a rescale; the driver starts meanwhile, so a restore that
  ends after a later milestone is only what it took beyond it) and, for `run --replace`, ``stop_began`` and
  ``stopped`` (the old version's stop with its savepoint, which begins once the new driver waits);
- the driver's agent, in agent.json's ``startup``: ``driver`` (its Python began: spark-submit and the JVM are
  behind it), ``session`` (the application has its SparkSession), and per query ``started`` and ``first_batch``
  (its first batch's commit, with Spark's ``durationMs`` of it: planning, state loading within ``addBatch``), at
  the times Spark gives them (runtime.query_report.spark_moment), not when the agent's listener hears of them; never
  before the milestones noted before them (runtime.agent.Agent.note_milestone).

A phase is named by the milestone that ends it, and lasts from the milestone before it in time: ``restore``,
``spark_submit`` (``standby`` for a standby driver's: from the command to its adoption; runtime.standby),
``spark_session``, ``waiting`` (--replace: the new version's application up to its first
query start, which waits there while the old version still runs; runtime.handover), ``stop``,
``queries_started`` (the last query's start; `run -s`'s check in the driver is in it) and ``first_batch`` (the
last query's first commit). A cluster-mode driver's times come from its host's clock.
"""

from __future__ import annotations

from typing import Any

from sparkpoint.times import parse_iso

LABELS = {"restore": "restore", "spark_submit": "spark-submit", "standby": "standby adopted",
          "waiting": "waiting for the old version", "stop": "its stop", "spark_session": "Spark session",
          "queries_started": "queries started", "first_batch": "first batch"}


def started_up(launch: dict[str, Any] | None, startup: dict[str, Any] | None) -> tuple[str, dict[str, float]] | None:
    """(when, phases) once every query has committed its first batch: the start is over; None until then."""
    found = phases(launch, startup)
    if "first_batch" not in found:
        return None
    return max((q["first_batch"]["at"] for q in startup["queries"].values() if isinstance(q, dict)),
               key=parse_iso), found


def phases(launch: dict[str, Any] | None, startup: dict[str, Any] | None) -> dict[str, float]:
    """The phases known so far, in seconds, in the order they came; {} for a job launched before they were
    recorded."""
    if not isinstance(launch, dict) or parse_iso(launch.get("at")) is None:
        return {}
    startup = startup if isinstance(startup, dict) else {}
    queries = [q for q in (startup.get("queries") or {}).values() if isinstance(q, dict)]
    started = [_at(q.get("started")) for q in queries]
    first = [_at(q.get("first_batch")) for q in queries]
    milestones = {"restore": parse_iso(launch.get("restored")), "waiting": parse_iso(launch.get("stop_began")),
                  "stop": parse_iso(launch.get("stopped")),
                  "standby" if startup.get("standby") else "spark_submit": parse_iso(startup.get("driver")),
                  "spark_session": parse_iso(startup.get("session")),
                  # a query not started yet, or without its first batch: that phase is not over
                  "queries_started": max(started) if started and None not in started else None,
                  "first_batch": max(first) if first and None not in first else None}
    found: dict[str, float] = {}
    previous = parse_iso(launch["at"])
    for phase, moment in sorted(((p, m) for p, m in milestones.items() if m is not None), key=lambda pm: pm[1]):
        found[phase] = round(max(moment - previous, 0.0), 3)
        previous = moment
    return found


def _at(milestone: Any) -> float | None:
    return parse_iso(milestone.get("at")) if isinstance(milestone, dict) else None


def said(found: dict[str, float]) -> str:
    """``restore 0.9 s, spark-submit 5.1 s, ...``, as the job's history says it."""
    return ", ".join(f"{LABELS[phase]} {seconds:.1f} s" for phase, seconds in found.items())
