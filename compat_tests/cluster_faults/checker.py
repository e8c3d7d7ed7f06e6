"""A queue checker in the style of Jepsen's queue workload, for records sent to a cluster
while faults are injected.

The workload records every send before it is made (``invoke``), then its outcome: ``ok``
(acknowledged, with the partition and offset the broker gave), ``fail`` (a definite refusal:
the record cannot be in the log, e.g. NOT_ENOUGH_REPLICAS before the append) or ``info``
(indeterminate: a timeout, a lost connection, NOT_ENOUGH_REPLICAS_AFTER_APPEND). After
healing, every partition is read back from its start. ``check`` then reports:

* lost        acknowledged records that are not in the log;
* duplicated  records that are in the log more than once;
* unexpected  records in the log that were never sent, or whose send definitely failed;
* reordered   per partition, a producer's records in the log out of the order it sent them
              (an idempotent producer must keep its order);
* moved       acknowledged records found at another offset than the one acknowledged;
* recovered   indeterminate sends that are in the log (allowed; counted for information).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


@dataclass
class Send:
    value: str
    producer: str
    partition: int | None      # chosen by the producer, or learned from the acknowledgement
    seq: int                   # order of invocation within (producer, partition)
    outcome: str = "invoke"    # invoke | ok | fail | info
    offset: int = -1
    error: str | None = None


@dataclass
class Report:
    sent: int = 0
    acked: int = 0
    failed: int = 0
    indeterminate: int = 0
    read: int = 0
    lost: list = field(default_factory=list)
    duplicated: list = field(default_factory=list)
    unexpected: list = field(default_factory=list)
    reordered: list = field(default_factory=list)
    moved: list = field(default_factory=list)
    recovered: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.unexpected or self.reordered or self.moved)

    def summary(self) -> str:
        return (f"sent {self.sent}, acked {self.acked}, failed {self.failed}, indeterminate "
                f"{self.indeterminate}, read {self.read}: lost {len(self.lost)}, duplicated "
                f"{len(self.duplicated)}, unexpected {len(self.unexpected)}, reordered "
                f"{len(self.reordered)}, moved {len(self.moved)}, recovered {len(self.recovered)}"
                + ("" if self.ok else f"; first lost {self.lost[:5]} dup {self.duplicated[:5]} "
                   f"unexpected {self.unexpected[:5]} reordered {self.reordered[:3]} moved {self.moved[:3]}"))


class History:
    """Thread-safe: delivery callbacks may run on a client's thread."""

    def __init__(self) -> None:
        self.sends: dict[str, Send] = {}
        self._next_seq: dict[tuple[str, int | None], int] = {}
        self._lock = threading.Lock()

    def invoke(self, value: str, producer: str, partition: int | None = None) -> None:
        with self._lock:
            if value in self.sends:
                raise ValueError(f"value {value!r} sent twice: values must be unique")
            key = (producer, partition)
            seq = self._next_seq.get(key, 0)
            self._next_seq[key] = seq + 1
            self.sends[value] = Send(value, producer, partition, seq)

    def acked_by(self, producer: str, partition: int | None = None) -> int:
        """How many of ``producer``'s sends (to ``partition``, or to any) are acknowledged."""
        with self._lock:     # the producer's thread adds sends meanwhile
            return sum(1 for s in self.sends.values() if s.producer == producer and s.outcome == "ok"
                       and partition in (None, s.partition))

    def ok(self, value: str, partition: int, offset: int) -> None:
        with self._lock:
            s = self.sends[value]
            s.outcome, s.offset = "ok", offset
            if s.partition is None:
                s.partition = partition

    def fail(self, value: str, error: str) -> None:
        with self._lock:
            s = self.sends[value]
            s.outcome, s.error = "fail", error

    def info(self, value: str, error: str) -> None:
        with self._lock:
            s = self.sends[value]
            s.outcome, s.error = "info", error


def check(history: History, reads: dict[int, list[tuple[int, str]]]) -> Report:
    """``reads``: partition -> [(offset, value)] of everything read back, in log order."""
    sends = history.sends
    r = Report(sent=len(sends))
    for s in sends.values():
        if s.outcome == "ok":
            r.acked += 1
        elif s.outcome == "fail":
            r.failed += 1
        else:
            r.indeterminate += 1
    where: dict[str, list[tuple[int, int]]] = {}
    for part, rows in reads.items():
        for off, value in rows:
            r.read += 1
            where.setdefault(value, []).append((part, off))
    for value, places in where.items():
        s = sends.get(value)
        if len(places) > 1:
            r.duplicated.append((value, places))
        if s is None or s.outcome == "fail":
            r.unexpected.append((value, places, None if s is None else s.error))
        elif s.outcome in ("info", "invoke"):
            r.recovered.append(value)
        elif s.outcome == "ok" and (s.partition, s.offset) not in places:
            r.moved.append((value, (s.partition, s.offset), places))
    for s in sends.values():
        if s.outcome == "ok" and s.value not in where:
            r.lost.append(s.value)
    # order: within each partition, each producer's records must appear in send order
    for part, rows in reads.items():
        last: dict[str, tuple[int, str]] = {}
        for off, value in rows:
            s = sends.get(value)
            if s is None:
                continue
            prev = last.get(s.producer)
            if prev is not None and s.seq < prev[0]:
                r.reordered.append((part, prev[1], value))
            if prev is None or s.seq > prev[0]:
                last[s.producer] = (s.seq, value)
    r.lost.sort()
    return r
