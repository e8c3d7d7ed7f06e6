"""Transactions with real clients: commit/abort visibility under both isolation levels,
fencing of a zombie producer, aiokafka's transactional producer, and a broker killed with
SIGKILL mid-transaction and after a commit was acknowledged.

(The consume-transform-produce loop with send_offsets_to_transaction needs TxnOffsetCommit,
which lands with the group coordinator's transactional offsets.)"""

from __future__ import annotations

import asyncio
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.brokers import BrokerProcess

FAST_TIMERS = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"}


def create_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def read_all(bootstrap: str, topic: str, partitions: int, isolation: str, expect: int,
             timeout: float = 20.0) -> list[bytes]:
    """Every value of the topic under an isolation level (assign, no group commits)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}",
                  "isolation.level": isolation, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got: list[bytes] = []
        deadline = time.monotonic() + timeout
        idle_until = None
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                if len(got) >= expect:
                    idle_until = idle_until or time.monotonic() + 1.0  # anything extra?
                    if time.monotonic() >= idle_until:
                        break
                continue
            if m.error():
                continue
            got.append(m.value())
        return got
    finally:
        c.close()


def txn_producer(bootstrap: str, txn_id: str, **extra) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                  "linger.ms": 5, **extra})
    p.init_transactions(30)
    return p


@pytest.fixture
def broker(tmp_path):
    b = BrokerProcess(tmp_path / "broker", overrides=FAST_TIMERS).start()
    yield b
    b.stop()


def test_commit_and_abort_visibility(broker):
    topic = "txn-visibility"
    create_topic(broker.bootstrap, topic, 3)
    p = txn_producer(broker.bootstrap, "visibility")
    committed, aborted = set(), set()
    for round_ in range(20):
        p.begin_transaction()
        values = [f"r{round_}-{i}".encode() for i in range(50)]
        for i, v in enumerate(values):
            p.produce(topic, value=v, partition=i % 3)
        p.flush(30)  # the records are in the log before the outcome is decided
        if round_ % 4 == 3:
            p.abort_transaction(30)
            aborted.update(values)
        else:
            p.commit_transaction(30)
            committed.update(values)
    rc = read_all(broker.bootstrap, topic, 3, "read_committed", len(committed))
    assert len(rc) == len(set(rc)) and set(rc) == committed
    ru = read_all(broker.bootstrap, topic, 3, "read_uncommitted", len(committed) + len(aborted))
    assert set(ru) == committed | aborted


def test_open_transaction_blocks_read_committed_at_the_lso(broker):
    topic = "txn-lso"
    create_topic(broker.bootstrap, topic)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    p = txn_producer(broker.bootstrap, "lso")
    p.begin_transaction()
    p.produce(topic, value=b"pending")
    p.flush(30)
    plain.produce(topic, value=b"after")  # non-transactional, behind the open transaction
    plain.flush(30)
    assert read_all(broker.bootstrap, topic, 1, "read_committed", 0, timeout=3) == []
    assert sorted(read_all(broker.bootstrap, topic, 1, "read_uncommitted", 2)) == \
        [b"after", b"pending"]
    p.commit_transaction(30)
    assert sorted(read_all(broker.bootstrap, topic, 1, "read_committed", 2)) == \
        [b"after", b"pending"]


def test_second_producer_fences_the_first(broker):
    topic = "txn-fence"
    create_topic(broker.bootstrap, topic)
    old = txn_producer(broker.bootstrap, "fenced-id")
    old.begin_transaction()
    old.produce(topic, value=b"zombie")
    old.flush(30)
    new = txn_producer(broker.bootstrap, "fenced-id")  # aborts the zombie's transaction
    new.begin_transaction()
    new.produce(topic, value=b"fresh")
    new.commit_transaction(30)
    with pytest.raises(KafkaException) as exc:
        old.produce(topic, value=b"zombie-2")
        old.commit_transaction(30)
    assert exc.value.args[0].fatal() or "fenced" in str(exc.value).lower()
    assert read_all(broker.bootstrap, topic, 1, "read_committed", 1) == [b"fresh"]
    assert sorted(read_all(broker.bootstrap, topic, 1, "read_uncommitted", 2)) == \
        [b"fresh", b"zombie"]


def test_transaction_timeout_aborts(broker):
    topic = "txn-timeout"
    create_topic(broker.bootstrap, topic)
    p = txn_producer(broker.bootstrap, "slowpoke", **{"transaction.timeout.ms": 2000})
    p.begin_transaction()
    p.produce(topic, value=b"abandoned")
    p.flush(30)
    time.sleep(4)  # the coordinator aborts it (and fences the producer's epoch)
    assert read_all(broker.bootstrap, topic, 1, "read_committed", 0, timeout=3) == []
    with pytest.raises(KafkaException):
        p.commit_transaction(10)
    # the partition is readable again: the abort marker moved the LSO past the abandoned data
    q = Producer({"bootstrap.servers": broker.bootstrap})
    q.produce(topic, value=b"later")
    q.flush(30)
    assert read_all(broker.bootstrap, topic, 1, "read_committed", 1) == [b"later"]


def test_aiokafka_transactional_producer(broker):
    aiokafka = pytest.importorskip("aiokafka")
    topic = "txn-aiokafka"
    create_topic(broker.bootstrap, topic)

    async def run():
        p = aiokafka.AIOKafkaProducer(bootstrap_servers=broker.bootstrap,
                                      transactional_id="aio-txn")
        await p.start()
        try:
            async with p.transaction():
                for i in range(20):
                    await p.send(topic, f"ok{i}".encode())
            with pytest.raises(RuntimeError):
                async with p.transaction():
                    for i in range(7):
                        await p.send_and_wait(topic, f"bad{i}".encode())
                    raise RuntimeError("abort this one")
        finally:
            await p.stop()

        async def consume(isolation: str, n: int) -> list[bytes]:
            c = aiokafka.AIOKafkaConsumer(bootstrap_servers=broker.bootstrap,
                                          isolation_level=isolation,
                                          auto_offset_reset="earliest")
            await c.start()
            try:
                c.assign([aiokafka.TopicPartition(topic, 0)])
                got: list[bytes] = []
                deadline = time.monotonic() + 15
                while time.monotonic() < deadline:
                    batch = await c.getmany(timeout_ms=300)
                    got += [m.value for ms in batch.values() for m in ms]
                    if len(got) >= n and not batch:
                        break
                return got
            finally:
                await c.stop()

        rc = await consume("read_committed", 20)
        ru = await consume("read_uncommitted", 27)
        return rc, ru

    rc, ru = asyncio.run(run())
    assert rc == [f"ok{i}".encode() for i in range(20)]
    assert sorted(ru) == sorted([f"ok{i}".encode() for i in range(20)]
                                + [f"bad{i}".encode() for i in range(7)])


def test_sigkill_mid_transaction_and_after_commit(tmp_path):
    """Killed while one transaction is open and another's commit was acknowledged but its
    markers may not be written: after restart the committed one becomes visible (the
    coordinator completes PrepareCommit from its log), the open one is aborted when its
    producer is replaced, and read_committed never shows part of a transaction."""
    b = BrokerProcess(tmp_path / "b", overrides=FAST_TIMERS).start()
    try:
        topic = "txn-crash"
        create_topic(b.bootstrap, topic, 2)
        done = txn_producer(b.bootstrap, "crash-committed")
        done.begin_transaction()
        committed = [f"c{i}".encode() for i in range(300)]
        for i, v in enumerate(committed):
            done.produce(topic, value=v, partition=i % 2)
        done.commit_transaction(30)

        open_p = txn_producer(b.bootstrap, "crash-open")
        open_p.begin_transaction()
        partial = [f"o{i}".encode() for i in range(200)]
        for i, v in enumerate(partial):
            open_p.produce(topic, value=v, partition=i % 2)
        open_p.flush(30)

        b.kill()
        b.start()

        # Before anyone touches the open transaction, read_committed stops at its start.
        rc = read_all(b.bootstrap, topic, 2, "read_committed", len(committed))
        assert sorted(rc) == sorted(committed)
        # A new instance of the crashed application aborts the open transaction.
        replacement = txn_producer(b.bootstrap, "crash-open")
        replacement.begin_transaction()
        redo = [f"r{i}".encode() for i in range(200)]
        for i, v in enumerate(redo):
            replacement.produce(topic, value=v, partition=i % 2)
        replacement.commit_transaction(30)
        rc = read_all(b.bootstrap, topic, 2, "read_committed", len(committed) + len(redo))
        assert sorted(rc) == sorted(committed + redo)
        ru = read_all(b.bootstrap, topic, 2, "read_uncommitted",
                      len(committed) + len(redo) + len(partial))
        assert sorted(ru) == sorted(committed + redo + partial)
    finally:
        b.stop()


def test_consume_transform_produce_exactly_once(broker):
    """confluent-kafka: read_committed input, send_offsets_to_transaction, commit; every
    fifth transaction aborted and redone from the committed offsets. Downstream,
    read_committed sees each input exactly once; read_uncommitted also sees the aborted."""
    src, dst, n = "eos-in", "eos-out", 3000
    create_topic(broker.bootstrap, src, 2)
    create_topic(broker.bootstrap, dst, 2)
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(n):
        p.produce(src, value=f"{i}".encode(), partition=i % 2)
    p.flush(30)

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "eos-app",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([src])
    out = txn_producer(broker.bootstrap, "eos-app-0")
    processed = 0
    txns = 0
    aborted_values = 0
    deadline = time.monotonic() + 75
    while processed < n and time.monotonic() < deadline:
        msgs = consumer.consume(200, 1.0)
        msgs = [m for m in msgs if m.error() is None]
        if not msgs:
            continue
        out.begin_transaction()
        for m in msgs:
            out.produce(dst, value=b"out-" + m.value(), partition=m.partition())
        out.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                        consumer.consumer_group_metadata(), 30)
        txns += 1
        if txns % 5 == 0:
            out.flush(30)
            out.abort_transaction(30)
            aborted_values += len(msgs)
            # rewind to the committed offsets and process the batch again
            committed = consumer.committed(consumer.assignment(), 30)
            for tp in committed:
                consumer.seek(TopicPartition(tp.topic, tp.partition,
                                             tp.offset if tp.offset >= 0 else 0))
            continue
        out.commit_transaction(30)
        processed += len(msgs)
    consumer.close()
    assert processed == n, f"processed {processed} of {n}"
    assert aborted_values > 0
    rc = read_all(broker.bootstrap, dst, 2, "read_committed", n)
    assert len(rc) == n and set(rc) == {f"out-{i}".encode() for i in range(n)}
    ru = read_all(broker.bootstrap, dst, 2, "read_uncommitted", n + aborted_values)
    assert len(ru) == n + aborted_values
