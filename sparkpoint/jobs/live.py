"""What a running job's driver reports of its queries and their sources (the agent's account, or a driver UI's),
checked as JSON from another process: a value not of its type shows as none."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from sparkpoint.results import Result, json_number
from sparkpoint.spark.sources import MAX_OPTION_CHARS, topics_of

MAX_SOURCES = 64  # per query; a report listing more is not an agent's


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and len(value) <= MAX_OPTION_CHARS else None


@dataclass(frozen=True)
class LiveSource(Result):
    """One source of a live query: what it reads and, for Kafka, how far behind the log's end it is."""

    kind: str  # kafka, file, rate, ... (Spark's name for the source)
    description: str | None  # Spark's (KafkaV2[Subscribe[clicks]])
    bootstrap_servers: str | None  # Kafka's, as the reader names them
    topics: list[str]  # the topics it subscribes to or is assigned ([] for a pattern, and for other sources)
    subscribe_pattern: str | None
    offsets_behind_latest: int | None  # offsets in the log its last batch did not reach, all partitions summed
    path: str | None = None  # a Delta table's, as the driver qualified it

    @classmethod
    def from_report(cls, report: Any) -> LiveSource:
        report = report if isinstance(report, dict) else {}
        behind = report.get("offsets_behind_latest")
        return cls(kind=_text(report.get("kind")) or "unknown", description=_text(report.get("description")),
                   bootstrap_servers=_text(report.get("bootstrap_servers")), topics=topics_of(report),
                   subscribe_pattern=_text(report.get("subscribe_pattern")),
                   offsets_behind_latest=behind if isinstance(behind, int) and not isinstance(behind, bool) else None,
                   path=_text(report.get("path")))


@dataclass(frozen=True)
class LiveQuery(Result):
    """A query as its driver reports it now: the agent's account, or a driver UI's (name, ids and batch only)."""

    name: str | None
    id: str | None
    run_id: str | None
    batch_id: int | None
    input_rate: float | None
    processing_rate: float | None
    state_rows: int | None
    state_bytes: int | None
    trigger_active: bool | None
    checkpoint: str | None
    sources: list[LiveSource] = field(default_factory=list)  # none from a driver UI
    real_time_batch_seconds: float | None = None  # a real-time trigger's batch duration; None for any other

    @classmethod
    def from_report(cls, report: Any) -> LiveQuery:
        report = report if isinstance(report, dict) else {}
        values = {f.name: report.get(f.name) for f in fields(cls)}
        # An agent's report is JSON from another process: a count or rate that is not a number shows as none.
        for name in ("batch_id", "input_rate", "processing_rate", "state_rows", "state_bytes",
                     "real_time_batch_seconds"):
            values[name] = json_number(values[name])
        sources = values["sources"] if isinstance(values["sources"], list) else []
        values["sources"] = [LiveSource.from_report(source) for source in sources[:MAX_SOURCES]]
        return cls(**values)

    @classmethod
    def all_from(cls, reported: Any) -> list[LiveQuery]:
        """The queries of an agent's status (its ``queries``): none when that is not a list."""
        return [cls.from_report(query) for query in reported] if isinstance(reported, list) else []
