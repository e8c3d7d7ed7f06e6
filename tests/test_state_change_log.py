"""State-change lines and ISR counters from metadata records (no broker needed)."""
import logging
import uuid

from kbroker.kraft.image import MetadataImage
from kbroker.metrics.requests import RequestMetrics
from kbroker.state_change_log import StateChangeLog
from kbroker.wire.generated.fence_broker_record import FenceBrokerRecord
from kbroker.wire.generated.partition_change_record import PartitionChangeRecord
from kbroker.wire.generated.partition_record import PartitionRecord
from kbroker.wire.generated.topic_record import TopicRecord


def test_leader_isr_and_fencing_lines(caplog):
    image = MetadataImage()
    m = RequestMetrics()
    pub = StateChangeLog(image, node_id=1, metrics=m)
    tid = uuid.uuid4()

    def apply(rec):
        change = image.apply(rec)
        pub(rec, change, 0)

    with caplog.at_level(logging.DEBUG, logger="kbroker.state.change"):
        apply(TopicRecord(name="t", topic_id=tid))
        apply(PartitionRecord(partition_id=0, topic_id=tid, replicas=[1, 2, 3], isr=[1, 2, 3], leader=1,
                              leader_epoch=0, partition_epoch=0, removing_replicas=[], adding_replicas=[]))
        apply(PartitionChangeRecord(partition_id=0, topic_id=tid, isr=[1, 2], leader=-2))
        apply(PartitionChangeRecord(partition_id=0, topic_id=tid, isr=[1, 2, 3], leader=-2))
        apply(PartitionChangeRecord(partition_id=0, topic_id=tid, isr=[2, 3], leader=2))
        apply(FenceBrokerRecord(id=1, epoch=5))
    lines = [r.getMessage() for r in caplog.records if r.name == "kbroker.state.change"]
    assert lines == [
        "Partition t-0: leader 1, leader epoch 0, ISR [1,2,3] (new partition)",
        "Partition t-0: ISR shrink from [1,2,3] to [1,2]",
        "Partition t-0: ISR expand from [1,2] to [1,2,3]",
        "Partition t-0: leader 2, leader epoch 1, ISR [2,3] (was 1)",
        "Partition t-0: ISR shrink from [1,2,3] to [2,3]",
        "Broker 1 (epoch 5) fenced",
    ]
    # counted only while this node (1) led the partition
    assert (m.isr_shrinks, m.isr_expands) == (1, 1)
