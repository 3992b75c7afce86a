"""`sparkpoint metrics`: the home's jobs, savepoints, stops, catalog and retention horizon as Prometheus metrics,
computed when asked.

One scrape reads the job records, asks every running job's agent for its queries (all at once, AGENT_SECONDS
each: an agent that does not answer shows as ``sparkpoint_job_agent_up 0`` and never stalls the scrape), scans
the savepoint catalog and works out the horizon. prometheus_client builds and renders them (its registry, the
text exposition, OpenMetrics). What cannot be read (a malformed job record, an unreadable catalog) is counted in
``sparkpoint_scrape_errors`` and said in the scrape's ``problems``: a scrape never fails for one bad record.
Nothing here imports pyspark.
"""

from __future__ import annotations

import math
import os
import stat
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from sparkpoint.adapters.local_files import kind_of, write_atomic
from sparkpoint.config import Settings
from sparkpoint.errors import BadArgumentError, SparkpointError, StorageError
from sparkpoint.jobs.live import LiveQuery
from sparkpoint.results import finite_number
from sparkpoint.jobs.agents import reported_statuses
from sparkpoint.jobs.job_view import JobView, describe_job
from sparkpoint.jobs.job_record import Job
from sparkpoint.jobs.job_state import state_of
from sparkpoint.jobs.registry import Registry
from sparkpoint.savepoints import catalog, horizon, source_horizons
from sparkpoint.savepoints.restorability import RESTORABLE, UNKNOWN, check_reads
from sparkpoint.times import parse_iso

AGENT_SECONDS = 0.5  # per agent, all asked at once: a scrape of any number of jobs takes about this long
INPUT_SECONDS = 1.0  # for the Kafka broker to say whether the newest savepoints' input is still in the log
JOB_STATES = ("starting", "running", "finished", "failed", "cancelled", "lost")
STOP_PHASES = ("boundary", "savepoint", "application_end")


@dataclass(frozen=True)
class Metric:
    name: str  # as exposed (a counter's with its _total)
    kind: str  # gauge | counter
    labels: tuple[str, ...]
    help: str


def _gauge(name: str, labels: tuple[str, ...], help_text: str) -> Metric:
    return Metric(name, "gauge", labels, help_text)


def _counter(name: str, labels: tuple[str, ...], help_text: str) -> Metric:
    return Metric(name, "counter", labels, help_text)


JOB = ("job", "name")
QUERY = ("job", "query")
# Every metric sparkpoint exposes, in the order it exposes them: docs/howto/metrics.md's table is checked
# against this.
JOB_STATE = _gauge("sparkpoint_job_state", (*JOB, "state"),
                   "1 for the job's state (starting, running, finished, failed, cancelled, lost), 0 for the others.")
AGENT_UP = _gauge("sparkpoint_job_agent_up", JOB,
                  f"A running job's agent answered this scrape (1) or not within {AGENT_SECONDS:g} s (0).")
LAST_SAVEPOINT = _gauge("sparkpoint_job_last_savepoint_timestamp_seconds", JOB,
                        "When the job's newest savepoint was taken (live, stop, cancel --with-savepoint, hand-over).")
LAST_SAVEPOINT_DURATION = _gauge("sparkpoint_job_last_savepoint_duration_seconds", JOB,
                                 "How long the job's newest savepoint took.")
LAST_SAVEPOINT_BYTES = _gauge("sparkpoint_job_last_savepoint_bytes", JOB, "The size of the job's newest savepoint.")
LAST_FAILURE = _gauge("sparkpoint_job_last_savepoint_failure_timestamp_seconds", JOB,
                      "When a savepoint of the job last failed.")
SAVEPOINTS = _counter("sparkpoint_job_savepoints_total", JOB, "Savepoints taken of the job.")
SAVEPOINT_FAILURES = _counter("sparkpoint_job_savepoint_failures_total", JOB,
                              "Savepoints of the job that failed (savepoint JOB, and the savepoint of a stop).")
