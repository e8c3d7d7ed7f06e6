"""Consumer groups with real clients against a broker process (issue 5): classic rebalances
with every assignor, takeover after a member leaves, groups of every client (Java with both
group protocols), offsets that survive SIGKILL, and `kbroker groups` resetting offsets."""
from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from datetime import datetime, timezone

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.brokers import REPO, BrokerProcess
from compat_tests.clients import java as java_client

pytestmark = pytest.mark.timeout(60)     # every group test is bounded (issue 5)

SESSION_MS = 6000
OVERRIDES = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.session.timeout.ms": str(SESSION_MS),
    "offsets.topic.num.partitions": "5",
}


@pytest.fixture(scope="module")
def gbroker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("groups"), overrides=OVERRIDES).start()
    yield b
    b.stop()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})     # must outlive the future
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


def produce(bootstrap: str, topic: str, n: int, partitions: int, start: int = 0, timestamp: int | None = None):
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, start + n):
        p.produce(topic, key=str(i).encode(), value=str(i).encode(), partition=i % partitions,
                  **({"timestamp": timestamp} if timestamp is not None else {}))
    assert p.flush(30) == 0


def consumer(bootstrap: str, group: str, **conf) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, "session.timeout.ms": SESSION_MS,
                     "heartbeat.interval.ms": 500, **conf})


def poll_round(consumers, seen: dict, timeout=0.2) -> None:
    """One poll of every consumer; record what it got and commit it before polling again."""
    for c in consumers:
        msgs = c.consume(100, timeout)
        got = [m for m in msgs if not m.error()]
        for m in msgs:
            if m.error() and m.error().code() != -191:     # _PARTITION_EOF
                raise KafkaException(m.error())
        for m in got:
            seen.setdefault(id(c), []).append((m.partition(), m.offset()))
        if got:
            c.commit(asynchronous=False)


def partitions_of(c: Consumer) -> set[int]:
    return {tp.partition for tp in c.assignment()}


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    c = consumer(bootstrap, group)
    try:
        return {tp.partition: tp.offset for tp in c.committed([TopicPartition(topic, p) for p in range(partitions)], 20)}
    finally:
        c.close()


@pytest.mark.parametrize("strategy", ["range", "roundrobin", "cooperative-sticky"])
def test_three_consumers_split_six_partitions_and_take_over(gbroker, strategy):
    bs = gbroker.bootstrap
    topic, group = unique("split"), unique("g")
    create_topic(bs, topic, 6)
    cs = [consumer(bs, group, **{"partition.assignment.strategy": strategy}) for _ in range(3)]
    try:
        for c in cs:
            c.subscribe([topic])
        seen: dict = {}
        deadline = time.monotonic() + 30
        while sorted(len(partitions_of(c)) for c in cs) != [2, 2, 2]:
            assert time.monotonic() < deadline, [partitions_of(c) for c in cs]
            poll_round(cs, seen)
        owned = [partitions_of(c) for c in cs]
        assert set().union(*owned) == set(range(6))

        produce(bs, topic, 300, 6)
        deadline = time.monotonic() + 30
        while sum(len(v) for v in seen.values()) < 300:
            assert time.monotonic() < deadline
            poll_round(cs, seen)
        everything = [r for v in seen.values() for r in v]
        assert len(everything) == len(set(everything)) == 300       # exactly once
        for c in cs:                                                  # each read its own two
            assert {p for p, _ in seen.get(id(c), [])} <= partitions_of(c)

        # One member leaves; the other two take everything over and lose nothing.
        leaving = cs.pop()
        leaving.close()
        t0 = time.monotonic()
        produce(bs, topic, 300, 6, start=300)
        while sum(len(v) for v in seen.values()) < 600:
            assert time.monotonic() - t0 < SESSION_MS / 1000 + 15, "survivors did not take over in time"
            poll_round(cs, seen)
        everything = [r for v in seen.values() for r in v]
        assert len(everything) == len(set(everything)) == 600
        # The data can all arrive while a rebalance is still settling (eager protocols revoke
        # everything first), so wait for the final 3/3 split rather than sampling it once.
        while sorted(len(partitions_of(c)) for c in cs) != [3, 3]:
            assert time.monotonic() - t0 < SESSION_MS / 1000 + 30, [partitions_of(c) for c in cs]
            poll_round(cs, seen)
        assert len([r for v in seen.values() for r in v]) == 600      # nothing re-delivered
        assert committed(bs, group, topic, 6) == {p: 100 for p in range(6)}
    finally:
        for c in cs:
            c.close()


def _kafka_python_group(bs, topic, group, count):
    from kafka import KafkaConsumer
    c = KafkaConsumer(topic, bootstrap_servers=bs, group_id=group, auto_offset_reset="earliest",
                      enable_auto_commit=False, session_timeout_ms=SESSION_MS, heartbeat_interval_ms=500)
    out = []
    try:
        deadline = time.monotonic() + 40
        while len(out) < count and time.monotonic() < deadline:
            batch = c.poll(timeout_ms=500)
            for msgs in batch.values():
                out += [(m.partition, m.offset) for m in msgs]
            if batch:
                c.commit()
    finally:
        c.close()
    return out


