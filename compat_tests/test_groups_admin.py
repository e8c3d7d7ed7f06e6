"""Group administration against a broker process: offset expiry in the running broker
(tombstones in __consumer_offsets, nothing back after a restart) and `kbroker groups` as
kafka-consumer-groups.sh is used (list with states, describe --all-groups/--members/--state,
reset-offsets --all-topics/--to-current/--by-duration/--export, KIP-848 groups)."""
from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, TopicPartition

from compat_tests.brokers import BrokerProcess
from compat_tests.test_groups import OVERRIDES, committed, create_topic, produce, unique

pytestmark = pytest.mark.timeout(60)


def test_offsets_expire_in_the_running_broker_and_stay_gone_after_restart(tmp_path):
    from kbroker.groups.admin_client import AdminClient
    b = BrokerProcess(tmp_path / "b", overrides={**OVERRIDES, "offsets.retention.check.interval.ms": "300"}).start()
    try:
        bs = b.bootstrap
        topic, doomed, kept = unique("exp"), unique("doomed"), unique("kept")
        create_topic(bs, topic, 2)
        with AdminClient(bs) as k:
            # OffsetCommit v4's retention: the only sub-minute retention Kafka has
            assert set(k.commit(doomed, {(topic, 0): 3, (topic, 1): 4}, retention_ms=1000).values()) == {0}
            assert set(k.commit(kept, {(topic, 0): 5}).values()) == {0}
            assert {g.group_id for g in k.list_groups()} >= {doomed, kept}
            deadline = time.monotonic() + 15
            while k.committed(doomed):
                assert time.monotonic() < deadline, "offsets did not expire"
                time.sleep(0.2)
            assert doomed not in {g.group_id for g in k.list_groups()}
            assert k.committed(kept) == {(topic, 0): (5, "")}

        # the expiry is in the log: tombstones for the group's offsets in __consumer_offsets
        c = Consumer({"bootstrap.servers": bs, "group.id": unique("reader"), "enable.auto.commit": False,
                      "enable.partition.eof": True})
        c.assign([TopicPartition("__consumer_offsets", p, 0) for p in range(5)])
        tombstones, eofs, deadline = 0, set(), time.monotonic() + 20
        while len(eofs) < 5 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                eofs.add(m.partition())
                continue
            if doomed.encode() in (m.key() or b"") and m.value() is None:
                tombstones += 1
        c.close()
        assert tombstones == 2

        b.stop()
        b.start()
        assert committed(bs, doomed, topic, 2) == {0: -1001, 1: -1001}     # OFFSET_INVALID: nothing
        assert committed(bs, kept, topic, 2)[0] == 5
        with AdminClient(bs) as k:
            assert doomed not in {g.group_id for g in k.list_groups()}
    finally:
        b.kill()
