"""The struct-based OffsetCommit decoder (record_codec.decode_offset_commit_fast) against the
generated codecs: every key/value version, edge values, and damaged bytes. Where the fast
path answers it must answer exactly what the generated codec does; where the generated
codec refuses the bytes the fast path must step aside (None) so the codec's error stands."""
import random
import struct

from kbroker.groups import record_codec
from kbroker.groups.record_codec import decode_generated, decode_offset_commit_fast
from kbroker.groups.records import OffsetCommitRecord, OffsetValue
from kbroker.wire.generated.offset_commit_key import OffsetCommitKey
from kbroker.wire.generated.offset_commit_value import OffsetCommitValue

H = struct.Struct(">h")
I64 = (-(1 << 63), -1, 0, 1, 1 << 40, (1 << 63) - 1)
I32 = (-(1 << 31), -1, 0, 7, (1 << 31) - 1)
TEXT = ("", "g", "grüße-组", "x" * 126, "y" * 127, "z" * 300, "é" * 2000, "w" * 16382)   # up to a 2-byte length


def key_bytes(version, group, topic, partition):
    return H.pack(version) + OffsetCommitKey(group=group, topic=topic, partition=partition).encode(version)


def value_bytes(version, **fields):
    return H.pack(version) + OffsetCommitValue(**fields).encode(version)


def outcome(key, value):
    try:
        return decode_generated(key, value)
    except Exception:   # noqa: BLE001 - any refusal counts as one
        return "refused"


def assert_agrees(key, value, must_be_fast=False):
    fast = decode_offset_commit_fast(key, value)
    want = outcome(key, value)
    if must_be_fast:
        assert fast is not None, (key, value)
    if fast is not None:
        assert isinstance(want, OffsetCommitRecord), (key, value, fast)
        assert fast == want, (key, value, fast, want)
    assert (record_codec.decode(key, value) if want != "refused" else "refused") == want


def cases(rng):
    """(key, value) pairs in the plain layouts the fast path must read itself."""
    for kv in (0, 1):
        for text in TEXT:
            key = key_bytes(kv, text[:300], text[:200], rng.choice(I32))
            yield key, None                                            # tombstone
            for vv in range(5):
                fields = dict(offset=rng.choice(I64), metadata=text, commit_timestamp=rng.choice(I64))
                if vv >= 3:
                    fields["leader_epoch"] = rng.choice(I32)
                if vv == 1:
                    fields["expire_timestamp"] = rng.choice(I64)
                yield key, value_bytes(vv, **fields)
    for _ in range(1500):                                              # random mixes
        group = "".join(rng.choice("ab-é组") for _ in range(rng.randrange(0, 40)))
        topic = "".join(rng.choice("tq._") for _ in range(rng.randrange(0, 40)))
        key = key_bytes(rng.randrange(2), group, topic, rng.randrange(-5, 1 << 31))
        vv = rng.randrange(5)
        yield key, value_bytes(vv, offset=rng.randrange(-1, 1 << 62), leader_epoch=rng.randrange(-1, 1000) if vv >= 3 else -1,
                               metadata=rng.choice(TEXT[:6]), commit_timestamp=rng.randrange(0, 1 << 45),
                               expire_timestamp=rng.randrange(-1, 1 << 45) if vv == 1 else -1)


def test_fast_decode_matches_the_generated_codec_for_every_version():
    rng = random.Random(15)
    seen = set()
    for key, value in cases(rng):
        assert_agrees(key, value, must_be_fast=True)
        seen.add((key[1], None if value is None else H.unpack_from(value)[0]))
    assert seen == {(k, v) for k in (0, 1) for v in (None, 0, 1, 2, 3, 4)}


def test_fast_decode_reads_what_encode_writes():
    for value in (OffsetValue(5, -1, "", 10, -1), OffsetValue(6, 3, "m", 11, -1), OffsetValue(7, -1, "m", 12, 99),
                  OffsetValue(8, -1, None, 13, -1)):                # null metadata is written as ""
        key, raw = record_codec.encode(OffsetCommitRecord("g", "t", 2, value))
        got = decode_offset_commit_fast(key, raw)
        assert got.value == OffsetValue(value.offset, value.leader_epoch, value.metadata or "",
                                        value.commit_timestamp, value.expire_timestamp)
        assert (got.group, got.topic, got.partition) == ("g", "t", 2)


def test_unusual_bytes_go_to_the_generated_codec():
    key = key_bytes(1, "g", "t", 0)
    tagged = value_bytes(4, offset=1, metadata="m", commit_timestamp=2, unknown_tagged_fields=[(9, b"xy")])
    assert decode_offset_commit_fast(key, tagged) is None
    assert decode_generated(key, tagged).value.offset == 1             # read, the tag dropped
    assert record_codec.decode(key, tagged) == decode_generated(key, tagged)
    odd = [
        (key, H.pack(5) + b"\0" * 20),                                  # unknown value version
        (key, H.pack(-1) + b"\0" * 20),
        (key, H.pack(0) + struct.pack(">qh", 1, -1) + b"\0" * 8),       # null metadata (v0)
        (key, H.pack(4) + struct.pack(">qi", 1, -1) + b"\0" + b"\0" * 9),   # null compact metadata
        (key, H.pack(3) + struct.pack(">qih", 1, 0, 2) + b"\xff\xfe" + b"\0" * 8),   # bad UTF-8
        (key, value_bytes(4, metadata="q" * 20000)),                    # 3-byte length varint
        (H.pack(1) + struct.pack(">h", -1) + b"t", None),               # null group
        (key + b"\0", None),                                            # trailing key byte
        (key_bytes(0, "g", "t", 0)[:-1], None),
    ]
    for k, v in odd:
        assert_agrees(k, v)


def test_damaged_values_and_keys_are_never_misread():
    rng = random.Random(7)
    for key, value in list(cases(rng))[::7]:
        for cut in range(len(key) + 1):
            assert_agrees(key[:cut], value)
        assert_agrees(key + b"\x01", value)
        if value is None:
            continue
        for cut in range(2, len(value)):
            assert_agrees(key, value[:cut])
        assert_agrees(key, value + b"\0")
        flipped = bytearray(value)
        flipped[rng.randrange(2, len(value))] ^= 1 << rng.randrange(8)
        assert_agrees(key, bytes(flipped))
