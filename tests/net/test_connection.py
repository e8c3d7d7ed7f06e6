"""Connection: pipelining, in-order release, no-response requests, bad frames, sendfile."""

import asyncio
import os
import socket
import struct

import pytest

from kbroker.net.connection import CloseConnection, Connection
from kbroker.wire.frame import FrameDecoder


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


class Region:
    def __init__(self, f, position, size):
        self.file, self.position, self.size = f, position, size


class Dispatcher:
    """Request payload b"<n>:<mode>": 'sync' answers at once, 'async:<ms>' after a delay,
    'none' answers nothing, 'close' closes, 'file' answers with a file region."""

    def __init__(self, region_file=None):
        self.region_file = region_file

    def dispatch(self, conn, fr):
        n, mode = bytes(fr).decode().split(":", 1)
        out = frame(n.encode())
        if mode == "sync":
            return [out]
        if mode == "none":
            return None
        if mode == "close":
            raise CloseConnection("asked to")
        if mode == "file":
            size = os.fstat(self.region_file.fileno()).st_size
            return [struct.pack(">i", size), Region(self.region_file, 0, size)]
        delay = int(mode.split(":")[1]) / 1000

        async def later():
            await asyncio.sleep(delay)
            return [out]
        return later()


async def start(dispatcher, max_frame=1024):
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    loop = asyncio.get_running_loop()
    conn = Connection(loop, a, "peer", dispatcher, FrameDecoder(max_frame))
    conn.start()
    return conn, b


async def read_frames(sock, count, timeout=5.0):
    loop = asyncio.get_running_loop()
    buf = b""
    out = []
    while len(out) < count:
        data = await asyncio.wait_for(loop.sock_recv(sock, 65536), timeout)
        if not data:
            break
        buf += data
        while len(buf) >= 4:
            (n,) = struct.unpack(">i", buf[:4])
            if len(buf) < 4 + n:
                break
            out.append(buf[4:4 + n])
            buf = buf[4 + n:]
    return out


def test_responses_leave_in_request_order():
    async def main():
        conn, client = await start(Dispatcher())
        reqs = [b"1:async:50", b"2:sync", b"3:none", b"4:async:10", b"5:sync", b"6:async:0"]
        client.sendall(b"".join(frame(r) for r in reqs))
        got = await read_frames(client, 5)
        assert got == [b"1", b"2", b"4", b"5", b"6"]
        conn.close()
        client.close()
    asyncio.run(main())


def test_oversized_and_closing_frames_close_only_that_connection(caplog):
    async def main():
        conn1, c1 = await start(Dispatcher(), max_frame=100)
        conn2, c2 = await start(Dispatcher(), max_frame=100)
        c1.sendall(struct.pack(">i", 1000) + b"x" * 10)
        c2.sendall(frame(b"1:sync"))
        assert await read_frames(c2, 1) == [b"1"]
        loop = asyncio.get_running_loop()
        assert await asyncio.wait_for(loop.sock_recv(c1, 10), 5) == b""
        assert conn1.closed and not conn2.closed
        c2.sendall(frame(b"2:close"))
        assert await asyncio.wait_for(loop.sock_recv(c2, 10), 5) == b""
        assert conn2.closed
    asyncio.run(main())
    assert "FrameTooLarge" in caplog.text


def test_sendfile_region_large_with_partial_writes(tmp_path):
    data = os.urandom(3 * 1024 * 1024)  # bigger than the socket buffer: partial sendfile
    p = tmp_path / "seg.log"
    p.write_bytes(data)

    async def main():
        with open(p, "rb") as f:
            conn, client = await start(Dispatcher(f))
            client.sendall(frame(b"1:file") + frame(b"2:sync"))
            got = await read_frames(client, 2, timeout=10)
            assert got[0] == data
            assert got[1] == b"2"
            conn.close()
            client.close()
    asyncio.run(main())


def test_graceful_shutdown_finishes_in_flight():
    async def main():
        conn, client = await start(Dispatcher())
        client.sendall(frame(b"1:async:100") + frame(b"2:sync"))
        await asyncio.sleep(0.01)
        await conn.shutdown(timeout=5)
        got = await read_frames(client, 2)
        assert got == [b"1", b"2"]
        assert conn.closed
    asyncio.run(main())


class RecordingDispatcher(Dispatcher):
    """Also answers b"<n>:file:<pos>:<size>" with that region of the file, and remembers
    whether the frames it was given were writable."""

    def __init__(self, region_file=None):
        super().__init__(region_file)
        self.writable = []

    def dispatch(self, conn, fr):
        self.writable.append(not fr.readonly)
        n, mode = bytes(fr).decode().split(":", 1)
        if mode.startswith("file:"):
            _, pos, size = mode.split(":")
            pos, size = int(pos), int(size)
            return [struct.pack(">i", 1 + size), b"<", Region(self.region_file, pos, size)]
        return super().dispatch(conn, fr)