def _aiokafka_group(bs, topic, group, count):
    from aiokafka import AIOKafkaConsumer

    async def run():
        c = AIOKafkaConsumer(topic, bootstrap_servers=bs, group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False, session_timeout_ms=SESSION_MS, heartbeat_interval_ms=500)
        await c.start()
        out = []
        try:
            deadline = time.monotonic() + 40
            while len(out) < count and time.monotonic() < deadline:
                batch = await c.getmany(timeout_ms=500)
                for msgs in batch.values():
                    out += [(m.partition, m.offset) for m in msgs]
                if batch:
                    await c.commit()
        finally:
            await c.stop()
        return out
    return asyncio.run(run())


def _java_group(version, protocol):
    def run(bs, topic, group, count):
        if not java_client.available(version):
            pytest.fail("Java client jars missing: run scripts/fetch-java-clients.sh")
        j = java_client.JavaDriver(bs, version)
        out = j.run("group-consume", topic, group, str(count), f"group.protocol={protocol}",
                    "session.timeout.ms=6000" if protocol == "classic" else "client.id=kip848", timeout=50)
        return [(c.partition, c.offset) for c in java_client.parse_consumed(out)]
    return run


GROUP_CLIENTS = {
    "kafka-python": _kafka_python_group,
    "aiokafka": _aiokafka_group,
    "java-4.3.0-classic": _java_group("4.3.0", "classic"),
    "java-4.3.0-consumer": _java_group("4.3.0", "consumer"),
    "java-3.9.0-consumer": _java_group("3.9.0", "consumer"),
}


@pytest.fixture(scope="module")
def shared_topic(gbroker):
    topic = unique("every-client")
    create_topic(gbroker.bootstrap, topic, 4)
    produce(gbroker.bootstrap, topic, 200, 4)
    return topic


@pytest.mark.parametrize("client", list(GROUP_CLIENTS))
def test_each_client_group_reads_everything_once(gbroker, shared_topic, client):
    group = unique(client)
    got = GROUP_CLIENTS[client](gbroker.bootstrap, shared_topic, group, 200)
    assert len(got) == len(set(got)) == 200
    assert committed(gbroker.bootstrap, group, shared_topic, 4) == {p: 50 for p in range(4)}


def test_committed_offsets_survive_sigkill(tmp_path):
    b = BrokerProcess(tmp_path / "b", overrides=OVERRIDES).start()
    try:
        bs = b.bootstrap
        topic, group = unique("crash"), unique("g")
        create_topic(bs, topic, 3)
        produce(bs, topic, 90, 3)
        c = consumer(bs, group)
        c.commit(offsets=[TopicPartition(topic, 0, 7, "seven"), TopicPartition(topic, 1, 8),
                          TopicPartition(topic, 2, 30)], asynchronous=False)
        c.close()
        # Classic members commit too: a stable group with a generation must survive as well.
        g2 = unique("g2")
        c = consumer(bs, g2)
        c.subscribe([topic])
        seen: dict = {}
        deadline = time.monotonic() + 20
        while sum(len(v) for v in seen.values()) < 90:
            assert time.monotonic() < deadline
            poll_round([c], seen)
        b.kill()                    # while g2 is a stable group with a live member
        c.close()
        b.start()
        assert committed(bs, group, topic, 3) == {0: 7, 1: 8, 2: 30}
        assert committed(bs, g2, topic, 3) == {0: 30, 1: 30, 2: 30}
        c2 = consumer(bs, group)
        meta = c2.committed([TopicPartition(topic, 0)], 20)[0].metadata
        c2.close()
        assert meta == "seven"
        # the group resumes exactly where it committed
        c3 = consumer(bs, group)
        c3.subscribe([topic])
        got: dict = {}
        deadline = time.monotonic() + 30
        while sum(len(v) for v in got.values()) < (30 - 7) + (30 - 8):
            assert time.monotonic() < deadline
            poll_round([c3], got)
        c3.close()
        offs = [r for v in got.values() for r in v]
        assert min(o for p, o in offs if p == 0) == 7 and min(o for p, o in offs if p == 1) == 8
        assert not [1 for p, _ in offs if p == 2]
    finally:
        b.kill()


