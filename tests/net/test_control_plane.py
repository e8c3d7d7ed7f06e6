"""The control plane over real loopback sockets, in one process: a combined node's broker
registers and heartbeats through its controller listener, the controller listener serves
only controller APIs, admin writes sent to the broker listener are forwarded, Raft requests
reach the driver through TcpTransport, NOT_CONTROLLER makes the channel move on."""

import asyncio
import gc

import pytest

from kbroker.config import BrokerConfig
from kbroker.kraft.controller_channel import ControllerChannel, ControllerUnavailable
from kbroker.kraft.tcp_transport import TcpTransport, raft_source
from kbroker.kraft.transport import Envelope
from kbroker.net.client import KafkaClient
from kbroker.server import KafkaServer
from kbroker.wire import registry as wire
from kbroker.wire.errors import Errors

pytestmark = pytest.mark.timeout(60)

CONTROLLER_ONLY = {52, 53, 54, 59, 62, 63, 64, 67, 70, 80, 81, 82}


async def start_node(tmp_path, *extra):
    cfg = BrokerConfig.load(None, [f"log.dirs={tmp_path / 'data'}",
                                   "listeners=PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
                                   "controller.listener.names=CONTROLLER", *extra])
    server = KafkaServer(cfg)
    await server.start()
    ports = {lst.name: lst.bound_port for lst in server.listeners}
    return server, ports


def test_combined_node_registers_over_its_controller_listener_and_forwards_admin_writes(tmp_path):
    async def main():
        server, ports = await start_node(tmp_path)
        try:
            assert server.control.networked and not server.image.brokers[1].fenced
            assert server.broker_epoch == server.control.lifecycle.epoch >= 0
            # listeners advertise different API sets
            ctl = KafkaClient("127.0.0.1", ports["CONTROLLER"])
            brk = KafkaClient("127.0.0.1", ports["PLAINTEXT"])
            await ctl.connect()
            await brk.connect()
            cv, bv = set(ctl._conn.versions), set(brk._conn.versions)
            assert CONTROLLER_ONLY <= cv and not (CONTROLLER_ONLY & bv)
            assert 0 not in cv and 3 not in cv       # no Produce / Metadata on the controller listener
            assert 55 in cv and 55 in bv               # DescribeQuorum: brokers forward it
            DQ = wire.REQUESTS[55]
            dq = await brk.send(DQ(topics=[DQ.TopicData(topic_name="__cluster_metadata",
                                                       partitions=[DQ.TopicData.PartitionData(partition_index=0)])]))
            part = dq.topics[0].partitions[0]
            assert part.error_code == 0 and part.leader_id == 1 and part.high_watermark > 0
            assert [v.replica_id for v in part.current_voters] == [1]
            # CreateTopics to the broker listener is forwarded and the image has it on return
            Req = wire.REQUESTS[19]
            resp = await brk.send(Req(timeout_ms=5000, topics=[Req.CreatableTopic(
                name="fwd", num_partitions=2, replication_factor=1)]))
            assert resp.topics[0].error_code == 0
            assert len(server.image.topic("fwd").partitions) == 2
            # so is CreatePartitions, and this broker's new replica is open on return
            CP = wire.REQUESTS[37]
            resp = await brk.send(CP(timeout_ms=5000, topics=[CP.CreatePartitionsTopic(name="fwd", count=3, assignments=None)]))
            assert resp.results[0].error_code == 0
            assert len(server.image.topic("fwd").partitions) == 3
            assert server.replicas.get("fwd", 2) is not None
            # a heartbeat from a broker the controller does not know
            HB = wire.REQUESTS[63]
            r = await ctl.send(HB(broker_id=42, broker_epoch=1, current_metadata_offset=0))
            assert r.error_code == Errors.BROKER_ID_NOT_REGISTERED
            await ctl.close()
            await brk.close()
        finally:
            await server.shutdown(timeout=5)
    asyncio.run(main())


