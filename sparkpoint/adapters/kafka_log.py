"""A Kafka broker, as sparkpoint asks it: each topic's id, how far each partition's log reaches (its first offset
still kept and the offset its next record will get), and when the record at an offset was written.

Through kafka-python (the ``kafka`` extra), imported here only and only when asked: every other command works
where no Kafka client is installed. Any number of topics costs the same few requests: metadata, then a
ListOffsets request per partition leader for the earliest offsets and one for the latest; the records' times,
one consumer's fetches, a little of every partition at once. ``timeout`` bounds each request; the caller bounds
the whole (a node that accepts connections and never answers costs the client its own connection timeout: see
restorability.check_reads). ``client_config`` carries what the connection needs besides the address
(security_protocol, sasl_*, ssl_*): from the user's configuration file, never from a savepoint; the client's
own debug log, which prints its options, is kept quiet.

A topic's id (KIP-516) is the broker's name for one life of a topic: deleted and made again under the same name,
the topic gets a new one. The Metadata response carries it from version 10 (brokers 2.8 and later); kafka-python
asks for the newest version both sides speak and hands it in ``describe_topics`` as a UUID's text (None from an
older broker, where the field is absent, and for a topic it does not have). It is given here as Kafka's own
tools print it (``Uuid.toString``: the 16 bytes in URL-safe base64 without padding, as ``kafka-topics.sh
--describe`` shows ``TopicId``).
"""

from __future__ import annotations

import base64
import logging
import time
import uuid
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from sparkpoint.errors import ConfigError, EnvironmentSetupError, UnreachableError

BROKER_SECONDS = 5.0
_UNKNOWN_TOPIC = 3  # UNKNOWN_TOPIC_OR_PARTITION, Kafka's error code


@dataclass(frozen=True)
class LogBounds:
    """One partition's log: ``first``, the oldest offset still kept; ``end``, the offset of its next record."""

    first: int
    end: int


@dataclass(frozen=True)
class TopicLog:
    """One topic as the broker has it now: its id (None from a broker before 2.8), and its partitions' logs."""

    id: str | None
    partitions: dict[int, LogBounds]


def log_bounds(bootstrap: str, topics: Collection[str], client_config: Mapping[str, Any] | None = None,
               timeout: float = BROKER_SECONDS) -> dict[str, TopicLog | None]:
    """Per topic, its id and its partitions' bounds; None for a topic the broker does not have (deleted, or never
    made)."""
    _client_installed()
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient, OffsetSpec
    from kafka.errors import KafkaError

    admin = _admin(KafkaAdminClient, bootstrap, client_config, timeout)
    try:
        described = _described(admin, bootstrap, topics)
        there = {topic: each for topic, each in described.items() if each is not None}
        wanted = [TopicPartition(topic, index) for topic, (_id, indexes) in there.items() for index in indexes]
        first = admin.list_partition_offsets(dict.fromkeys(wanted, OffsetSpec.EARLIEST)) if wanted else {}
        after = admin.list_partition_offsets(dict.fromkeys(wanted, OffsetSpec.LATEST)) if wanted else {}
    except KafkaError as exc:
        raise UnreachableError(f"the Kafka broker {bootstrap} did not answer: {type(exc).__name__}") from None
    finally:
        admin.close()
    return {topic: None if each is None else TopicLog(each[0], {
                index: LogBounds(first[TopicPartition(topic, index)].offset, after[TopicPartition(topic, index)].offset)
                for index in each[1]})
            for topic, each in described.items()}


def topic_ids(bootstrap: str, topics: Collection[str], client_config: Mapping[str, Any] | None = None,
              timeout: float = BROKER_SECONDS) -> dict[str, str | None]:
    """Per topic, its id; None for a topic the broker does not have, or when it gives none (before 2.8). One
    Metadata request: what a savepoint records when it is taken, for log_bounds' to be compared with."""
    _client_installed()
    from kafka.admin import KafkaAdminClient
    from kafka.errors import KafkaError

    admin = _admin(KafkaAdminClient, bootstrap, client_config, timeout)
    try:
        described = _described(admin, bootstrap, topics)
    except KafkaError as exc:
        raise UnreachableError(f"the Kafka broker {bootstrap} did not answer: {type(exc).__name__}") from None
    finally:
        admin.close()
    return {topic: None if each is None else each[0] for topic, each in described.items()}


def _admin(kind: Callable[..., Any], bootstrap: str, client_config: Mapping[str, Any] | None, timeout: float) -> Any:
    return _client(kind, bootstrap, client_config, timeout, bootstrap_timeout_ms=int(timeout * 1000))


