"""KafkaClient against real loopback asyncio servers: negotiation, pipelining, out-of-order
answers, timeouts, a peer that dies mid-request, a peer that sends garbage, reconnect with
backoff, close."""

import asyncio
import struct

import pytest

from kbroker.net.client import (
    ClientClosed, ConnectionLost, KafkaClient, RequestTimeout, UnsupportedApi,
)
from kbroker.wire.frame import decode_request, encode_response_chunks
from kbroker.wire.generated.api_versions_response import ApiVersionsResponse
from kbroker.wire.generated.metadata_request import MetadataRequest
from kbroker.wire.generated.metadata_response import MetadataResponse

pytestmark = pytest.mark.timeout(30)


class Peer:
    """A loopback Kafka-protocol server. ``ranges``: api key -> (min, max) it advertises.
    ``on_metadata(conn_no, header, req)`` -> "answer" | "drop" | "die" | "garbage" | "hold"
    | ("delay", seconds)."""

    def __init__(self, ranges=None, on_metadata=None, api_versions_max=4):
        self.ranges = ranges or {18: (0, 4), 3: (0, 12)}
        self.on_metadata = on_metadata or (lambda n, h, r: "answer")
        self.api_versions_max = api_versions_max
        self.connections = 0
        self.seen_versions: list[tuple[int, int]] = []
        self.server = None
        self.writers = []

    async def start(self, port=0):
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", port)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def stop(self):
        self.server.close()
        for w in self.writers:
            w.close()
        await self.server.wait_closed()

    async def _serve(self, reader, writer):
        self.connections += 1
        n = self.connections
        self.writers.append(writer)
        tasks = []
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                frame = await reader.readexactly(size)
                key, version = struct.unpack_from(">hh", frame)
                if key == 18 and version > self.api_versions_max:
                    corr = struct.unpack_from(">i", frame, 4)[0]
                    resp = ApiVersionsResponse(error_code=35, api_keys=self._keys())
                    writer.write(b"".join(bytes(c) for c in encode_response_chunks(corr, 18, 0, resp)))
                    continue
                header, req = decode_request(frame)
                self.seen_versions.append((key, version))
                if key == 18:
                    resp = ApiVersionsResponse(error_code=0, api_keys=self._keys())
                    self._answer(writer, header, resp)
                    continue
                action = self.on_metadata(n, header, req)
                if action == "answer":
                    self._answer(writer, header, self._metadata(req))
                elif action == "die":
                    writer.transport.abort()
                    return
                elif action == "garbage":
                    writer.write(b"\x00\x00\x00\x08" + b"\xff" * 8 + b"\x00\x00\x00\x03abc")
                elif action == "hold":
                    pass
                elif isinstance(action, tuple) and action[0] == "delay":
                    tasks.append(asyncio.ensure_future(self._later(writer, header, req, action[1])))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            for t in tasks:
                t.cancel()
            writer.close()

    async def _later(self, writer, header, req, seconds):
        await asyncio.sleep(seconds)
        self._answer(writer, header, self._metadata(req))

    def _keys(self):
        return [ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                for k, (lo, hi) in self.ranges.items()]

    @staticmethod
    def _metadata(req):
        # echo the asked topic names back as the cluster id so answers can be matched
        names = ",".join(t.name for t in (req.topics or []))
        return MetadataResponse(cluster_id=names, controller_id=1)

    @staticmethod
    def _answer(writer, header, resp):
        chunks = encode_response_chunks(header.correlation_id, header.request_api_key,
                                        header.request_api_version, resp)
        writer.write(b"".join(bytes(c) for c in chunks))


def md(name):
    return MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=name)])


def run(coro):
    return asyncio.run(coro)


def test_negotiates_highest_common_version_and_refuses_unknown_apis():
    async def main():
        peer = await Peer(ranges={18: (0, 4), 3: (0, 5)}).start()
        c = KafkaClient("127.0.0.1", peer.port)
        resp = await c.send(md("a"))
        assert resp.cluster_id == "a"
        assert c.api_version(3) == 5                 # ours goes higher; theirs is 5
        assert (3, 5) in peer.seen_versions
        with pytest.raises(UnsupportedApi):          # Produce: not advertised by the peer
            from kbroker.wire.generated.produce_request import ProduceRequest
            await c.send(ProduceRequest(acks=1, timeout_ms=1000, topic_data=[]))
        await c.close()
        await peer.stop()
    run(main())


def test_falls_back_when_peer_does_not_know_our_api_versions_version():
    async def main():
        peer = await Peer(api_versions_max=2, ranges={18: (0, 2), 3: (0, 9)}).start()
        c = KafkaClient("127.0.0.1", peer.port)
        assert (await c.send(md("x"))).cluster_id == "x"
        assert (18, 2) in peer.seen_versions and c.api_version(3) == 9
        await c.close()
        await peer.stop()
    run(main())


