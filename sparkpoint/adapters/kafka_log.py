"""A Kafka broker, as sparkpoint asks it: how far each partition's log reaches, its first offset still kept and
the offset its next record will get.

Through kafka-python (the ``kafka`` extra), imported here only and only when asked: every other command works
where no Kafka client is installed. Any number of topics costs the same few requests: metadata, then a
ListOffsets request per partition leader for the earliest offsets and one for the latest. ``timeout`` bounds
each request; the caller bounds the whole (a node that accepts connections and never answers costs the client
its own connection timeout: see restorability.check_reads). ``client_config`` carries what the connection needs
besides the address (security_protocol, sasl_*, ssl_*): from the user's configuration file, never from a
savepoint; the client's own debug log, which prints its options, is kept quiet.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
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


def log_bounds(bootstrap: str, topics: Collection[str], client_config: Mapping[str, Any] | None = None,
               timeout: float = BROKER_SECONDS) -> dict[str, dict[int, LogBounds] | None]:
    """Per topic, its partitions' bounds; None for a topic the broker does not have (deleted, or never made)."""
    try:
        from kafka import TopicPartition
        from kafka.admin import KafkaAdminClient, OffsetSpec
        from kafka.errors import KafkaConfigurationError, KafkaError
    except ImportError:
        raise EnvironmentSetupError("asking a Kafka broker needs its client: pip install 'sparkpoint[kafka]'") from None
    logging.getLogger("kafka").setLevel(max(logging.INFO, logging.getLogger("kafka").getEffectiveLevel()))
    millis = int(timeout * 1000)
    try:
        admin = KafkaAdminClient(**{**(client_config or {}), "bootstrap_servers": bootstrap,
                                    "request_timeout_ms": millis, "bootstrap_timeout_ms": millis,
                                    "client_id": "sparkpoint"})
    except (KafkaConfigurationError, TypeError, ValueError) as exc:  # a key or value the client does not take
        raise ConfigError(f"the configuration's kafka settings are not the client's: {type(exc).__name__}: "
                          f"{str(exc)[:200]} (kafka-python's option names)") from None
    except KafkaError as exc:
        raise UnreachableError(f"the Kafka broker {bootstrap} does not answer within {timeout:g} s "
                               f"({type(exc).__name__}): is it up, and is that its address?") from None
    try:
        partitions: dict[str, list[int] | None] = {}
        for described in admin.describe_topics(sorted(topics)):
            if described["error_code"] == _UNKNOWN_TOPIC:
                partitions[described["name"]] = None
            elif described["error_code"]:
                raise UnreachableError(f"the Kafka broker {bootstrap} would not describe topic "
                                       f"{described['name']!r} (error {described['error_code']})")
            else:
                partitions[described["name"]] = sorted(p["partition_index"] for p in described["partitions"])
        wanted = [TopicPartition(topic, index) for topic, indexes in partitions.items() for index in indexes or ()]
        first = admin.list_partition_offsets(dict.fromkeys(wanted, OffsetSpec.EARLIEST)) if wanted else {}
        after = admin.list_partition_offsets(dict.fromkeys(wanted, OffsetSpec.LATEST)) if wanted else {}
    except KafkaError as exc:
        raise UnreachableError(f"the Kafka broker {bootstrap} did not answer: {type(exc).__name__}") from None
    finally:
        admin.close()
    return {topic: None if indexes is None else
            {index: LogBounds(first[TopicPartition(topic, index)].offset, after[TopicPartition(topic, index)].offset)
             for index in indexes}
            for topic, indexes in partitions.items()}