LAST_STOP = _gauge("sparkpoint_job_last_stop_timestamp_seconds", JOB,
                   "When the job's last stop with a savepoint (stop, cancel --with-savepoint, hand-over) ended.")
LAST_STOP_PHASE = _gauge("sparkpoint_job_last_stop_phase_seconds", (*JOB, "phase"),
                         "How long each phase of that stop took: boundary, savepoint, application_end.")
LAST_STOP_AT_BOUNDARY = _gauge("sparkpoint_job_last_stop_at_boundary", JOB,
                               "1 if every query of that stop ended at a batch boundary, 0 if one was interrupted.")
RESTORES = _counter("sparkpoint_job_restores_total", JOB, "Restores the job started from (1 if from a savepoint).")
ROLLBACKS = _counter("sparkpoint_job_rollbacks_total", JOB,
                     "Times the job failed its probation and the version before it was started again.")
QUERY_BATCH = _gauge("sparkpoint_query_batch_id", QUERY, "The latest batch of a running query.")
QUERY_INPUT_RATE = _gauge("sparkpoint_query_input_rows_per_second", QUERY, "Its input rate, in its latest batch.")
QUERY_PROCESSING_RATE = _gauge("sparkpoint_query_processed_rows_per_second", QUERY,
                               "Its processing rate, in its latest batch.")
QUERY_STATE_ROWS = _gauge("sparkpoint_query_state_rows", QUERY, "Rows in its state stores.")
QUERY_STATE_BYTES = _gauge("sparkpoint_query_state_bytes", QUERY, "Memory its state stores use.")
CATALOG_SAVEPOINTS = _gauge("sparkpoint_catalog_savepoints", ("name", "status"),
                            "Savepoints in the catalog under a job name, by status (complete, incomplete, invalid).")
CATALOG_BYTES = _gauge("sparkpoint_catalog_bytes", ("name",), "The size of those complete savepoints.")
CATALOG_NEWEST = _gauge("sparkpoint_catalog_newest_savepoint_timestamp_seconds", ("name",),
                        "When the newest complete savepoint under a job name was taken.")
CATALOG_NEWEST_INPUT = _gauge("sparkpoint_catalog_newest_savepoint_input_restorable", ("name",),
                              "1 if every record the newest complete savepoint under a job name reads next is still "
                              "in Kafka's log, 0 if part is gone; none when it reads no topic or the broker cannot "
                              "tell.")
HORIZON = _gauge("sparkpoint_horizon_timestamp_seconds", ("kind", "source"),
                 "The oldest input a kept savepoint or a running job still needs, per source, where it has a time "
                 "(a file source's oldest needed file, as logged; a rate source's oldest row; a Kafka topic's "
                 "oldest needed record, as its broker says).")
SCRAPE_ERRORS = _gauge("sparkpoint_scrape_errors", ("what",),
                       "What this scrape could not read: job_record, savepoint_record, catalog, horizon, input (the "
                       "Kafka broker did not tell).")
SCRAPE_DURATION = _gauge("sparkpoint_scrape_duration_seconds", (), "How long this scrape took.")
METRICS = (JOB_STATE, AGENT_UP, LAST_SAVEPOINT, LAST_SAVEPOINT_DURATION, LAST_SAVEPOINT_BYTES, LAST_FAILURE,
           SAVEPOINTS, SAVEPOINT_FAILURES, LAST_STOP, LAST_STOP_PHASE, LAST_STOP_AT_BOUNDARY, RESTORES, ROLLBACKS,
           QUERY_BATCH, QUERY_INPUT_RATE, QUERY_PROCESSING_RATE, QUERY_STATE_ROWS, QUERY_STATE_BYTES,
           CATALOG_SAVEPOINTS, CATALOG_BYTES, CATALOG_NEWEST, CATALOG_NEWEST_INPUT, HORIZON, SCRAPE_ERRORS,
           SCRAPE_DURATION)
SCRAPE_ERROR_KINDS = ("job_record", "savepoint_record", "catalog", "horizon", "input")


