"""Frame splitting, request/response headers, and the request/response helpers in frame.py."""

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kbroker.wire.errors import CodecError, FrameTooLarge, UnsupportedVersionError
from kbroker.wire.frame import (
    FrameDecoder, decode_request, decode_request_header, decode_response, encode_request,
    encode_response, encode_response_chunks,
)
from kbroker.wire.generated.api_versions_request import ApiVersionsRequest
from kbroker.wire.generated.api_versions_response import ApiVersionsResponse
from kbroker.wire.generated.controlled_shutdown_request import ControlledShutdownRequest
from kbroker.wire.generated.fetch_response import FetchResponse
from kbroker.wire.generated.metadata_request import MetadataRequest
from kbroker.wire.generated.metadata_response import MetadataResponse
from kbroker.wire.generated.produce_request import ProduceRequest


def framed(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


# ----------------------------------------------------------------------------- FrameDecoder

@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=40), max_size=6), st.data())
def test_frames_survive_any_split(bodies, data):
    stream = b"".join(framed(b) for b in bodies)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    dec = FrameDecoder(max_frame_size=64)
    got = []
    prev = 0
    for c in cuts + [len(stream)]:
        got += [bytes(f) for f in dec.feed(stream[prev:c])]
        prev = c
    assert got == bodies
    assert dec.buffered == 0


def test_frames_in_one_chunk_are_views_of_the_input():
    stream = framed(b"abc") + framed(b"") + framed(b"de")
    frames = FrameDecoder().feed(stream)
    assert [bytes(f) for f in frames] == [b"abc", b"", b"de"]
    assert all(type(f) is memoryview and f.obj is stream for f in frames)


def test_frame_size_limits():
    dec = FrameDecoder(max_frame_size=10)
    assert [bytes(f) for f in dec.feed(framed(b"x" * 10))] == [b"x" * 10]
    with pytest.raises(FrameTooLarge):
        FrameDecoder(max_frame_size=10).feed(framed(b"x" * 11))
    with pytest.raises(FrameTooLarge):
        FrameDecoder().feed(b"\xff\xff\xff\xfe")          # negative size
    # refused from the prefix alone, before the body arrives
    dec = FrameDecoder(max_frame_size=100)
    assert dec.feed(b"\x7f\xff") == []
    with pytest.raises(FrameTooLarge) as ei:
        dec.feed(b"\xff\xff")
    assert isinstance(ei.value, CodecError) and ei.value.size == 0x7FFFFFFF


def test_partial_prefix_and_body_are_buffered():
    dec = FrameDecoder()
    assert dec.feed(b"\x00\x00") == []
    assert dec.feed(b"\x00\x05ab") == []
    assert dec.buffered == 6
    frames = dec.feed(bytearray(b"cde\x00"))
    assert [bytes(f) for f in frames] == [b"abcde"]
    assert dec.buffered == 1


# ----------------------------------------------------------------------------- headers

def test_request_roundtrip_through_frames():
    req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="t")])
    for v in range(0, 13):
        wire = encode_request(42, "me", req, v)
        (frame,) = FrameDecoder().feed(wire)
        header, back = decode_request(frame)
        assert (header.request_api_key, header.request_api_version) == (3, v)
        assert header.correlation_id == 42 and header.client_id == "me"
        assert back.topics[0].name == "t"


def test_controlled_shutdown_v0_uses_header_v0():
    wire = encode_request(5, "ignored", ControlledShutdownRequest(broker_id=3), 0)
    assert wire[4:] == b"\x00\x07\x00\x00\x00\x00\x00\x05" + b"\x00\x00\x00\x03"
    header, req = decode_request(wire[4:])
    assert header.client_id == "" and req.broker_id == 3   # the schema default: v0 has no client id