def test_pipelined_requests_answered_out_of_order_are_matched_by_correlation_id():
    async def main():
        # request i is answered after (50 - i) ms: the last sent comes back first
        peer = await Peer(on_metadata=lambda n, h, r: ("delay", (50 - int(r.topics[0].name)) / 1000)).start()
        c = KafkaClient("127.0.0.1", peer.port)
        out = await asyncio.gather(*(c.send(md(str(i))) for i in range(50)))
        assert [r.cluster_id for r in out] == [str(i) for i in range(50)]
        assert peer.connections == 1
        await c.close()
        await peer.stop()
    run(main())


def test_peer_dying_mid_request_fails_in_flight_and_next_send_reconnects():
    async def main():
        peer = await Peer(on_metadata=lambda n, h, r: "die" if r.topics[0].name == "die" else "hold"
                          if r.topics[0].name == "hold" else "answer").start()
        c = KafkaClient("127.0.0.1", peer.port, reconnect_backoff_ms=10)
        held = asyncio.ensure_future(c.send(md("hold")))
        await asyncio.sleep(0.05)
        with pytest.raises(ConnectionLost):
            await c.send(md("die"))
        with pytest.raises(ConnectionLost):          # the other request in flight fails too
            await held
        assert (await c.send(md("after"))).cluster_id == "after"
        assert c.connects == 2 and peer.connections == 2
        await c.close()
        await peer.stop()
    run(main())


def test_garbage_from_peer_closes_the_connection_and_the_client_recovers():
    async def main():
        peer = await Peer(on_metadata=lambda n, h, r: "garbage" if n == 1 else "answer").start()
        c = KafkaClient("127.0.0.1", peer.port, reconnect_backoff_ms=10)
        with pytest.raises(ConnectionLost, match="protocol error"):
            await c.send(md("a"))
        assert (await c.send(md("b"))).cluster_id == "b"
        await c.close()
        await peer.stop()
    run(main())


def test_request_timeout_closes_the_connection():
    async def main():
        peer = await Peer(on_metadata=lambda n, h, r: "hold" if n == 1 else "answer").start()
        c = KafkaClient("127.0.0.1", peer.port, request_timeout_ms=200, reconnect_backoff_ms=10)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        with pytest.raises(RequestTimeout):
            await c.send(md("a"))
        assert loop.time() - t0 < 5
        assert not c.connected
        assert (await c.send(md("b"))).cluster_id == "b"
        assert peer.connections == 2
        await c.close()
        await peer.stop()
    run(main())


def test_reconnect_backoff_grows_exponentially_and_resets_on_success():
    async def main():
        # find a free port, then nobody listens on it
        probe = await Peer().start()
        port = probe.port
        await probe.stop()
        c = KafkaClient("127.0.0.1", port, reconnect_backoff_ms=40, reconnect_backoff_max_ms=320)
        loop = asyncio.get_running_loop()
        times = []
        for _ in range(5):
            with pytest.raises(ConnectionLost):
                await c.send(md("a"))
            times.append(loop.time())
        gaps = [b - a for a, b in zip(times, times[1:])]
        # waits 40*2^k ms (k = 0..3) with +-20% jitter
        for gap, expected in zip(gaps, [40, 80, 160, 320]):
            assert gap >= expected * 0.8 / 1000 - 0.005, (gaps, expected)
        peer = await Peer().start(port)
        assert (await c.send(md("up"))).cluster_id == "up"
        assert c._failures == 0
        await c.close()
        await peer.stop()
    run(main())


def test_close_fails_in_flight_and_later_sends():
    async def main():
        peer = await Peer(on_metadata=lambda n, h, r: "hold").start()
        c = KafkaClient("127.0.0.1", peer.port)
        held = asyncio.ensure_future(c.send(md("x")))
        await asyncio.sleep(0.05)
        await c.close()
        with pytest.raises(ClientClosed):
            await held
        with pytest.raises(ClientClosed):
            await c.send(md("y"))
        await peer.stop()
    run(main())


def test_garbage_answer_to_api_versions_fails_the_connect():
    async def main():
        async def serve(reader, writer):
            await reader.readexactly(4)
            writer.write(b"\x00\x00\x00\x06\x00\x00\x00\x01\xff\xff")   # right corr id, bad body
            await asyncio.sleep(5)
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        c = KafkaClient("127.0.0.1", port, request_timeout_ms=3000)
        with pytest.raises(ConnectionLost):
            await c.send(md("a"))
        await c.close()
        server.close()
    run(main())
