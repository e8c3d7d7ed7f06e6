"""OffsetFetch with require_stable while a transactional offset commit is pending, end to
end: confluent-kafka's producer sends the offsets inside a transaction; a raw OffsetFetch v7
(kbroker's own codec) with require_stable gets UNSTABLE_OFFSET_COMMIT until the transaction
commits, and the committed offset afterwards; without require_stable it sees the last stable
value. confluent-kafka's consumer committed() (read_committed asks for stable offsets) waits
out the pending commit and returns the transaction's offset."""

from __future__ import annotations

import threading
import time

from confluent_kafka import Consumer, TopicPartition

from compat_tests.test_transactions import create_topic, txn_producer
from kbroker.groups.admin_client import AdminClient
from kbroker.wire.generated.offset_fetch_request import OffsetFetchRequest

UNSTABLE_OFFSET_COMMIT = 88


def fetch(bootstrap, group, topic, require_stable):
    with AdminClient(bootstrap) as a:
        T = OffsetFetchRequest.OffsetFetchRequestTopic
        r = a.call(OffsetFetchRequest(group_id=group, require_stable=require_stable,
                                      topics=[T(name=topic, partition_indexes=[0])]), 7,
                   a.coordinator(group))
        p = r.topics[0].partitions[0]
        return p.error_code, p.committed_offset


def test_require_stable_sees_unstable_offset_commit(broker):
    topic, group = "stable-in", "stable-app"
    create_topic(broker.bootstrap, topic)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                  "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition(topic, 0, 3)], asynchronous=False)
    p = txn_producer(broker.bootstrap, "stable-txn")
    p.begin_transaction()
    p.send_offsets_to_transaction([TopicPartition(topic, 0, 42)], c.consumer_group_metadata(), 30)
    assert fetch(broker.bootstrap, group, topic, True) == (UNSTABLE_OFFSET_COMMIT, -1)
    assert fetch(broker.bootstrap, group, topic, False) == (0, 3)

    rc = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                   "isolation.level": "read_committed", "enable.auto.commit": False})
    seen = {}

    def ask():
        seen["value"] = rc.committed([TopicPartition(topic, 0)], 20)[0].offset

    t = threading.Thread(target=ask)
    t.start()
    time.sleep(1.5)
    assert "value" not in seen  # still waiting on the unstable offset
    p.commit_transaction(30)
    t.join(25)
    assert seen.get("value") == 42
    assert fetch(broker.bootstrap, group, topic, True) == (0, 42)
    rc.close()
    c.close()
