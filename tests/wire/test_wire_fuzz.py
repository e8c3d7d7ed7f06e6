"""Malformed input: never hangs, never reads past its frame, never raises anything but CodecError.

Three kinds of bad input, for every message at every version: valid encodings truncated at a
random point, valid encodings with random bytes overwritten, and random bytes. Each decode runs
on a slice of a larger buffer whose remaining bytes would complete the message, so reading past
the end of the slice would show up as a successful decode of the truncated input.
"""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kbroker.wire.errors import CodecError
from kbroker.wire.frame import FrameDecoder, decode_request
from wire_strategies import all_versions, message_class, message_strategy, messages, protocol_available

pytestmark = [
    pytest.mark.skipif(not protocol_available(), reason="kafka-protocol schemas not found"),
    pytest.mark.timeout(120),
]

MSGS = messages() if protocol_available() else ()
SETTINGS = settings(max_examples=6, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _decode_or_codec_error(cls, data, version):
    try:
        return cls.decode(data, version)
    except CodecError:
        return None
    # anything else propagates and fails the test


@pytest.mark.parametrize("msg", MSGS, ids=lambda m: m.name)
def test_malformed_input_raises_only_codec_error(msg):
    cls = message_class(msg)
    versions = all_versions(msg)

    @SETTINGS
    @given(st.sampled_from(versions).flatmap(lambda v: st.tuples(st.just(v), message_strategy(msg, v))),
           st.data())
    def check(vo, data):
        v, obj = vo
        good = obj.encode(v)
        buf = memoryview(good)
        # truncated: the rest of the message sits right after the slice in the same buffer
        if good:
            cut = data.draw(st.integers(0, len(good) - 1), label="cut")
            back = _decode_or_codec_error(cls, buf[:cut], v)
            assert back is None or back.encode(v) == good[:cut]
        # corrupted
        if good:
            pos = data.draw(st.integers(0, len(good) - 1), label="pos")
            junk = data.draw(st.binary(min_size=1, max_size=8), label="junk")
            bad = bytearray(good)
            bad[pos:pos + len(junk)] = junk
            _decode_or_codec_error(cls, bytes(bad), v)
        # random
        _decode_or_codec_error(cls, data.draw(st.binary(max_size=64), label="random"), v)

    check()


@SETTINGS
@given(st.binary(max_size=200))
def test_random_request_frames(body):
    try:
        decode_request(body)
    except CodecError:
        pass


@settings(max_examples=300, deadline=None, database=None)
@given(st.integers(0, 0x7FFF), st.integers(-1, 20), st.binary(max_size=120))
def test_random_bodies_for_known_requests(api_key_index, version, tail):
    from kbroker.wire.registry import REQUESTS
    keys = sorted(REQUESTS)
    key = keys[api_key_index % len(keys)]
    frame = key.to_bytes(2, "big") + version.to_bytes(2, "big", signed=True) + b"\x00\x00\x00\x01" + tail
    try:
        decode_request(frame)
    except CodecError:
        pass


def test_huge_lengths_fail_fast():
    from kbroker.wire.generated.metadata_request import MetadataRequest
    from kbroker.wire.generated.produce_request import ProduceRequest
    for data in (b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff\x0f", b"\x80\x80\x80\x80\x80\x80"):
        for v in (0, 9, 12):
            with pytest.raises(CodecError):
                MetadataRequest.decode(data, v)
    # a records length far past the frame
    hdr = b"\xff\xff" + b"\x00\x01" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x01" + b"\x00\x01t"
    with pytest.raises(CodecError):
        ProduceRequest.decode(hdr + b"\x00\x00\x00\x01" + b"\x00\x00\x00\x00" + b"\x7f\xff\xff\xff", 3)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64), st.integers(1, 32))
def test_frame_decoder_on_random_streams(stream, max_size):
    dec = FrameDecoder(max_frame_size=max_size)
    try:
        for f in dec.feed(stream):
            assert len(f) <= max_size
    except CodecError:
        pass