def test_not_controller_answers_make_the_channel_give_up_after_its_timeout(tmp_path, monkeypatch):
    async def main():
        server, ports = await start_node(tmp_path)
        try:
            standby = [True]                          # this node as a standby controller
            monkeypatch.setattr(type(server.controller), "active",
                                property(lambda self: not standby[0]))
            ch = ControllerChannel(lambda: [(1, "127.0.0.1", ports["CONTROLLER"])], request_timeout_ms=600)
            Req = wire.REQUESTS[19]
            with pytest.raises(ControllerUnavailable, match="not the active controller"):
                await ch.send(Req(timeout_ms=100, topics=[Req.CreatableTopic(name="x", num_partitions=1,
                                                                             replication_factor=1)]))
            assert server.image.topic("x") is None
            standby[0] = False
            resp = await ch.send(Req(timeout_ms=100, topics=[Req.CreatableTopic(name="x", num_partitions=1,
                                                                                replication_factor=1)]))
            assert resp.topics[0].error_code == 0
            await ch.close()
        finally:
            await server.shutdown(timeout=5)
    asyncio.run(main())


class EchoDriver:
    """Stands in for the Raft driver on the server side: answers Vote requests."""

    def __init__(self):
        self.seen = []

    async def handle_request(self, src, req):
        self.seen.append((src, type(req).__name__))
        R = wire.RESPONSES[52]
        part = req.topics[0].partitions[0]
        return R(error_code=0, topics=[R.TopicData(topic_name=req.topics[0].topic_name, partitions=[
            R.TopicData.PartitionData(partition_index=0, error_code=0, leader_id=-1,
                                      leader_epoch=part.candidate_epoch, vote_granted=True)])])


def vote(candidate, epoch):
    V = wire.REQUESTS[52]
    return V(cluster_id=None, topics=[V.TopicData(topic_name="__cluster_metadata", partitions=[
        V.TopicData.PartitionData(partition_index=0, candidate_epoch=epoch, candidate_id=candidate,
                                  last_offset_epoch=0, last_offset=0)])])


def test_tcp_transport_carries_raft_requests_to_the_driver_and_responses_back(tmp_path):
    async def main():
        server, ports = await start_node(tmp_path)
        driver = EchoDriver()
        server.control.handle_request = driver.handle_request   # in place of the Raft driver
        got = []
        t = TcpTransport(7, lambda n: ("127.0.0.1", ports["CONTROLLER"]) if n == 1 else None)
        t.set_receiver(got.append)
        try:
            for i in range(5):
                t.send(Envelope(7, 1, 100 + i, vote(7, i + 1)))
            t.send(Envelope(7, 2, 200, vote(7, 9)))      # unknown endpoint: lost
            for _ in range(200):
                if len(got) == 5:
                    break
                await asyncio.sleep(0.01)
            assert sorted(e.corr for e in got) == [100, 101, 102, 103, 104]
            assert all(e.src == 1 and e.dst == 7 and e.is_response for e in got)
            assert {e.corr: e.msg.topics[0].partitions[0].leader_epoch for e in got} == {100 + i: i + 1 for i in range(5)}
            assert driver.seen == [(7, "VoteRequest")] * 5 and t.lost == 1
        finally:
            await t.close()
            del server.control.handle_request
            await server.shutdown(timeout=5)
    asyncio.run(main())


def test_raft_source_names_the_sender():
    assert raft_source(vote(3, 1)) == 3
    F = wire.REQUESTS[1]
    assert raft_source(F(replica_id=5)) == 5
    assert raft_source(F(replica_state=F.ReplicaState(replica_id=6))) == 6
    assert raft_source(wire.REQUESTS[55]()) == -1


def test_forwarded_create_topics_freezes_the_new_partitions_out_of_the_collector(tmp_path):
    # serve() sets freeze_gc; every CreateTopics a client sends a listening node is forwarded,
    # so the freeze has to happen on the forwarding path too, not only the local one
    async def main():
        server, ports = await start_node(tmp_path)
        server.freeze_gc = True
        brk = KafkaClient("127.0.0.1", ports["PLAINTEXT"])
        try:
            gc.unfreeze()
            Req = wire.REQUESTS[19]
            resp = await brk.send(Req(timeout_ms=5000, topics=[Req.CreatableTopic(
                name="frozen", num_partitions=4, replication_factor=1)]))
            assert resp.topics[0].error_code == 0
            assert gc.get_freeze_count() > 0
        finally:
            gc.unfreeze()
            await brk.close()
            await server.shutdown(timeout=5)
    asyncio.run(main())


