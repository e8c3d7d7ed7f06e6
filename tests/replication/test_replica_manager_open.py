"""A partition whose files are still being created in the log manager's admin thread when a
PartitionChangeRecord for it arrives (an ISR shrink right after CreateTopics) is installed
once, with its log: the change must not add a second install that deletes the log."""
import asyncio
import uuid

from kbroker.broker.replica_manager import ReplicaManager
from kbroker.kraft.image import MetadataImage
from kbroker.log.config import LogConfig
from kbroker.log.log_manager import LogManager
from kbroker.wire.generated.partition_change_record import PartitionChangeRecord
from kbroker.wire.generated.partition_record import PartitionRecord
from kbroker.wire.generated.register_broker_record import RegisterBrokerRecord
from kbroker.wire.generated.topic_record import TopicRecord
from kbroker.slices import run_to_end


def test_isr_change_while_the_log_is_being_created_keeps_the_log(tmp_path):
    async def main():
        lm = LogManager([str(tmp_path)], LogConfig.from_props({"file.delete.delay.ms": "0"}))
        lm.start_background_io()
        image = MetadataImage()
        rm = ReplicaManager(1, lm, image, lambda topic: LogConfig(), lambda: 0)
        tid = uuid.uuid4()

        def apply(rec):
            more = rm.on_metadata_record(rec, image.apply(rec), 0)
            if more is not None:      # a publisher may hand back steps (the loader runs them)
                run_to_end(more)

        for b in (1, 2, 3):
            image.apply(RegisterBrokerRecord(broker_id=b, broker_epoch=b, fenced=False))
        apply(TopicRecord(name="t", topic_id=tid))
        apply(PartitionRecord(partition_id=0, topic_id=tid, replicas=[1, 2, 3], isr=[1, 2, 3], leader=1,
                              leader_epoch=0, partition_epoch=0, removing_replicas=[], adding_replicas=[]))
        opening = lm.opening("t", 0)
        assert opening is not None and rm.get("t", 0) is None     # still in the admin thread
        apply(PartitionChangeRecord(partition_id=0, topic_id=tid, isr=[1, 3], leader=-2))
        await opening
        for _ in range(20):            # the done callbacks and a deletion's rename
            await asyncio.sleep(0.01)
        part = rm.get("t", 0)
        assert part is not None and lm.get("t", 0) is part.log
        assert sorted(part.isr) == [1, 3] and rm.is_leader(part)
        lm.shutdown()
    asyncio.run(main())
    assert (tmp_path / "t-0").is_dir()
