"""Consume-transform-produce with transactions (confluent-kafka), and its checker.

``Transformer`` reads the input topic (read_committed, one consumer group), and per batch
opens a transaction, writes each record to the same partition of the output topic as
``<input value>|<attempt>`` (the attempt numbers the transaction), sends the consumer's
positions to the transaction and commits; on an abortable error it aborts and rewinds to the
committed offsets, on a fatal one it starts over with new clients; with ``abort_every`` every
so many attempts are flushed, then aborted on purpose and redone the same way. Every attempt
is recorded as committed, aborted or unknown (a fatal error: the coordinator decides).

``check_exactly_once`` compares the read_committed output with the input (Kafka's
TransactionsTest, Jepsen's aborted-read): every input record exactly once, in input order per
key, and no record of an aborted attempt.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from confluent_kafka import OFFSET_INVALID, Consumer, KafkaException, Producer, TopicPartition


def fill_input(bootstrap: str, topic: str, n: int, keys: int) -> None:
    """``n`` records ``key k<i % keys>``, value ``<i>``; each key always on one partition."""
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20,
                  "acks": "all"})
    for i in range(n):
        while True:
            try:
                p.produce(topic, key=b"k%d" % (i % keys), value=b"%d" % i)
                break
            except BufferError:
                p.poll(0.1)
        p.poll(0)
    assert p.flush(120) == 0, "the input was not fully written"


@dataclass
class Attempts:
    committed: set[int] = field(default_factory=set)
    aborted: set[int] = field(default_factory=set)
    unknown: set[int] = field(default_factory=set)


class Transformer:
    def __init__(self, bootstrap: str, src: str, dst: str, total: int, *, group: str,
                 txn_id: str, batch: int = 100, rate_per_s: float = 0,
                 abort_every: int = 0) -> None:
        self.bootstrap, self.src, self.dst, self.total = bootstrap, src, dst, total
        self.abort_every = abort_every
        self.group, self.txn_id, self.batch, self.rate = group, txn_id, batch, rate_per_s
        self.attempts = Attempts()
        self.done = 0                # input records covered by committed offsets
        self._known: dict[int, int] = {}   # committed offsets of the consumer's partitions
        self.restarts = 0
        self.timeline: list[tuple[float, int, str]] = []   # (seconds, done, what) for reports
        self._t0 = time.monotonic()
        self.error: BaseException | None = None
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "Transformer":
        self.thread.start()
        return self

    def join(self, timeout_s: float) -> None:
        self.thread.join(timeout_s)
        if self.thread.is_alive():
            self.stop_event.set()
            self.thread.join(60)
            raise AssertionError(f"transform not finished in {timeout_s:.0f} s: "
                                 f"{self.done}/{self.total} input records committed")
        if self.error is not None:
            raise self.error

    # -- clients ------------------------------------------------------------------------------

    def _clients(self):
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group,
                      "enable.auto.commit": False, "auto.offset.reset": "earliest",
                      "isolation.level": "read_committed", "session.timeout.ms": 30000,
                      "max.poll.interval.ms": 300000})
        p = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": self.txn_id,
                      "transaction.timeout.ms": 60000, "message.timeout.ms": 60000,
                      "linger.ms": 5})
        p.init_transactions(120)
        c.subscribe([self.src])
        return c, p

    def _rewind(self, c) -> None:
        assignment = c.assignment()
        if not assignment:
            return
        for tp in self._retrying(c.committed, assignment, 60):
            offset = 0 if tp.offset == OFFSET_INVALID else tp.offset
            c.seek(TopicPartition(tp.topic, tp.partition, offset))
            self._known[tp.partition] = offset

    def _covered(self, c, positions) -> int:
        """Input records covered now that ``positions`` are committed. librdkafka reports a
        partition's position as OFFSET_INVALID from a seek (or a new consumer) until a message
        of it is consumed: such a partition keeps its committed offset (these transactions
        leave it as it was), learned at the rewind or asked for once here."""
        unknown = [tp for tp in positions if tp.offset < 0 and tp.partition not in self._known]
        if unknown:
            for tp in self._retrying(c.committed, unknown, 60):
                self._known[tp.partition] = max(tp.offset, 0)
        for tp in positions:
            if tp.offset >= 0:
                self._known[tp.partition] = tp.offset
        return sum(self._known[tp.partition] for tp in positions)

    def _note(self, what: str) -> None:
        self.timeline.append((round(time.monotonic() - self._t0, 1), self.done, what))

    def _retrying(self, op, *args):
        """Call a transactional operation again while it fails with a retriable error (calls
        slower than 5 s land in the timeline)."""
        t0 = time.monotonic()
        try:
            for _ in range(30):
                try:
                    return op(*args)
                except KafkaException as e:
                    if not e.args[0].retriable():
                        raise
                    self._note(f"{op.__name__}: {e.args[0].name()}")
                    time.sleep(0.5)
            return op(*args)
        finally:
            if time.monotonic() - t0 > 5:
                self._note(f"{op.__name__} took {time.monotonic() - t0:.1f} s")

    # -- the loop -------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as e:   # surfaced by join()
            self.error = e

    def _loop(self) -> None:
        started = self._t0
        note = self._note
        c, p = self._clients()
        note("clients ready")
        attempt = 0
        idle_since = None
        while self.done < self.total and not self.stop_event.is_set():
            msgs = [m for m in c.consume(self.batch, 0.5) if not m.error()]
            if not msgs:
                idle_since = idle_since or time.monotonic()
                continue
            if idle_since and time.monotonic() - idle_since > 5:
                note(f"consumer got nothing for {time.monotonic() - idle_since:.1f} s")
            idle_since = None
            attempt += 1
            try:
                p.begin_transaction()
                for m in msgs:
                    while True:
                        try:
                            p.produce(self.dst, key=m.key(), value=m.value() + b"|%d" % attempt,
                                      partition=m.partition())
                            break
                        except BufferError:
                            p.poll(0.1)
                positions = c.position(c.assignment())
                self._retrying(p.send_offsets_to_transaction, positions,
                               c.consumer_group_metadata(), 60)
                if self.abort_every and attempt % self.abort_every == 0:
                    p.flush(60)          # its records are in the log, then aborted
                    self.attempts.aborted.add(attempt)
                    self._retrying(p.abort_transaction, 120)
                    note(f"attempt {attempt}: aborted on purpose")
                    self._rewind(c)
                    continue
                self._retrying(p.commit_transaction, 120)
                self.attempts.committed.add(attempt)
                self.done = self._covered(c, positions)
                note("commit")
            except KafkaException as e:
                err = e.args[0]
                note(f"attempt {attempt}: {err.name()}")
                if err.txn_requires_abort():
                    self.attempts.aborted.add(attempt)
                    self._retrying(p.abort_transaction, 120)
                    self._rewind(c)
                else:                   # fatal (fenced, ...): the coordinator decides
                    self.attempts.unknown.add(attempt)
                    self.restarts += 1
                    c.close()
                    c, p = self._clients()
                    self._known.clear()    # the unknown attempt may have moved them
            if self.rate:               # spread the input over the run, so faults hit it
                ahead = self.done / self.rate - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(min(ahead, 1.0))
        c.close()
        p.flush(30)


@dataclass
class EosReport:
    ok: bool
    problems: list[str]
    outputs: int
    committed: int
    aborted: int
    unknown: int

    def summary(self) -> str:
        head = (f"{self.outputs} output records; attempts committed {self.committed}, "
                f"aborted {self.aborted}, unknown {self.unknown}")
        return head + ("" if self.ok else "\n  " + "\n  ".join(self.problems[:20]))


def check_exactly_once(total: int, keys: int, output: dict[int, list[tuple[bytes, bytes]]],
                       attempts: Attempts) -> EosReport:
    problems = []
    seen: dict[int, int] = {}
    last_by_key: dict[bytes, int] = {}
    n = 0
    for part, records in sorted(output.items()):
        for key, value in records:
            n += 1
            src, _, att = value.partition(b"|")
            i, attempt = int(src), int(att)
            if attempt in attempts.aborted:
                problems.append(f"aborted read: input {i} of aborted attempt {attempt} "
                                f"visible in partition {part}")
            if key != b"k%d" % (i % keys):
                problems.append(f"input {i} came out under key {key!r}")
            seen[i] = seen.get(i, 0) + 1
            prev = last_by_key.get(key, -1)
            if i <= prev:
                problems.append(f"key {key!r}: input {i} after {prev} (partition {part})")
            last_by_key[key] = i
    dups = sorted(i for i, k in seen.items() if k > 1)
    lost = sorted(set(range(total)) - set(seen))
    if dups:
        problems.append(f"{len(dups)} inputs written more than once, first {dups[:10]}")
    if lost:
        problems.append(f"{len(lost)} inputs missing, first {lost[:10]}")
    return EosReport(not problems, problems, n, len(attempts.committed), len(attempts.aborted),
                     len(attempts.unknown))
