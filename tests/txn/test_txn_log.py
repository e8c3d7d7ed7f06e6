"""__transaction_state records: Kafka's exact bytes, both value versions, partitionFor."""

import struct

import pytest
from hypothesis import given, strategies as st

from kbroker.txn.txn_log import (
    TxnLogDecodeError,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    java_string_hash,
    partition_for,
)
from kbroker.txn.txn_state import TxnState, TxnTransit


def transit(state=TxnState.ONGOING, partitions=(("t", 1), ("t", 0), ("u", 5)), **kw):
    args = dict(producer_id=4000, prev_producer_id=-1, producer_epoch=3, last_producer_epoch=-1,
                txn_timeout_ms=60_000, state=state, partitions=frozenset(partitions),
                txn_start_ms=1_700_000_000_000, txn_last_update_ms=1_700_000_000_500)
    args.update(kw)
    return TxnTransit(**args)


def test_java_string_hash():
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -(2**31)  # Integer.MIN_VALUE
    assert java_string_hash("\u00e9t\u00e9") == (233 * 31 * 31 + 116 * 31 + 233)
    assert java_string_hash("\U0001F600") == 0xD83D * 31 + 0xDE00  # a surrogate pair


def test_partition_for():
    assert partition_for("hello", 50) == 99162322 % 50
    assert partition_for("polygenelubricants", 50) == 0  # Utils.abs(MIN_VALUE) == 0
    neg = "abcdefghijklmnop"  # hashCode is negative
    assert java_string_hash(neg) < 0
    assert partition_for(neg, 50) == abs(java_string_hash(neg)) % 50


def test_key_bytes():
    assert encode_key("my-txn") == b"\x00\x00\x00\x06my-txn"
    assert decode_key(encode_key("my-txn")) == "my-txn"
    assert decode_key(b"\x00\x01\x00\x01x") is None  # unknown key version: skipped
    with pytest.raises(TxnLogDecodeError):
        decode_key(b"\x00\x00\x00\x09abc")


def test_value_v0_exact_bytes():
    t = transit()
    expected = (struct.pack(">hqhib", 0, 4000, 3, 60_000, 1)
                + struct.pack(">i", 2)
                + struct.pack(">h", 1) + b"t" + struct.pack(">iii", 2, 0, 1)
                + struct.pack(">h", 1) + b"u" + struct.pack(">ii", 1, 5)
                + struct.pack(">qq", 1_700_000_000_500, 1_700_000_000_000))
    assert encode_value(t) == expected


def test_value_empty_has_null_partitions():
    t = transit(TxnState.EMPTY, partitions=(), txn_start_ms=-1)
    raw = encode_value(t)
    assert raw[2 + 15:2 + 19] == b"\xff\xff\xff\xff"
    d = decode_value(raw)
    assert d.transit.state == TxnState.EMPTY and d.transit.partitions == frozenset()
    with pytest.raises(ValueError):
        encode_value(transit(TxnState.EMPTY))


@pytest.mark.parametrize("version", [0, 1])
@pytest.mark.parametrize("state", list(TxnState))
def test_value_roundtrip(version, state):
    parts = () if state == TxnState.EMPTY else (("a", 0), ("b", 9))
    t = transit(state, parts, prev_producer_id=77 if version else -1)
    d = decode_value(encode_value(t, version))
    assert d.version == version
    assert d.transit == t


def test_value_v1_tagged_fields():
    t = transit(prev_producer_id=12, next_producer_id=13)
    raw = encode_value(t, 1)
    d = decode_value(raw)
    assert d.transit.prev_producer_id == 12 and d.transit.next_producer_id == 13
    # an unknown tagged field is skipped
    assert raw[-21:].startswith(b"\x02")  # two tags of 10 bytes each
    patched = raw[:-21] + b"\x03" + raw[-20:] + b"\x07\x01\x00"
    assert decode_value(patched).transit == t


def test_tombstone_and_corruption():
    assert decode_value(None) is None
    with pytest.raises(TxnLogDecodeError):
        decode_value(b"\x00\x07" + b"\x00" * 40)  # unknown version
    with pytest.raises(TxnLogDecodeError):
        decode_value(encode_value(transit())[:-3])  # truncated
    bad_state = bytearray(encode_value(transit()))
    bad_state[2 + 14] = 9
    with pytest.raises(TxnLogDecodeError):
        decode_value(bytes(bad_state))


@given(st.text(min_size=1, max_size=40),
       st.sets(st.tuples(st.text(min_size=1, max_size=10), st.integers(0, 1000)), max_size=8),
       st.integers(0, 2**63 - 1), st.integers(0, 32767), st.sampled_from([0, 1]))
def test_roundtrip_property(txn_id, parts, pid, epoch, version):
    assert decode_key(encode_key(txn_id)) == txn_id
    t = transit(TxnState.PREPARE_COMMIT, parts, producer_id=pid, producer_epoch=epoch)
    assert decode_value(encode_value(t, version)).transit == t


def test_matches_generated_codec_when_available():
    import kbroker.wire.generated.transaction_log_value as gen   # ours: a broken module must fail
    t = transit()
    raw = encode_value(t, 1)
    msg = gen.TransactionLogValue.decode(raw[2:], 1)
    assert msg.producer_id == 4000 and msg.transaction_status == 1
    assert msg.encode(1) == raw[2:]
