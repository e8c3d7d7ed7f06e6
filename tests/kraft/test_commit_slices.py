"""A 1,000-partition topic is committed, published and deleted in slices (issue 15: nothing
holds the event loop for long), and readers still see each committed batch whole.

A real combined node in this process (Raft, controller and broker over loopback sockets). A
callback rescheduled with ``call_soon`` runs once per loop iteration and looks at the broker:
it must see the loop run while the topic's records are being published (the image has the
topic, the publishers have not heard of all its partitions yet) and while its logs are
being deleted, and never an image holding part of the topic. The slice is set to zero, so
the outcome does not depend on how fast this machine is."""

import asyncio

import pytest

from kbroker.config import BrokerConfig
from kbroker.kraft import quorum_runtime
from kbroker.net.client import KafkaClient
from kbroker.server import KafkaServer
from kbroker.wire import registry as wire

pytestmark = pytest.mark.timeout(120)

N = 1000
SAMPLE = [*range(0, N, 50), N - 1]     # partitions the per-iteration check looks at


def test_a_thousand_partition_topic_is_created_and_deleted_in_slices(tmp_path, monkeypatch):
    monkeypatch.setattr(quorum_runtime, "APPLY_SLICE_S", 0.0)
    monkeypatch.setattr(quorum_runtime, "INLINE_SLICE_S", 0.0)

    async def main():
        cfg = BrokerConfig.load(None, [f"log.dirs={tmp_path / 'data'}",
                                       "listeners=PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
                                       "controller.listener.names=CONTROLLER"])
        server = KafkaServer(cfg)
        await server.start()
        port = next(lst.bound_port for lst in server.listeners if lst.name == "PLAINTEXT")
        client = KafkaClient("127.0.0.1", port)
        loop = asyncio.get_running_loop()
        seen = {"partial_image": 0, "installing": 0, "deleting": 0, "ticks": 0}
        stop = [False]

        published = [0]               # PartitionRecords of "big" handed to the publishers

        def count(rec, change, offset) -> None:
            if type(rec).__name__ == "PartitionRecord" and server.image.topics_by_id.get(rec.topic_id) \
                    and server.image.topics_by_id[rec.topic_id].name == "big":
                published[0] += 1
        server.loader.publishers.append(count)

        def tick() -> None:
            seen["ticks"] += 1
            t = server.image.topic("big")
            if t is not None and len(t.partitions) != N:
                seen["partial_image"] += 1
            if t is not None and published[0] < N:
                seen["installing"] += 1
            if t is None and "big" not in server.replicas.topics and any(
                    server.log_manager.get("big", i) is not None for i in SAMPLE):
                seen["deleting"] += 1
            if not stop[0]:
                loop.call_soon(tick)

        try:
            loop.call_soon(tick)
            Create = wire.REQUESTS[19]
            resp = await client.send(Create(timeout_ms=60_000, topics=[Create.CreatableTopic(
                name="big", num_partitions=N, replication_factor=1)]))
            assert resp.topics[0].error_code == 0
            assert len(server.image.topic("big").partitions) == N
            # CreateTopics waits for this node's replicas 5 s at most (wait_for_image): on a
            # loaded machine the last ones may still be coming
            end = loop.time() + 30
            while not all(server.replicas.get("big", i) is not None for i in range(N)):
                assert loop.time() < end, "the created topic's replicas are not all there"
                await asyncio.sleep(0.01)
            Delete = wire.REQUESTS[20]
            resp = await client.send(Delete(timeout_ms=60_000, topic_names=["big"],
                                            topics=[Delete.DeleteTopicState(name="big")]))
            assert resp.responses[0].error_code == 0
            end = loop.time() + 30
            while any(server.log_manager.get("big", i) is not None for i in range(N)):
                assert loop.time() < end, "the deleted topic's logs are still there"
                await asyncio.sleep(0.01)
            stop[0] = True
            assert seen["partial_image"] == 0, seen          # a batch is applied whole
            assert seen["installing"] > 10, seen              # the loop ran while they were published
            assert seen["deleting"] > 2, seen                 # and while the logs were deleted
        finally:
            stop[0] = True
            await client.close()
            await server.shutdown(timeout=10)
    asyncio.run(main())


