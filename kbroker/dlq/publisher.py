"""The consumer application's side: after N failed attempts, park the record.

    from confluent_kafka import Consumer, Producer
    from kbroker.dlq import DeadLetterPublisher, process_with_retries

    dlq = DeadLetterPublisher(Producer({...}))
    msg = consumer.poll(1)
    process_with_retries(msg, handle, dlq, max_attempts=3)   # handled, or parked in <topic>.dlq
    consumer.commit(msg)

A parked record keeps its key, value and headers and gains the context headers of
``kbroker.dlq.headers`` (original topic, partition, offset, timestamp, error, attempts)."""

from __future__ import annotations

import time
from typing import Any, Callable

from kbroker.dlq.headers import (ATTEMPTS, ERROR, ORIGINAL_OFFSET, ORIGINAL_PARTITION, ORIGINAL_TIMESTAMP,
                                 ORIGINAL_TOPIC, PARKED_AT, SUFFIX, without_context)
from kbroker.dlq.headers import REPLAY_COUNT  # noqa: F401  (kept on parked records)

MAX_ERROR_CHARS = 2000


def _attr(msg, name):
    v = getattr(msg, name)
    return v() if callable(v) else v


class DeadLetterPublisher:
    def __init__(self, producer: Any, *, suffix: str = SUFFIX, topic: str | None = None,
                 flush_timeout_s: float = 30.0) -> None:
        """``producer``: a confluent_kafka.Producer (anything with ``produce(topic, value=,
        key=, headers=)`` and ``flush(timeout)``). ``topic`` names one dead-letter topic for
        everything; by default a record from ``t`` goes to ``t`` + ``suffix``."""
        self.producer = producer
        self.suffix = suffix
        self.topic = topic
        self.flush_timeout_s = flush_timeout_s
        self.parked = 0

    def dlq_topic(self, topic: str) -> str:
        return self.topic or topic + self.suffix

    def park(self, msg: Any, error: BaseException | str, attempts: int, *, sync: bool = True) -> str:
        """Send ``msg`` to its dead-letter topic; returns that topic. With ``sync`` (the
        default) waits for the broker's ack, so the caller may then commit the offset."""
        topic = _attr(msg, "topic")
        ts = _attr(msg, "timestamp")
        ts = ts[1] if isinstance(ts, tuple) else ts
        err = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        headers = list(without_context(_attr(msg, "headers")))
        # a replayed record that fails again keeps its replay count
        headers += [(k, v) for k, v in (_attr(msg, "headers") or ()) if k == REPLAY_COUNT]
        headers += [(ORIGINAL_TOPIC, topic.encode()), (ORIGINAL_PARTITION, str(_attr(msg, "partition")).encode()),
                    (ORIGINAL_OFFSET, str(_attr(msg, "offset")).encode()), (ORIGINAL_TIMESTAMP, str(ts).encode()),
                    (ERROR, err[:MAX_ERROR_CHARS].encode()), (ATTEMPTS, str(attempts).encode()),
                    (PARKED_AT, str(int(time.time() * 1000)).encode())]
        failure: list = []
        dlq = self.dlq_topic(topic)
        self.producer.produce(dlq, value=_attr(msg, "value"), key=_attr(msg, "key"), headers=headers,
                              on_delivery=lambda e, m: failure.append(e) if e is not None else None)
        if sync:
            left = self.producer.flush(self.flush_timeout_s)
            if left or failure:
                raise RuntimeError(f"could not park a record of {topic} in {dlq}: {failure or 'flush timed out'}")
        self.parked += 1
        return dlq


def process_with_retries(msg: Any, handler: Callable[[Any], Any], dlq: DeadLetterPublisher, *,
                         max_attempts: int = 3, backoff_s: float = 0.0) -> bool:
    """Run ``handler(msg)`` up to ``max_attempts`` times; park the record after the last
    failure. True if handled, False if parked."""
    for attempt in range(1, max_attempts + 1):
        try:
            handler(msg)
            return True
        except Exception as e:  # the application's failure, whatever it is
            if attempt == max_attempts:
                dlq.park(msg, e, attempt)
                return False
            if backoff_s:
                time.sleep(backoff_s * attempt)
    return False