def test_unknown_api_key_and_version_still_yield_a_header():
    body = b"\x7f\x00\x00\x01\x00\x00\x00\x09\x00\x03cli" + b"junk"
    header, off = decode_request_header(body)
    assert (header.request_api_key, header.correlation_id, header.client_id) == (0x7F00, 9, "cli")
    assert off == 13
    with pytest.raises(UnsupportedVersionError) as ei:
        decode_request(body)
    assert ei.value.header.correlation_id == 9
    # ApiVersions from a newer client (v99): flexible header, still readable
    newer = b"\x00\x12\x00\x63\x00\x00\x00\x0b\x00\x01c\x00" + b"\x02x\x021\x00"
    with pytest.raises(UnsupportedVersionError) as ei:
        decode_request(newer)
    h = ei.value.header
    assert (h.request_api_version, h.correlation_id, h.client_id) == (99, 11, "c")


def test_short_or_bad_headers_raise_codec_error():
    for bad in (b"", b"\x00\x12\x00", b"\x00\x12\x00\x03\x00\x00\x00\x01\x00\x09ab"):
        with pytest.raises(CodecError):
            decode_request(bad)


def test_encode_response_prefix_and_header_versions():
    assert encode_response(7, 0, b"body") == b"\x00\x00\x00\x08\x00\x00\x00\x07body"
    assert encode_response(7, 1, b"body") == b"\x00\x00\x00\x09\x00\x00\x00\x07\x00body"
    with pytest.raises(CodecError):
        encode_response(7, 2, b"")


def test_api_versions_response_header_is_always_v0():
    resp = ApiVersionsResponse(api_keys=[ApiVersionsResponse.ApiVersion(api_key=0, min_version=0, max_version=11)])
    (wire,) = encode_response_chunks(3, 18, 3, resp)
    assert wire[4:8] == b"\x00\x00\x00\x03" and wire[8:] == resp.encode(3)   # no tag byte
    cid, back = decode_response(wire[4:], 18, 3)
    assert cid == 3 and back == resp
    (wire,) = encode_response_chunks(3, 3, 12, MetadataResponse())
    assert wire[8] == 0 and wire[9:] == MetadataResponse().encode(12)   # v1 header: tag byte


def test_response_chunks_with_a_region():
    class Region:
        size = 1000

    F = FetchResponse
    resp = F(responses=[F.FetchableTopicResponse(topic="t", partitions=[
        F.FetchableTopicResponse.PartitionData(records=Region())])])
    chunks = encode_response_chunks(9, 1, 11, resp)
    total = sum(len(c) if isinstance(c, bytes) else c.size for c in chunks)
    assert struct.unpack(">i", chunks[0][:4])[0] == total - 4


def test_produce_request_frame_records_are_views_of_the_frame():
    P = ProduceRequest
    req = P(acks=-1, timeout_ms=30000, topic_data=[P.TopicProduceData(name="t", partition_data=[
        P.TopicProduceData.PartitionProduceData(index=0, records=b"R" * 5000)])])
    wire = encode_request(1, "p", req, 9)
    (frame,) = FrameDecoder().feed(wire)
    _, back = decode_request(frame)
    rec = back.topic_data[0].partition_data[0].records
    assert rec.obj is wire and bytes(rec) == b"R" * 5000


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=6), st.data())
def test_recv_into_path_matches_feed(bodies, data):
    """get_buffer/buffer_updated (the BufferedProtocol path) splits like feed(), any chunking."""
    stream = b"".join(framed(b) for b in bodies)
    dec = FrameDecoder(max_frame_size=300, arena_size=64, min_free=data.draw(st.integers(1, 16)))
    got, pos = [], 0
    while pos < len(stream):
        buf = dec.get_buffer()
        n = min(len(buf), len(stream) - pos, data.draw(st.integers(1, 40)))
        buf[:n] = stream[pos:pos + n]
        pos += n
        got += [bytes(f) for f in dec.buffer_updated(n)]
    assert got == bodies and dec.buffered == 0


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64), st.integers(1, 32))
def test_recv_into_path_on_random_streams(stream, max_size):
    dec = FrameDecoder(max_frame_size=max_size, arena_size=16, min_free=4)
    pos = 0
    try:
        while pos < len(stream):
            buf = dec.get_buffer()
            n = min(len(buf), len(stream) - pos)
            buf[:n] = stream[pos:pos + n]
            pos += n
            for f in dec.buffer_updated(n):
                assert len(f) <= max_size
    except CodecError:
        pass