async def start_tcp(dispatcher, max_frame=1 << 20):
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(1)
    client = socket.create_connection(lsock.getsockname())
    a, _ = lsock.accept()
    lsock.close()
    a.setblocking(False)
    client.setblocking(False)
    a.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn = Connection(asyncio.get_running_loop(), a, "peer", dispatcher, FrameDecoder(max_frame))
    conn.start()
    return conn, client


def test_small_and_large_regions_over_tcp_in_order(tmp_path):
    data = os.urandom(2 * 1024 * 1024)
    p = tmp_path / "seg.log"
    p.write_bytes(data)
    spans = [(0, 10), (5, 16 * 1024), (100, 16 * 1024 + 1), (7, 1_500_000), (0, 1), (2_000_000, 97_152)]

    async def main():
        with open(p, "rb") as f:
            d = RecordingDispatcher(f)
            conn, client = await start_tcp(d)
            reqs = []
            for i, (pos, size) in enumerate(spans):
                reqs.append(frame(f"{i}:file:{pos}:{size}".encode()))
                reqs.append(frame(f"s{i}:sync".encode()))
            client.sendall(b"".join(reqs))
            got = await read_frames(client, 2 * len(spans), timeout=10)
            for i, (pos, size) in enumerate(spans):
                assert got[2 * i] == b"<" + data[pos:pos + size], i
                assert got[2 * i + 1] == f"s{i}".encode()
            assert all(d.writable)   # frames are received into buffers the handler may rewrite
            conn.close()
            client.close()
    asyncio.run(main())


def test_region_past_end_of_file_closes_the_connection(tmp_path):
    p = tmp_path / "seg.log"
    p.write_bytes(b"x" * 100)

    async def main():
        with open(p, "rb") as f:
            conn, client = await start(RecordingDispatcher(f), max_frame=1 << 20)
            client.sendall(frame(b"1:file:50:100"))      # a truncated file: 50 bytes short
            loop = asyncio.get_running_loop()
            assert await asyncio.wait_for(loop.sock_recv(client, 10), 5) == b""
            assert conn.closed
    asyncio.run(main())


class MutingDispatcher(Dispatcher):
    """'mute:<ms>' answers at once and mutes the connection (a throttled client, KIP-219)."""

    def __init__(self):
        super().__init__()
        self.handled = []

    def dispatch(self, conn, fr):
        n, mode = bytes(fr).decode().split(":", 1)
        self.handled.append((n, asyncio.get_running_loop().time()))
        if mode.startswith("mute:"):
            conn.mute_for(int(mode.split(":")[1]) / 1000)
            return [frame(n.encode())]
        return super().dispatch(conn, fr)


def test_a_muted_connection_answers_then_reads_nothing_until_the_throttle_passes():
    async def main():
        d = MutingDispatcher()
        conn, peer = await start(d)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        # both frames arrive in one read: the second waits for the mute to end
        await loop.sock_sendall(peer, frame(b"1:mute:300") + frame(b"2:sync"))
        first = await read_frames(peer, 1)
        assert first == [b"1"] and loop.time() - t0 < 0.25     # answered at once
        await loop.sock_sendall(peer, frame(b"3:sync"))
        rest = await read_frames(peer, 2)
        assert rest == [b"2", b"3"]
        handled = dict(d.handled)
        assert handled["2"] - t0 >= 0.29 and handled["3"] - t0 >= 0.29
        conn.close()
        peer.close()
    asyncio.run(main())


class HoldingDispatcher(Dispatcher):
    """'hold:<ms>' is handled <ms> later, and the connection's later frames wait for that (a
    request the dispatcher decodes in slices)."""

    def __init__(self):
        super().__init__()
        self.handled = []

    def dispatch(self, conn, fr):
        n, mode = bytes(fr).decode().split(":", 1)
        if not mode.startswith("hold:"):
            self.handled.append(n)
            return super().dispatch(conn, fr)
        loop = asyncio.get_running_loop()
        handled = loop.create_future()
        conn.hold_frames_until(handled)

        async def later():
            await asyncio.sleep(int(mode.split(":")[1]) / 1000)
            self.handled.append(n)
            handled.set_result(None)
            return [frame(n.encode())]
        return later()


def test_frames_after_a_held_one_are_handled_after_it_in_order():
    async def main():
        d = HoldingDispatcher()
        conn, peer = await start(d)
        loop = asyncio.get_running_loop()
        # in one read, and one more while the first is held
        await loop.sock_sendall(peer, frame(b"1:hold:200") + frame(b"2:sync") + frame(b"3:hold:50"))
        await asyncio.sleep(0.05)
        assert d.handled == []
        await loop.sock_sendall(peer, frame(b"4:sync"))
        got = await read_frames(peer, 4)
        assert got == [b"1", b"2", b"3", b"4"]
        assert d.handled == ["1", "2", "3", "4"]
        conn.close()
        peer.close()
    asyncio.run(main())