@pytest.mark.timeout(60)
def test_every_node_applies_a_large_batch_whole_and_in_log_order(monkeypatch):
    """Three in-memory Raft nodes: a 1,000-partition topic and small operations committed
    around it. On every loop iteration, every node's broker image and controller image hold
    either none or all of the big topic; every node publishes all records in log order; an
    operation is answered only once its records are published on the node that ran it."""
    from tests.kraft.test_quorum_runtime import create, run_quorum, start
    from kbroker.kraft.controller import NewTopic

    monkeypatch.setattr(quorum_runtime, "APPLY_SLICE_S", 0.0)
    monkeypatch.setattr(quorum_runtime, "INLINE_SLICE_S", 0.0)

    async def body(net, runtimes):
        lead = await start(runtimes)
        loop = asyncio.get_running_loop()
        seen = {"partial": 0, "publishing": 0}
        offsets = {i: [] for i in runtimes}          # offsets each node published, in order
        big_parts = {i: 0 for i in runtimes}         # PartitionRecords of "big" published

        def publisher(i):
            def pub(rec, change, off):
                offsets[i].append(off)
                t = runtimes[i].image.topics_by_id.get(getattr(rec, "topic_id", None))
                if type(rec).__name__ == "PartitionRecord" and t is not None and t.name == "big":
                    big_parts[i] += 1
            return pub
        for i, r in runtimes.items():
            r.publishers.append(publisher(i))
        stop = [False]

        def tick() -> None:
            for r in runtimes.values():
                for image in (r.image, r.controller.image):
                    t = image.topic("big")
                    if t is not None and len(t.partitions) != N:
                        seen["partial"] += 1
                seen["publishing"] += r.loader.publishing
            if not stop[0]:
                loop.call_soon(tick)
        loop.call_soon(tick)
        big = asyncio.ensure_future(lead.submit(
            lambda c, now: c.create_topics([NewTopic("big", N)], False, now)))
        small = [asyncio.ensure_future(lead.submit(create(f"s{k}"))) for k in range(5)]
        assert (await big)[0].error == 0
        assert big_parts[lead.node.node_id] == N         # answered once published here
        assert all(r[0].error == 0 for r in await asyncio.gather(*small))
        last = lead.applied
        for r in runtimes.values():
            end = loop.time() + 20
            while r.published < last:
                assert loop.time() < end, "a node did not publish everything"
                await asyncio.sleep(0.005)
        stop[0] = True
        for i, r in runtimes.items():
            assert sorted(r.image.topics_by_name) == sorted(["big"] + [f"s{k}" for k in range(5)])
            assert offsets[i] == sorted(set(offsets[i])), f"node {i} published out of order"
            assert big_parts[i] == N
        assert seen["partial"] == 0, seen
        assert seen["publishing"] > 10, seen          # the loop ran while nodes published
    run_quorum(2, body)



def test_a_batch_applied_before_is_not_left_publishing():
    """A committed batch the image already holds (delivered again) publishes nothing, and the
    loader is not left 'publishing' (a forwarded CreateTopics would wait on it until its
    timeout). An observer's runtime: no controller, a stand-in for the driver's node."""
    import types
    import uuid

    from kbroker.kraft.image import MetadataImage
    from kbroker.kraft.raft import CommittedBatch
    from kbroker.kraft.records import encode_record
    from kbroker.wire.generated.topic_record import TopicRecord

    class Driver:
        node = types.SimpleNamespace(node_id=1, role="follower", epoch=1, leader_id=2,
                                     high_watermark=1, epoch_start_offset=0)

        def add_listener(self, fn):
            self.listener = fn

    driver = Driver()
    rt = quorum_runtime.RaftControllerRuntime(None, MetadataImage(), driver, now_ms=lambda: 0)
    heard = []
    rt.publishers.append(lambda rec, change, off: heard.append(off))
    batch = CommittedBatch(0, 0, 1, 0, [encode_record(TopicRecord(name="t", topic_id=uuid.UUID(int=5)))], False)
    driver.listener(batch)
    driver.listener(batch)
    assert heard == [0] and rt.published == 1 and rt.caught_up()
    assert rt.loader.publishing == 0