def kbroker_groups(bs: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kbroker", "groups", *args, "--bootstrap-server", bs],
                          capture_output=True, text=True, timeout=60, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


def test_reset_offsets_to_datetime_rereads_from_there(gbroker):
    bs = gbroker.bootstrap
    topic, group = unique("reset"), unique("g")
    create_topic(bs, topic, 2)
    now = int(time.time() * 1000)
    old, new = now - 3_600_000, now - 60_000
    produce(bs, topic, 40, 2, timestamp=old)
    produce(bs, topic, 20, 2, start=40, timestamp=new)
    c = consumer(bs, group)
    c.subscribe([topic])
    seen: dict = {}
    deadline = time.monotonic() + 30
    while sum(len(v) for v in seen.values()) < 60:
        assert time.monotonic() < deadline
        poll_round([c], seen)

    out = kbroker_groups(bs, "describe", group)
    assert out.returncode == 0, out.stderr
    assert "LAG" in out.stdout and topic in out.stdout
    out = kbroker_groups(bs, "describe", group, "--state")
    assert out.returncode == 0 and "Stable" in out.stdout, out.stderr
    listed = kbroker_groups(bs, "list")
    assert group in listed.stdout and "classic" in listed.stdout
    # an active group cannot be reset
    refused = kbroker_groups(bs, "reset-offsets", group, "--topic", topic, "--to-earliest", "--execute")
    assert refused.returncode == 1 and "inactive" in refused.stderr
    assert kbroker_groups(bs, "delete", group).returncode == 1       # NON_EMPTY_GROUP
    c.close()

    iso = datetime.fromtimestamp((new - 1000) / 1000, tz=timezone.utc).isoformat()
    dry = kbroker_groups(bs, "reset-offsets", group, "--topic", topic, "--to-datetime", iso)
    assert dry.returncode == 0 and "dry run" in dry.stdout
    assert committed(bs, group, topic, 2) == {0: 30, 1: 30}          # untouched by the dry run
    done = kbroker_groups(bs, "reset-offsets", group, "--topic", topic, "--to-datetime", iso, "--execute")
    assert done.returncode == 0, done.stderr
    assert committed(bs, group, topic, 2) == {0: 20, 1: 20}

    c = consumer(bs, group)
    c.subscribe([topic])
    again: dict = {}
    deadline = time.monotonic() + 30
    while sum(len(v) for v in again.values()) < 20:
        assert time.monotonic() < deadline
        poll_round([c], again)
    c.close()
    reread = sorted(r for v in again.values() for r in v)
    assert reread == sorted((p, o) for p in (0, 1) for o in range(20, 30))

    shifted = kbroker_groups(bs, "reset-offsets", group, "--topic", f"{topic}:0", "--shift-by", "-5", "--execute")
    assert shifted.returncode == 0, shifted.stderr
    assert committed(bs, group, topic, 2) == {0: 25, 1: 30}
    assert kbroker_groups(bs, "delete", group).returncode == 0
    assert group not in kbroker_groups(bs, "list").stdout


def test_admin_client_lists_describes_and_refuses_deleting_active_group(gbroker):
    bs = gbroker.bootstrap
    topic, group = unique("admin"), unique("g")
    create_topic(bs, topic, 2)
    c = consumer(bs, group)
    c.subscribe([topic])
    deadline = time.monotonic() + 20
    while len(partitions_of(c)) < 2:
        assert time.monotonic() < deadline
        c.poll(0.2)
    admin = AdminClient({"bootstrap.servers": bs})
    listed = admin.list_consumer_groups().result(20)
    assert group in {g.group_id for g in listed.valid}
    desc = admin.describe_consumer_groups([group])[group].result(20)
    assert len(desc.members) == 1 and {tp.partition for tp in desc.members[0].assignment.topic_partitions} == {0, 1}
    with pytest.raises(KafkaException) as e:
        admin.delete_consumer_groups([group])[group].result(20)
    assert "NON_EMPTY_GROUP" in str(e.value) or "not empty" in str(e.value).lower()
    c.close()
    admin.delete_consumer_groups([group])[group].result(20)


def test_static_member_restart_keeps_assignment_without_rebalance(gbroker):
    from kbroker.groups.admin_client import AdminClient as KAdmin
    bs = gbroker.bootstrap
    topic, group = unique("static"), unique("g")
    create_topic(bs, topic, 2)
    revoked = []
    a = consumer(bs, group, **{"group.instance.id": "i-1"})
    a.subscribe([topic], on_revoke=lambda c, parts: revoked.append([p.partition for p in parts]))
    b = consumer(bs, group, **{"group.instance.id": "i-2"})
    b.subscribe([topic])
    seen: dict = {}
    deadline = time.monotonic() + 30
    while sorted(len(partitions_of(c)) for c in (a, b)) != [1, 1]:
        assert time.monotonic() < deadline
        poll_round([a, b], seen)
    b_parts = partitions_of(b)
    with KAdmin(bs) as k:
        before = {m.group_instance_id: m.member_id for m in k.describe_group(group).members}
    revoked.clear()
    b.close()                 # a static member leaves no LeaveGroup behind (KIP-345)
    b2 = consumer(bs, group, **{"group.instance.id": "i-2"})
    b2.subscribe([topic])
    deadline = time.monotonic() + 20
    while partitions_of(b2) != b_parts:
        assert time.monotonic() < deadline
        poll_round([a, b2], seen)
    for _ in range(10):
        poll_round([a, b2], seen)
    with KAdmin(bs) as k:
        after = {m.group_instance_id: m.member_id for m in k.describe_group(group).members}
    assert set(after) == {"i-1", "i-2"} and after["i-1"] == before["i-1"] and after["i-2"] != before["i-2"]
    assert revoked == []      # i-1 never went through a rebalance
    a.close()
    b2.close()
