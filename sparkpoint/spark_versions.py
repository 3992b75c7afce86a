"""What sparkpoint knows of each supported Spark minor, one entry per minor: the internals the driver side
leans on, the checkpoint formats it reads, the confs its offset logs pin, the defaults that change.

Read in each release's bytecode (javap of spark-sql's and spark-core's jars, pyspark 3.5.9, 4.0.5, 4.1.4,
4.2.1, 4.3.0), and proven per version by tests/compat. What does not change across the range is not repeated
here: the graceful stop's StreamExecution.awaitProgressLock(), state() (an AtomicReference),
queryExecutionThread(), isActive (state != TERMINATED, checked at the top of every trigger), constructNextBatch
and the commit at the end of runBatch under that lock, and runStream's finally; the agent's
resolvedCheckpointRoot(), sink() and sparkSession(); StreamingQueryManager's awaitAnyTermination(0) and
resetTerminated() (runtime.gate).

What changes:
- The engine's package: ``org.apache.spark.sql.execution.streaming`` through 4.0, ``...streaming.runtime`` from
  4.1 (where TERMINATED$ lives).
- Where one trigger's body runs: 4.0 onwards, MicroBatchExecution.executeOneBatch; in 3.5 an inline lambda,
  ``$anonfun$runActivatedStream$1``. Its frame is the one under the end-of-trigger signal (taken under the lock,
  just after a commit) and under the poll delay's Thread.sleep (a trigger that found no batch).
- runBatch interrupts its own thread when TERMINATED is seen after planning from 4.0.5, 4.1.4 and 4.2.0, not in
  3.5.x, 4.0.0 or 4.1.0: there a batch planned before the request simply runs and commits, which the stop
  handles the same way (it never requests the end while a batch is being planned).
- The commit log: 3.5 reads v1 only. 4.0 and 4.1 read v1 or v2 (checkpoint format v2, the state stores' unique
  ids) but only the one their session's ``checkpointFormatVersion`` names (an exact match: the conf is pinned in
  no offset log). 4.2 and 4.3 read up to v3. Format v2 state is the writing minor's own: 4.3.0's RocksDB state
  failed on 4.0.5 ("Cannot read RocksDB checkpoint metadata. Expected v2, but found v1"), 4.0.5's on 4.3.0
  ("Expected v1, but found v2"), the conf set in both.
- The offset log: v2 (``OffsetMap``) is written from 4.2 when asked; older versions refuse it.
- Operator metadata (``state/<op>/_metadata``) from 4.0; transformWithState (its v2 metadata) from 4.0.
- The confs an offset log pins, and what a version assumes for one its log lacks (10 keys in 3.5, 17 in 4.3).
- ANSI SQL mode: pinned in no version's offset log; off by default in 3.5, on from 4.0.
- Where a saved state is held against a new plan: from 4.0 in the driver, as a run's first batch is planned
  (schemas against the schema files, operators against the operator metadata), before any task runs; in 3.5 by
  each task as it opens its store. So from 4.0 a check batch that is planned and runs no task has had Spark's
  checks (runtime.writers), and in 3.5 it must run.
- How a refusal of the saved state reads: error classes from 4.0 (STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE, ...);
  3.5 throws StateSchemaNotCompatible, an exception class of its own, for the same schema check.
- A standalone master's security: the JWSFilter (the REST server's and the web UIs' token check) from 4.0; a
  master with its REST server on refuses ``spark.authenticate.secret`` (the RPC secret) in 3.5, 4.0.0 and 4.1.0,
  not in 4.0.5, 4.1.4 or 4.2.0+ (SPARK-57451, backported).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_BEFORE_4_1 = "org.apache.spark.sql.execution.streaming"
_FROM_4_1 = "org.apache.spark.sql.execution.streaming.runtime"

ANSI_CONF = "spark.sql.ansi.enabled"
CHECKPOINT_FORMAT_CONF = "spark.sql.streaming.stateStore.checkpointFormatVersion"
ENCODING_FORMAT_CONF = "spark.sql.streaming.stateStore.encodingFormat"
ROW_CHECKSUM_CONF = "spark.sql.streaming.stateStore.rowChecksum.enabled"
PRUNE_FILTERS_CONF = "spark.sql.optimizer.pruneFiltersCanPruneStreamingSubplan"
# 3.5.4 wrote the conf under another name; 3.5.5+ and 4.0 read it into the right one, 4.1+ no longer do.
_MISNAMED_BY_3_5_4 = {"spark.databricks.sql.optimizer.pruneFiltersCanPruneStreamingSubplan": PRUNE_FILTERS_CONF}

# What a Spark's refusal of the saved state says, by what it concerns (savepoints.compat's problem kinds).
_REFUSED_FROM_4_0 = (
    ("STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE", "state_schema"),
    ("STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE", "state_schema"),
    ("STATE_SCHEMA", "state_schema"),
    ("CANNOT_LOAD_STATE_STORE", "state_schema"),  # e.g. a state format this Spark cannot read
    ("STREAMING_STATEFUL_OPERATOR", "operators"),
    ("sources in the checkpoint offsets", "sources"),
)
# 3.5.9's error-classes.json has no state store class: its checks throw exception classes of their own
# (org.apache.spark.sql.execution.streaming.state's), one per task. Which one ends the job is a race: for a
# changed aggregation key, the schema check in one task or the saved row's validation in another.
_REFUSED_BY_3_5 = (
    ("StateSchemaNotCompatible", "state_schema"),
    ("InvalidUnsafeRowException", "state_schema"),
    ("sources in the checkpoint offsets", "sources"),
)

# Pinned in an offset log: the value a version assumes when a log lacks the key (None: the session's value).
_PINNED_3_5 = {
    "spark.sql.shuffle.partitions": None,
    "spark.sql.streaming.stateStore.providerClass": None,
    "spark.sql.streaming.multipleWatermarkPolicy": "min",
    "spark.sql.streaming.flatMapGroupsWithState.stateFormatVersion": "1",
    "spark.sql.streaming.aggregation.stateFormatVersion": "1",
    "spark.sql.streaming.join.stateFormatVersion": "1",
    "spark.sql.streaming.stateStore.compression.codec": "lz4",
    "spark.sql.streaming.stateStore.rocksdb.formatVersion": None,
    "spark.sql.streaming.statefulOperator.useStrictDistribution": "false",
    PRUNE_FILTERS_CONF: "true",
}
_PINNED_4_0 = {**_PINNED_3_5, ENCODING_FORMAT_CONF: "unsaferow"}
_PINNED_4_2 = {
    **_PINNED_4_0,
    "spark.sql.streaming.stateStore.rocksdb.mergeOperatorVersion": "1",
    ROW_CHECKSUM_CONF: "false",
    "spark.sql.function.protobufExtensions.enabled": "false",
    "spark.sql.streaming.queryEvolution.enableSourceEvolution": "false",
}
_PINNED_4_3 = {
    **_PINNED_4_2,
    "spark.sql.streaming.statefulOperator.alwaysNullableOutput.enabled": "false",
    "spark.sql.dropDuplicates.deterministicKeyOrder.enabled": "false",
}


@dataclass(frozen=True)
class StreamInternals:
    engine_package: str
    trigger_body: str  # the method one trigger runs in: its frames are the end-of-trigger lock and the poll sleep

    @property
    def terminated_class(self) -> str:
        return f"{self.engine_package}.TERMINATED$"


@dataclass(frozen=True)
class SparkMinor:
    name: str  # "3.5"
    internals: StreamInternals
    commit_log: int  # the newest commit log version it reads
    offset_log: int  # the newest offset log version it reads
    operator_metadata: bool  # writes state/<op>/_metadata (3.5 does not: its operators are known by number only)
    transform_with_state: bool
    ansi_default: bool
    pinned: dict[str, str | None]
    renamed: dict[str, str]  # a pinned conf's older name it still reads from an offset log, and its name now
    jws_filter: bool  # org.apache.spark.ui.JWSFilter, the token check of the master's REST server and web UIs
    rest_with_secret_from: int | None  # the first patch whose master takes the RPC secret with REST (None: none)
    state_data_source: bool  # spark.read.format("statestore"), from 4.0 (rescale and inspect --state use 4.3's)
    checks_state_in_planning: bool  # the saved state held against a new plan in the driver's planning (4.0+)
    refusals: tuple[tuple[str, str], ...]  # (words of its refusal of a saved state, what that concerns)


KNOWN: dict[tuple[int, int], SparkMinor] = {
    (3, 5): SparkMinor("3.5", StreamInternals(_BEFORE_4_1, "$anonfun$runActivatedStream$1"), commit_log=1,
                       offset_log=1, operator_metadata=False,
                       transform_with_state=False, ansi_default=False, pinned=_PINNED_3_5,
                       renamed=_MISNAMED_BY_3_5_4, jws_filter=False, rest_with_secret_from=None,
                       state_data_source=False, checks_state_in_planning=False,
                       refusals=_REFUSED_BY_3_5),
    (4, 0): SparkMinor("4.0", StreamInternals(_BEFORE_4_1, "executeOneBatch"), commit_log=2,
                       offset_log=1, operator_metadata=True,
                       transform_with_state=True, ansi_default=True, pinned=_PINNED_4_0,
                       renamed=_MISNAMED_BY_3_5_4, jws_filter=True, rest_with_secret_from=5, state_data_source=True,
                       checks_state_in_planning=True, refusals=_REFUSED_FROM_4_0),
    (4, 1): SparkMinor("4.1", StreamInternals(_FROM_4_1, "executeOneBatch"), commit_log=2,
                       offset_log=1, operator_metadata=True,
                       transform_with_state=True, ansi_default=True, pinned=_PINNED_4_0, renamed={},
                       jws_filter=True, rest_with_secret_from=4, state_data_source=True,
                       checks_state_in_planning=True, refusals=_REFUSED_FROM_4_0),
    (4, 2): SparkMinor("4.2", StreamInternals(_FROM_4_1, "executeOneBatch"), commit_log=3,
                       offset_log=2, operator_metadata=True,
                       transform_with_state=True, ansi_default=True, pinned=_PINNED_4_2, renamed={},
                       jws_filter=True, rest_with_secret_from=0, state_data_source=True,
                       checks_state_in_planning=True, refusals=_REFUSED_FROM_4_0),
    (4, 3): SparkMinor("4.3", StreamInternals(_FROM_4_1, "executeOneBatch"), commit_log=3,
                       offset_log=2, operator_metadata=True,
                       transform_with_state=True, ansi_default=True, pinned=_PINNED_4_3, renamed={},
                       jws_filter=True, rest_with_secret_from=0, state_data_source=True,
                       checks_state_in_planning=True, refusals=_REFUSED_FROM_4_0),
}
# Every supported Spark's refusal words, the first match naming the kind: a check reads the error whichever
# Spark gave it.
REFUSALS = tuple(dict.fromkeys(refusal for minor in KNOWN.values() for refusal in minor.refusals))
# Spark 4.1's Kafka connector (4.1.1: the release of 4.1's that Maven Central serves whole) fails the progress report
# of a batch it runs again from the offset log, before it has asked the broker for the latest offsets:
# KafkaMicroBatchStream.metrics takes Some(null) for an Option (SPARK-55271; 4.2.0's connector does not, and does
# not load on 4.1). The check's empty batch is such a batch. Seen here with pyspark 4.1.4.
KAFKA_RERUN_DEFECT = 'because the return value of "scala.Option.get()" is null'
KAFKA_RERUN_NOTE = ("Spark 4.1's Kafka connector fails the report of a batch it runs again from the offset log "
                    "(SPARK-55271: KafkaMicroBatchStream.metrics), and the check's empty batch is one, so the "
                    "check cannot decide for a query that reads Kafka on Spark 4.1; a savepoint that `stop` took "
                    "at a boundary (no planned batch) restores with --no-check, its first batch being a new one")
SUPPORTED_RANGE = f"{next(iter(KNOWN.values())).name} to {list(KNOWN.values())[-1].name}"


def minor_of(version: str) -> tuple[int, int] | None:
    parts = version.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def spark_minor(version: str | None) -> SparkMinor | None:
    """What sparkpoint knows of a Spark version (``3.5.9``, ``4.0.5-amzn-0``); None for one it does not know."""
    minor = minor_of(version) if version else None
    return KNOWN.get(minor) if minor else None


def master_takes_secret_with_rest(version: str) -> bool:
    """Whether a standalone master of this version runs its REST server beside the RPC secret. Only the x.0 and
    the latest patch of each line were read: a patch between them counts as refusing (REST off, RPC secured)."""
    known = spark_minor(version)
    patch = re.match(r"\d+\.\d+\.(\d+)", version)
    return bool(known and patch) and known.rest_with_secret_from is not None and int(
        patch.group(1)) >= known.rest_with_secret_from


def stream_internals(version: str) -> StreamInternals | None:
    known = spark_minor(version)
    return known.internals if known else None