def _described(admin: Any, bootstrap: str, topics: Collection[str]) -> dict[str, tuple[str | None, list[int]] | None]:
    """Per topic, (its id, its partitions' indexes) from one Metadata request; None for a topic the broker does
    not have."""
    found: dict[str, tuple[str | None, list[int]] | None] = {}
    for described in admin.describe_topics(sorted(topics)):
        if described["error_code"] == _UNKNOWN_TOPIC:
            found[described["name"]] = None
        elif described["error_code"]:
            raise UnreachableError(f"the Kafka broker {bootstrap} would not describe topic "
                                   f"{described['name']!r} (error {described['error_code']})")
        else:
            found[described["name"]] = (_kafka_id(described.get("topic_id")),
                                         sorted(p["partition_index"] for p in described["partitions"]))
    return found


def _kafka_id(value: Any) -> str | None:
    """A topic id as kafka-python gives it (a UUID, or its text) in Kafka's own form; None for none."""
    if value is None:
        return None
    raw = uuid.UUID(str(value)).bytes
    return None if raw == bytes(16) else base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def record_times(bootstrap: str, positions: Mapping[tuple[str, int], int],
                 client_config: Mapping[str, Any] | None = None,
                 timeout: float = BROKER_SECONDS) -> dict[tuple[str, int], int | None]:
    """Per (topic, partition), the timestamp (ms since the epoch) of the first record at or after its offset in
    ``positions``: when the oldest record a savepoint still needs was written (or, with the topic's
    message.timestamp.type=LogAppendTime, appended). None where the log holds no record from there (the offset is
    its end), or none arrived within ``timeout``. One consumer fetches every partition at once, a little of each."""
    _client_installed()
    from kafka import KafkaConsumer, TopicPartition
    from kafka.errors import KafkaError

    wanted = {TopicPartition(topic, partition): offset for (topic, partition), offset in positions.items()}
    found: dict[tuple[str, int], int | None] = dict.fromkeys(positions)
    if not wanted:
        return found
    consumer = _client(KafkaConsumer, bootstrap, client_config, timeout, group_id=None, enable_auto_commit=False,
                       max_partition_fetch_bytes=16 << 10, fetch_max_wait_ms=100)
    try:
        # Only partitions the broker has: asking for the end of one that is gone is an error of the client's.
        there = {topic: consumer.partitions_for_topic(topic) or set() for topic in {tp.topic for tp in wanted}}
        wanted = {tp: offset for tp, offset in wanted.items() if tp.partition in there[tp.topic]}
        if not wanted:
            return found
        consumer.assign(list(wanted))
        ends = consumer.end_offsets(list(wanted), timeout_ms=int(timeout * 1000))
        waiting = set()
        for tp, offset in wanted.items():
            if offset < ends[tp]:
                consumer.seek(tp, offset)
                waiting.add(tp)
        consumer.pause(*(set(wanted) - waiting))
        deadline = time.monotonic() + timeout
        while waiting and time.monotonic() < deadline:
            for tp, records in consumer.poll(timeout_ms=200).items():
                if tp in waiting and records:
                    found[(tp.topic, tp.partition)] = records[0].timestamp
                    waiting.discard(tp)
                    consumer.pause(tp)
    except KafkaError as exc:
        raise UnreachableError(f"the Kafka broker {bootstrap} did not answer: {type(exc).__name__}") from None
    finally:
        consumer.close()
    return found


def _client_installed() -> None:
    try:
        import kafka  # noqa: F401 - the check itself
    except ImportError:
        raise EnvironmentSetupError("asking a Kafka broker needs its client: pip install 'sparkpoint[kafka]'") from None
    logging.getLogger("kafka").setLevel(max(logging.INFO, logging.getLogger("kafka").getEffectiveLevel()))


def _client(kind: Callable[..., Any], bootstrap: str, client_config: Mapping[str, Any] | None, timeout: float,
            **fixed: Any) -> Any:
    """A kafka-python client of ``kind`` with the user's options, then sparkpoint's (the address, timeouts)."""
    from kafka.errors import KafkaConfigurationError, KafkaError

    try:
        return kind(**{**(client_config or {}), "bootstrap_servers": bootstrap, "client_id": "sparkpoint",
                       "request_timeout_ms": int(timeout * 1000), **fixed})
    except (KafkaConfigurationError, TypeError, ValueError) as exc:  # a key or value the client does not take
        raise ConfigError(f"the configuration's kafka settings are not the client's: {type(exc).__name__}: "
                          f"{str(exc)[:200]} (kafka-python's option names)") from None
    except KafkaError as exc:
        raise UnreachableError(f"the Kafka broker {bootstrap} does not answer within {timeout:g} s "
                               f"({type(exc).__name__}): is it up, and is that its address?") from None