@dataclass
class Scrape:
    """One scrape's samples, by metric: (label values, value); and what it could not read, one line each."""

    samples: dict[Metric, list[tuple[tuple[str, ...], float]]] = field(
        default_factory=lambda: {metric: [] for metric in METRICS})
    problems: list[str] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SCRAPE_ERROR_KINDS, 0))

    def add(self, metric: Metric, labels: tuple, value: object) -> None:
        """A sample, unless ``value`` is not a finite number (unknown: no sample). Label values are text: the
        agent's report and sparkpoint's records are JSON another process wrote."""
        number = finite_number(value)
        if number is not None:
            self.samples[metric].append((tuple(str(label) for label in labels), number))

    def failed(self, what: str, problem: str) -> None:
        self.errors[what] += 1
        self.problems.append(problem)

    def families(self) -> Iterator:
        """prometheus_client's metric families, every metric with its HELP and TYPE even without samples."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        for metric, samples in self.samples.items():
            family_class = CounterMetricFamily if metric.kind == "counter" else GaugeMetricFamily
            family = family_class(metric.name, metric.help, labels=metric.labels)
            for labels, value in samples:
                family.add_metric(labels, value)
            yield family


def scrape(settings: Settings, clock: Callable[[], float] = time.monotonic) -> Scrape:
    """The home's metrics now."""
    started = clock()
    result = Scrape()
    registry = Registry(settings.home_url())
    try:
        jobs, problems = registry.load_all()
    except SparkpointError as exc:  # the jobs directory itself cannot be read
        jobs, problems = [], [("", exc)]
    for _job_id, problem in problems:
        result.failed("job_record", str(problem))
    views = _job_metrics(registry, jobs, result)
    _catalog_metrics(settings, views, result)
    for what, count in result.errors.items():
        result.add(SCRAPE_ERRORS, (what,), count)
    result.add(SCRAPE_DURATION, (), round(clock() - started, 6))
    return result


def _job_metrics(registry: Registry, jobs: list[Job], result: Scrape) -> list[JobView]:
    """Each job's metrics; its view (the running ones' with their queries) for the horizon."""
    states = [(job, state_of(job)) for job in jobs]
    running = [job for job, state in states if state == "running"]
    statuses = reported_statuses(registry, running, AGENT_SECONDS)
    views = []
    for job, state in states:
        if state == "running" and statuses.get(job.id) is None:
            _token_problem(registry, job, result)
        try:
            views.append(_one_job(job, state, statuses.get(job.id), result))
        except Exception as exc:  # noqa: BLE001 - a record or report of a shape no sparkpoint wrote: one error, not the scrape
            result.failed("job_record", f"job {job.id}: its record or its agent's report is malformed "
                                        f"({type(exc).__name__}: {exc})")
    return views


def _token_problem(registry: Registry, job: Job, result: Scrape) -> None:
    """An agent that did not answer may have been asked without its token: a token that cannot be read is the
    job's record at fault, counted as such, not an agent down."""
    try:
        registry.token(job)
    except SparkpointError as exc:
        result.failed("job_record", f"job {job.id}: {exc}")


def _one_job(job: Job, state: str, status: dict | None, result: Scrape) -> JobView:
    labels = (job.id, job.name)
    if job.agent_problem:
        result.failed("job_record", f"job {job.id}: {job.agent_problem}")
    for each in JOB_STATES:
        result.add(JOB_STATE, (*labels, each), 1 if each == state else 0)
    if state == "running":
        result.add(AGENT_UP, labels, 1 if status is not None else 0)
    record = job.savepoints
    if record.problem:
        result.failed("savepoint_record", record.problem)
    else:
        result.add(SAVEPOINTS, labels, record.taken)
        result.add(SAVEPOINT_FAILURES, labels, record.failed)
    last = record.last or {}
    result.add(LAST_SAVEPOINT, labels, parse_iso(last.get("at")))
    result.add(LAST_SAVEPOINT_DURATION, labels, last.get("seconds"))
    result.add(LAST_SAVEPOINT_BYTES, labels, last.get("bytes"))
    result.add(LAST_FAILURE, labels, parse_iso((record.last_failure or {}).get("at")))
    _stop_metrics(job, labels, result)
    result.add(RESTORES, labels, 1 if job.restored_from else 0)
    result.add(ROLLBACKS, labels, sum(1 for event in job.history if event.get("event") == "rolled_back"))
    view = describe_job(job, status, state)
    for query in view.queries:
        _query_metrics(job.id, query, result)
    return view


