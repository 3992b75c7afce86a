"""The one exception tree of sparkpoint.

Every error a user can cause or meet derives from :class:`SparkpointError`. Each class
carries the exit status the CLI returns for it (documented in docs/reference/exit-codes.md),
and each message says what went wrong and what to do next, in one line.
Only ``sparkpoint.cli.main`` turns these into an exit status and a line on stderr.
"""

from __future__ import annotations


class SparkpointError(Exception):
    """Root of every error sparkpoint reports to a user."""

    exit_code = 1


class ConfigError(SparkpointError):
    """The configuration file or an environment override is malformed."""

    exit_code = 3


class NotFoundError(SparkpointError):
    """A path, savepoint or job named by the user does not exist."""

    exit_code = 4


class NotACheckpointError(SparkpointError):
    """A directory is not a Structured Streaming checkpoint, or has no committed batch."""

    exit_code = 5


class SavepointInvalidError(SparkpointError):
    """A savepoint is incomplete, corrupted, tampered with, unsafe, or of an unknown format."""

    exit_code = 6


class UnsafeFileError(SavepointInvalidError):
    """A checkpoint or savepoint holds something unsafe to follow: an entry other than a regular file or
    directory (a symbolic link, a FIFO, a device: it could read another owner's file, hang, or never end),
    or a name read from Spark's files that would lead out of its directory."""


class TargetNotEmptyError(SparkpointError):
    """A restore or savepoint target already holds data that sparkpoint must not overwrite."""

    exit_code = 7


class CutUnavailableError(SparkpointError):
    """No consistent cut could be copied: Spark purged the requested batch, or kept
    purging files faster than the copy could finish."""

    exit_code = 8


class StorageError(SparkpointError):
    """The storage refused a read or write (permissions, disk full, credentials)."""

    exit_code = 9


class EnvironmentSetupError(SparkpointError):
    """Something the machine must provide is missing (Java, pyspark)."""

    exit_code = 10


class UnsupportedSparkError(EnvironmentSetupError):
    """The Spark that would run the job is not one sparkpoint supports (3.5 to 4.3): nothing was started."""

    exit_code = 19


class BadArgumentError(SparkpointError):
    """A flag or argument is invalid in context: an ambiguous id, a bad duration, overlapping paths.
    Shares exit status 2 with the parser's own usage errors."""

    exit_code = 2


class SparkFailureError(SparkpointError):
    """Spark refused an operation on a checkpoint or savepoint (its error, in one line)."""

    exit_code = 11


class JobNotRunningError(SparkpointError):
    """The job is not running (finished, failed, cancelled or lost), or its agent does not answer.
    Distinct from a failed savepoint, so that a scheduled savepoint alerts only when it should."""

    exit_code = 12


class JobFailedError(SparkpointError):
    """The application failed: Spark refused to restore its state, or it raised an error."""

    exit_code = 13


class UnreachableError(SparkpointError):
    """A standalone master or a Kafka broker does not answer (down, wrong address or port)."""

    exit_code = 14


class CorruptRecordError(SparkpointError):
    """A record sparkpoint keeps of a job (its job.json, a savepoint trigger's record) is unreadable or
    malformed: reported as such, never guessed at."""

    exit_code = 15


class IncompatibleUpgradeError(SparkpointError):
    """`check` found that the application will not restore from the savepoint (each problem printed);
    `run -s` and `run --replace` refuse it before stopping or starting anything."""

    exit_code = 16


class RescaleRefusedError(SparkpointError):
    """`rescale` cannot repartition this state exactly (an operator, state store or key type it does not
    handle): refused by name before anything is written, the savepoint untouched."""

    exit_code = 17


class SinkRollbackRefusedError(SparkpointError):
    """A sink rollback (`rollback-sink`, `run -s --rollback-sink`) cannot bring the output back to the cut: not a
    file sink's output, another query writes there, or its log no longer says which files the cut held. Refused
    before anything is moved."""

    exit_code = 18


class SinkAheadError(SparkpointError):
    """A restore whose sink holds batches after the savepoint's cut. A Delta table the query already wrote past
    it: restored with the same query id, Delta's sink would skip those batches (the old results stay); with a new
    one (--fork), write them twice. A file sink's output, for a query that keeps state: the skipped batches leave
    no state behind, and the query fails after them. `check` and `run -s` refuse it before any Spark starts,
    unless --rollback-sink (the sink back to the cut) or, for a Delta table, --keep-sink-output."""

    exit_code = 22


class InputGoneError(SparkpointError):
    """Input a savepoint needs is no longer there: a Kafka topic's retention deleted records it has not read, or
    the topic or a partition was deleted or recreated. `check`, `run -s` refuse it before any Spark starts,
    unless --allow-data-loss (then what is lost is said)."""

    exit_code = 20


class QueriesRunningError(SparkpointError):
    """`run -s` of a savepoint whose queries run in a job already (the job it was taken of, or another restore of
    it): two jobs running one query id write the same batches to the same sinks. Refused before anything starts;
    the message names the job and says what to do instead (`run --replace`, `--fork`, or a stop first)."""

    exit_code = 23


class StopRefusedError(SparkpointError):
    """A stop that would interrupt a batch it cannot wait for: a real-time query's batch ends after the stop's
    timeout. Nothing was stopped; the message says the timeout that lets the batch end."""

    exit_code = 21


class StoppedWithoutSavepointError(SparkpointError):
    """A stop whose queries ended at their boundary, and whose savepoint then failed: the job is stopped (its
    record says so), its checkpoints are kept, and the line says how to take the savepoint from them."""

    exit_code = 24


class StopInterruptedError(SparkpointError):
    """Ctrl-C during a stop: the driver goes on ending its queries, but no savepoint is taken; says
    where their checkpoints stay."""

    exit_code = 130


class InterruptedBetweenVersionsError(SparkpointError):
    """Ctrl-C (or SIGTERM) after one version of a job stopped and before the next took over: during `run
    --replace`'s hand-over, or a rollback's restart of the version before. No version runs; the message names the
    savepoint that restores the job."""

    exit_code = 130


class RecordedFailureError(SparkpointError):
    """A background operation (a detached savepoint) failed earlier: reported again, with the exit
    status it failed with."""

    def __init__(self, message: str, exit_code: int | None):
        super().__init__(message)
        self.exit_code = exit_code or 1


def raised_line(after_header: list[str]) -> str | None:
    """The line that names a Python traceback's exception, from the lines after its header ("Traceback (most
    recent call last):"): the frames are indented, and the first line that is not names it."""
    return next((line.strip() for line in after_header if line.strip() and not line[0].isspace()), None)