def test_server_broker_epoch_follows_a_registration_again(tmp_path):
    # the lifecycle registers again when the controller fences the broker for good; the
    # server (replica fetchers, producer ids read it) must not keep the first epoch
    async def main():
        server, ports = await start_node(tmp_path)
        try:
            lc = server.control.lifecycle
            first = server.broker_epoch
            assert first == lc.epoch >= 0
            again = await lc.register()        # as after STALE_BROKER_EPOCH: a new epoch
            assert again != first and server.broker_epoch == again
        finally:
            await server.shutdown(timeout=5)
    asyncio.run(main())


def test_channel_leaves_a_silent_controller_once_the_quorum_names_another_leader(tmp_path):
    """A controller that stopped answering keeps its connection open; a request waiting on it
    moves to the new leader as soon as the quorum names one, not at its timeout."""
    async def main():
        server, ports = await start_node(tmp_path)
        accepted = []
        silent = await asyncio.start_server(lambda r, w: accepted.append(w), "127.0.0.1", 0)
        silent_port = silent.sockets[0].getsockname()[1]
        leader = [2]
        try:
            cands = lambda: [(2, "127.0.0.1", silent_port), (1, "127.0.0.1", ports["CONTROLLER"])]  # noqa: E731
            ch = ControllerChannel(cands, lambda: leader[0], request_timeout_ms=20000)
            Req = wire.REQUESTS[19]
            req = Req(timeout_ms=100, topics=[Req.CreatableTopic(name="moved", num_partitions=1,
                                                                 replication_factor=1)])
            loop = asyncio.get_running_loop()
            loop.call_later(0.5, lambda: leader.__setitem__(0, 1))
            t0 = loop.time()
            resp = await ch.send(req)
            took = loop.time() - t0
            assert resp.topics[0].error_code == 0
            assert accepted, "the request went to the silent controller first"
            assert 0.5 <= took < 5, took
            # while the quorum still names the silent node, the request waits for it (bounded)
            leader[0] = 2
            ch2 = ControllerChannel(lambda: [(2, "127.0.0.1", silent_port)], lambda: leader[0],
                                    request_timeout_ms=800)
            with pytest.raises(ControllerUnavailable):
                await ch2.send(req)
            await ch.close()
            await ch2.close()
        finally:
            silent.close()
            for w in accepted:
                w.close()
            await server.shutdown(timeout=5)
    asyncio.run(main())


def test_channel_keeps_a_slow_new_leader_while_this_broker_still_names_the_dead_one(tmp_path):
    """Right after a failover the broker may still name the killed leader. The request goes to
    the next controller (the new leader), which takes its time: it must be waited for, not
    abandoned and resent (a resent CreateTopics is answered TOPIC_ALREADY_EXISTS)."""
    async def main():
        server, ports = await start_node(tmp_path)
        frames = []

        async def slow_proxy(reader, writer):
            # counts the requests it passes on and holds each for 0.5 s (several leader checks)
            up_r, up_w = await asyncio.open_connection("127.0.0.1", ports["CONTROLLER"])

            async def pump_down():
                while data := await up_r.read(65536):
                    writer.write(data)
                writer.close()
            down = asyncio.ensure_future(pump_down())
            try:
                while True:
                    head = await reader.readexactly(4)
                    body = await reader.readexactly(int.from_bytes(head, "big"))
                    frames.append(int.from_bytes(body[:2], "big"))
                    await asyncio.sleep(0.5)
                    up_w.write(head + body)
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            finally:
                up_w.close()
                down.cancel()
        proxy = await asyncio.start_server(slow_proxy, "127.0.0.1", 0)
        dead = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        dead_port = dead.sockets[0].getsockname()[1]
        dead.close()
        await dead.wait_closed()                      # node 3: killed, connections refused
        try:
            cands = lambda: [(3, "127.0.0.1", dead_port),  # noqa: E731
                             (1, "127.0.0.1", proxy.sockets[0].getsockname()[1])]
            ch = ControllerChannel(cands, lambda: 3, request_timeout_ms=20000)
            Req = wire.REQUESTS[19]
            resp = await ch.send(Req(timeout_ms=100, topics=[Req.CreatableTopic(
                name="once", num_partitions=1, replication_factor=1)]))
            assert resp.topics[0].error_code == 0
            assert frames.count(19) == 1, frames
            await ch.close()
        finally:
            proxy.close()
            await server.shutdown(timeout=5)
    asyncio.run(main())