def _stop_metrics(job: Job, labels: tuple[str, str], result: Scrape) -> None:
    stop = job.stop or {}
    result.add(LAST_STOP, labels, parse_iso(stop.get("at")))
    phases = stop.get("phases") if isinstance(stop.get("phases"), dict) else {}
    for phase in STOP_PHASES:
        result.add(LAST_STOP_PHASE, (*labels, phase), phases.get(phase))
    if isinstance(stop.get("at_boundary"), bool):
        result.add(LAST_STOP_AT_BOUNDARY, labels, 1 if stop["at_boundary"] else 0)


def _query_metrics(job_id: str, query: LiveQuery, result: Scrape) -> None:
    labels = (job_id, query.name or query.id or "")
    result.add(QUERY_BATCH, labels, query.batch_id)
    result.add(QUERY_INPUT_RATE, labels, query.input_rate)
    result.add(QUERY_PROCESSING_RATE, labels, query.processing_rate)
    result.add(QUERY_STATE_ROWS, labels, query.state_rows)
    result.add(QUERY_STATE_BYTES, labels, query.state_bytes)


def _catalog_metrics(settings: Settings, views: list[JobView], result: Scrape) -> None:
    directory = settings.savepoints_dir()
    try:
        entries = catalog.scan(directory, settings.storage_options)
    except SparkpointError as exc:
        result.failed("catalog", f"the catalog {directory} could not be read: {exc}")
        return
    by_name: dict[str, list[catalog.Entry]] = {}
    for entry in entries:
        by_name.setdefault(_catalog_name(entry, directory), []).append(entry)
    for name, kept in sorted(by_name.items()):
        complete = [e for e in kept if e.status == "complete"]
        for status in ("complete", "incomplete", "invalid"):
            result.add(CATALOG_SAVEPOINTS, (name, status), sum(1 for e in kept if e.status == status))
        result.add(CATALOG_BYTES, (name,), sum(e.bytes for e in complete))
        result.add(CATALOG_NEWEST, (name,), max((e.created for e in complete if e.created is not None),
                                                 default=None))
    _input_metrics(settings, by_name, result)
    try:
        held = horizon.of(directory, entries, jobs=views, storage_options=settings.storage_options,
                          kafka=settings.kafka, kafka_seconds=INPUT_SECONDS)
    except SparkpointError as exc:
        result.failed("horizon", f"the retention horizon could not be worked out: {exc}")
        return
    for source in held.sources:
        result.add(HORIZON, (source.kind, source.source), _horizon_ms(source))


def _input_metrics(settings: Settings, by_name: dict[str, list[catalog.Entry]], result: Scrape) -> None:
    """Whether each job name's newest complete savepoint still has its Kafka input: the broker asked once for
    all, within INPUT_SECONDS (and restorability's margin) whatever it does."""
    newest = {name: next((e for e in kept if e.status == "complete"), None) for name, kept in by_name.items()}
    reads = {name: entry.reads for name, entry in newest.items() if entry is not None and entry.reads}
    if not reads:
        return
    try:
        checked = check_reads(reads, settings.kafka, timeout=INPUT_SECONDS)
    except SparkpointError as exc:  # the kafka settings refused by the client, or no client installed
        result.failed("input", f"whether the newest savepoints' input is still in Kafka's log is unknown: {exc}")
        return
    for name in reads:
        said = checked[name]
        if said.status == UNKNOWN:
            if said.broker is not None:
                result.failed("input", f"whether the input of {newest[name].id} is still in Kafka's log is unknown: "
                                       f"{said.why}")
            continue
        result.add(CATALOG_NEWEST_INPUT, (name,), 1 if said.status == RESTORABLE else 0)


