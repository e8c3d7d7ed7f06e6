"""Exactly-once across broker crashes: a confluent-kafka consume-transform-produce loop
(read_committed input, send_offsets_to_transaction, commit) while the broker is killed with
SIGKILL twice mid-run and restarted on the same data dir and port.

The loop recovers as a real application does: an abortable error aborts the transaction, a
fatal one (fenced, or a state the client gives up on) replaces the producer, and either way
the consumer goes back to the group's committed offsets. At the end the read_committed
output holds every input exactly once, every committed transaction whole, and a
read_committed reader that ran through the crashes never saw an aborted or duplicated
record.

Two things here are the client's, not the broker's (librdkafka 2.10+, confluent-kafka 2.16):

* When every known broker is down (a one-node cluster being killed) librdkafka starts a KIP-1102
  re-bootstrap and decommissions the broker it learned ("Decommissioning 1 broker(s):
  re-bootstrap"), but the producer's coordinator cache keeps that handle as the group's
  coordinator: the next send_offsets_to_transaction gets its AddOffsetsToTxn answered, then
  waits for the dead handle to come up ("127.0.0.1:PORT/1: Handle is terminating in state
  TRY_CONNECT: 3 refcnts") and never sends FindCoordinator(group) or TxnOffsetCommit, whatever
  its timeout. That is confluentinc/librdkafka#5511 (fix proposed in #5512). The application's
  watchdog gives up on that producer after the API timeout and starts a new one; the new one's
  InitProducerId makes the broker abort the abandoned transaction (fencing the old producer).
* consume position() is the offset after the last record the application got, so after
  seek() to the committed offsets it is -1001 (OFFSET_INVALID) until a record arrives: a
  partition already consumed to its end stays -1001 while the consumer keeps fetching it at
  its end offset. Progress is therefore tracked per partition from the offsets committed.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from compat_tests.brokers import BrokerProcess
from compat_tests.test_transactions import FAST_TIMERS, create_topic, read_all

N = 2000
SRC, DST = "crash-eos-in", "crash-eos-out"
GROUP, TXN_ID = "crash-eos-app", "crash-eos-app-0"
CLIENT_TIMEOUTS = {"socket.timeout.ms": 5000, "reconnect.backoff.max.ms": 300,
                   "retry.backoff.max.ms": 300}


T0 = [time.monotonic()]


def log(msg: str) -> None:
    print(f"{time.monotonic() - T0[0]:7.2f} {msg}", flush=True)


def new_producer(bootstrap: str) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": TXN_ID,
                  "transaction.timeout.ms": 10_000, "message.timeout.ms": 10_000,
                  "linger.ms": 5, **CLIENT_TIMEOUTS})
    deadline = time.monotonic() + 40
    while True:
        try:
            p.init_transactions(10)
            return p
        except KafkaException as e:
            if time.monotonic() > deadline or e.args[0].fatal():
                raise
            time.sleep(0.3)


class ClientHang(Exception):
    pass


def call_with_timeout(fn, timeout: float):
    box: dict = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as e:  # re-raised in the caller
            box["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise ClientHang()
    if "error" in box:
        raise box["error"]
    return box.get("value")


class Killer:
    """SIGKILLs the broker from inside a transaction of the application once it has
    committed `at[0]` inputs, and restarts it 0.5 s later from a thread of its own.

    The application calls `maybe_kill` after producing a transaction's records and before
    sending its offsets, so every crash lands mid-transaction however fast the application
    runs (a watcher thread polling progress could miss the whole run: 2,000 records commit
    in well under a second on a quiet machine). A further kill waits until the application
    has committed something after the restart, so each crash hits a recovered app."""

    def __init__(self, broker: BrokerProcess, at: list[int]):
        self.broker, self.at = broker, list(at)
        self.kills = 0
        self.error: BaseException | None = None
        self._killed_at = -1
        self._restart: threading.Thread | None = None

    def maybe_kill(self, done: int) -> None:
        if not self.at or done < self.at[0] or done <= self._killed_at:
            return
        if self._restart is not None and self._restart.is_alive():
            return
        self.at.pop(0)
        self.broker.kill()
        self.kills += 1
        self._killed_at = done
        log(f"broker killed at {done} committed")
        self._restart = threading.Thread(target=self._restart_later, daemon=True)
        self._restart.start()

    def _restart_later(self) -> None:
        try:
            time.sleep(0.5)
            self.broker.start()
            log("broker restarted")
        except BaseException as e:  # surfaced by the test
            self.error = e

    def join(self, timeout: float) -> None:
        if self._restart is not None:
            self._restart.join(timeout)


class Watcher(threading.Thread):
    """A read_committed reader of the output running through the crashes."""

    def __init__(self, bootstrap: str):
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.seen: dict[int, list[bytes]] = defaultdict(list)
        self.stop = threading.Event()

    def run(self):
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "crash-eos-watch",
                      "isolation.level": "read_committed", "enable.auto.commit": False,
                      **CLIENT_TIMEOUTS})
        c.assign([TopicPartition(DST, p, 0) for p in range(2)])
        try:
            while not self.stop.is_set():
                m = c.poll(0.2)
                if m is not None and m.error() is None:
                    self.seen[m.partition()].append(m.value())
        finally:
            c.close()


@pytest.mark.timeout(90)
def test_consume_transform_produce_survives_sigkill(tmp_path):
    b = BrokerProcess(tmp_path / "b", overrides=FAST_TIMERS).start()
    killer = watcher = None
    try:
        create_topic(b.bootstrap, SRC, 2)
        create_topic(b.bootstrap, DST, 2)
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5})
        for i in range(N):
            p.produce(SRC, value=f"{i}".encode(), partition=i % 2)
        assert p.flush(30) == 0

        consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": GROUP,
                             "isolation.level": "read_committed",
                             "enable.auto.commit": False, "auto.offset.reset": "earliest",
                             "session.timeout.ms": 10_000, **CLIENT_TIMEOUTS})
        consumer.subscribe([SRC])
        out = new_producer(b.bootstrap)
        committed: dict[int, int] = {}   # input partition -> offset the group committed
        committed_total = [0]
        killer = Killer(b, [N // 5, N // 2])
        watcher = Watcher(b.bootstrap)
        watcher.start()
        stats = Counter()
        txn_no = 0
        need_rewind = False
        hung: list[Producer] = []

        def rewind():
            """Back to the group's committed offsets (waits out unstable ones)."""
            parts = consumer.assignment()
            if not parts:
                return True
            try:
                for tp in consumer.committed(parts, 10):
                    consumer.seek(TopicPartition(tp.topic, tp.partition,
                                                 tp.offset if tp.offset >= 0 else 0))
                    if tp.offset >= 0:
                        committed[tp.partition] = tp.offset
                committed_total[0] = sum(committed.values())
                return True
            except KafkaException as e:
                stats[f"rewind: {e.args[0].name()}"] += 1
                log(f"rewind failed: {e.args[0]}")
                return False

        deadline = time.monotonic() + 60
        while committed_total[0] < N and time.monotonic() < deadline:
            if need_rewind:
                if not rewind():
                    time.sleep(0.2)
                    continue
                need_rewind = False
            msgs = [m for m in consumer.consume(50, 0.5) if m.error() is None]
            if not msgs:
                idle_polls = stats["idle"] = stats["idle"] + 1
                if idle_polls % 10 == 0:
                    log("idle; assignment " + " ".join(
                        f"{tp.partition}@{tp.offset}"
                        for tp in consumer.position(consumer.assignment())))
                continue
            txn_no += 1
            tag = f"{txn_no}/{len(msgs)}".encode()
            try:
                out.begin_transaction()
                for m in msgs:
                    out.produce(DST, value=b"out-" + m.value(), partition=m.partition(),
                                headers=[("txn", tag)])
                killer.maybe_kill(committed_total[0])
                # only partitions this batch advanced (position() is -1001 for one with
                # nothing consumed since a seek; librdkafka would drop it anyway)
                positions = [tp for tp in consumer.position(consumer.assignment())
                             if tp.offset >= 0]
                # librdkafka 2.10+ can wait forever here after a broker restart (#5511: the
                # group coordinator lookup never goes out; the API timeout is not honoured):
                # the application's watchdog gives up on that producer and starts a new one
                call_with_timeout(lambda: out.send_offsets_to_transaction(
                    positions, consumer.consumer_group_metadata(), 5), 8)
                while True:
                    try:
                        out.commit_transaction(15)
                        break
                    except KafkaException as e:
                        if not e.args[0].retriable() or time.monotonic() > deadline:
                            raise
                        log(f"commit retry: {e.args[0]}")
                        stats["commit-retried"] += 1
                log(f"txn {txn_no} committed {len(msgs)}: "
                    + " ".join(f"{tp.partition}@{tp.offset}" for tp in positions))
                committed.update((tp.partition, tp.offset) for tp in positions)
                committed_total[0] = sum(committed.values())
                stats["committed"] += 1
            except ClientHang:
                log(f"txn {txn_no}: send_offsets_to_transaction hung; new producer")
                stats["client-hang"] += 1
                need_rewind = True
                hung.append(out)
                out = new_producer(b.bootstrap)
                continue
            except KafkaException as e:
                err: KafkaError = e.args[0]
                stats[f"error: {err.name()}"] += 1
                log(f"txn {txn_no} failed: {err} abortable={err.txn_requires_abort()} "
                    f"fatal={err.fatal()}")
                need_rewind = True
                if err.txn_requires_abort():
                    stats["aborted"] += 1
                    try:
                        out.abort_transaction(15)
                        continue
                    except KafkaException as e2:
                        stats[f"abort failed: {e2.args[0].name()}"] += 1
                        log(f"abort failed: {e2.args[0]}")
                stats["new-producer"] += 1
                try:
                    out.flush(0)
                except Exception:
                    pass
                out = new_producer(b.bootstrap)
        killer.join(30)
        consumer.close()
        assert killer.error is None, killer.error
        assert killer.kills == 2, (killer.kills, stats)
        assert committed_total[0] == N, (committed_total[0], stats)

        rc = read_all(b.bootstrap, DST, 2, "read_committed", N, timeout=30)
        counts = Counter(rc)
        assert {v for v, c in counts.items() if c > 1} == set(), stats
        assert set(rc) == {f"out-{i}".encode() for i in range(N)}, stats

        # every committed transaction is whole; a reader through the crashes never saw an
        # aborted or duplicated record: what it saw per partition is a prefix of the output
        final = _read_with_headers(b.bootstrap)
        per_txn = Counter(tag for _, _, tag in final)
        for tag, n in per_txn.items():
            assert n == int(tag.split(b"/")[1]), (tag, n)
        watcher.stop.set()
        watcher.join(30)
        by_part = defaultdict(list)
        for part, value, _ in final:
            by_part[part].append(value)
        for part, seen in watcher.seen.items():
            assert seen == by_part[part][:len(seen)], part
        assert sum(len(s) for s in watcher.seen.values()) > 0
    finally:
        if watcher is not None:
            watcher.stop.set()
        b.stop()


def _read_with_headers(bootstrap: str) -> list[tuple[int, bytes, bytes]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "crash-eos-final",
                  "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(DST, p, 0) for p in range(2)])
        got, idle = [], 0
        while idle < 6 or len(got) < N:
            m = c.poll(0.5)
            if m is None:
                idle += 1
                if idle > 40:
                    break
                continue
            if m.error() is None:
                idle = 0
                got.append((m.partition(), m.value(), dict(m.headers())["txn"]))
        return got
    finally:
        c.close()
