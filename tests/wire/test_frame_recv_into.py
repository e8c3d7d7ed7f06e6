"""FrameDecoder.get_buffer / buffer_updated: receive straight into the decoder's buffers."""

import random
import struct

import pytest

from kbroker.wire.errors import FrameTooLarge
from kbroker.wire.frame import FrameDecoder


def framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def receive(dec, data: bytes, chunk_sizes):
    """Push ``data`` through get_buffer/buffer_updated in chunks; return (frames, views)."""
    out = []
    pos = 0
    sizes = iter(chunk_sizes)
    while pos < len(data):
        buf = dec.get_buffer()
        n = min(len(buf), next(sizes), len(data) - pos)
        buf[:n] = data[pos:pos + n]
        pos += n
        out += dec.buffer_updated(n)
    return out


@pytest.mark.parametrize("seed", range(20))
def test_random_chunking_gives_the_frames_back(seed):
    rnd = random.Random(seed)
    payloads = [rnd.randbytes(rnd.choice([0, 1, 7, 100, 5000, 300_000, 700_000])) for _ in range(30)]
    data = b"".join(framed(p) for p in payloads)
    dec = FrameDecoder(arena_size=rnd.choice([16, 64, 4096, 256 * 1024]), min_free=rnd.choice([1, 4, 100]))
    frames = receive(dec, data, iter(lambda: rnd.choice([1, 3, 4, 5, 1000, 70_000, 10**7]), None))
    assert [bytes(f) for f in frames] == payloads
    assert dec.buffered == 0


def test_frames_are_writable_and_survive_later_receives():
    dec = FrameDecoder()
    data = b"".join(framed(bytes([i]) * 50) for i in range(100))
    frames = receive(dec, data, [37] * 10_000)
    assert all(not f.readonly for f in frames)
    snapshot = [bytes(f) for f in frames]
    frames[0][0:1] = b"\xff"                       # a handler rewriting its frame in place
    more = receive(dec, framed(b"z" * 10), [5, 9])
    assert [bytes(f) for f in frames[1:]] == snapshot[1:]
    assert bytes(frames[0][:1]) == b"\xff" and bytes(more[0]) == b"z" * 10


def test_large_frame_gets_a_buffer_of_its_own():
    dec = FrameDecoder(arena_size=1024)
    body = b"x" * 100_000
    buf = dec.get_buffer()
    buf[:4] = struct.pack(">i", len(body))
    assert dec.buffer_updated(4) == []
    buf = dec.get_buffer()
    assert len(buf) == len(body)                   # the rest of the frame, nothing more
    buf[:] = body
    (frame,) = dec.buffer_updated(len(body))
    assert frame.nbytes == len(body) and bytes(frame) == body


def test_too_large_is_refused_at_the_prefix():
    dec = FrameDecoder(max_frame_size=10)
    buf = dec.get_buffer()
    buf[:4] = struct.pack(">i", 11)
    with pytest.raises(FrameTooLarge):
        dec.buffer_updated(4)
    dec = FrameDecoder()
    buf = dec.get_buffer()
    buf[:4] = b"\xff\xff\xff\xfe"
    with pytest.raises(FrameTooLarge):
        dec.buffer_updated(4)


def test_buffers_start_small_and_grow_when_filled():
    dec = FrameDecoder()
    assert len(dec.get_buffer()) == 16 * 1024      # an idle connection holds 16 KiB
    sizes = []
    for _ in range(6):
        buf = dec.get_buffer()
        n = len(buf)
        buf[:] = b"\0" * n                          # stream of empty... frames of size 0
        sizes.append(n)
        dec.buffer_updated(n)
    assert max(sizes) == 256 * 1024 and sizes[0] == 16 * 1024