def _catalog_name(entry: catalog.Entry, directory: str) -> str:
    """The job name a savepoint is kept under: its manifest's, or for one whose manifest cannot be read
    (incomplete, invalid), the directory it sits in below the catalog ("" directly in the catalog)."""
    if entry.job:
        return entry.job
    parent = entry.path.rstrip("/").rsplit("/", 1)[0]
    return "" if parent == directory.rstrip("/") else parent.rsplit("/", 1)[-1]


def _horizon_ms(source: source_horizons.SourceHorizon) -> float | None:
    if isinstance(source, source_horizons.FileSourceHorizon) and source.oldest_file is not None:
        stamp = source.oldest_file.timestamp_ms
    elif isinstance(source, source_horizons.CountingHorizon):
        stamp = source.timestamp_ms
    elif isinstance(source, source_horizons.KafkaHorizon):  # the topic's oldest needed record, over its partitions
        stamp = min((p.timestamp_ms for p in source.partitions if p.timestamp_ms is not None), default=None)
    else:
        return None
    return stamp / 1000 if stamp is not None else None


# -- exposition ----------------------------------------------------------------------------------------------


class _Collector:
    """A prometheus_client collector that scrapes the home each time it is collected. Collections that ask while
    a scrape runs wait for the next one to start and share it: scrapers at once cost one scrape at a time (the
    agents and masters it asks are asked once), and none is answered with a scrape that started before its
    question (a scrape that failed is no answer: the next asker scrapes again). ``scraped`` hears of each scrape
    once, however many share it."""

    def __init__(self, settings: Settings, scraped: Callable[[Scrape], None] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.settings = settings
        self.last: Scrape | None = None
        self._scraped = scraped
        self._clock = clock
        self._lock = threading.Lock()
        self._last_started = -math.inf

    def collect(self) -> Iterable:
        asked = self._clock()
        with self._lock:
            if self.last is None or self._last_started < asked:
                started = self._clock()
                fresh = scrape(self.settings, self._clock)
                self.last, self._last_started = fresh, started
                if self._scraped is not None:
                    self._scraped(fresh)
            return self.last.families()


def registry_of(settings: Settings, scraped: Callable[[Scrape], None] | None = None):
    """A prometheus_client registry whose every collection is a fresh scrape of the home (see _Collector)."""
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    collector = _Collector(settings, scraped)
    registry.register(collector)
    return registry, collector


def exposition(settings: Settings, openmetrics: bool = False) -> tuple[bytes, Scrape]:
    """The home's metrics in the text exposition format (or OpenMetrics), and the scrape behind them."""
    from prometheus_client import generate_latest
    from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

    registry, collector = registry_of(settings)
    data = (generate_openmetrics if openmetrics else generate_latest)(registry)
    assert collector.last is not None
    return data, collector.last


def textfile_target(path: str) -> Path:
    """The metrics file ``path``, checked before anything is written to it: it is replaced (the path itself: a
    link there is replaced by the file, and never written through, so a link planted in a shared directory
    cannot lead a root cron job to another file). Refused when what is there, or what a link there names, is not
    a regular file (the rename would put a regular file in place of /dev/null or a FIFO, where a file was not
    meant), or when its directory does not exist."""
    target = Path(path)
    if not target.parent.is_dir():
        raise BadArgumentError(f"--metrics-file {path}: the directory {target.parent} does not exist")
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:  # none yet, or a link to nothing: the link is replaced
        return target
    except OSError as exc:
        raise StorageError(f"cannot write the metrics file {path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(mode):
        raise BadArgumentError(f"--metrics-file {path} is {kind_of(mode)}, not a regular file: name a file in "
                               "node_exporter's textfile directory; it was left as it is")
    return target


def write_textfile(path: str, data: bytes) -> None:
    """For node_exporter's textfile collector: replaced whole (never seen half-written), readable by it (0644,
    whatever the umask: the collector runs as another user)."""
    write_atomic(textfile_target(path), data, mode=0o644, exact_mode=True)
