"""Records of the __transaction_state topic, byte-compatible with Kafka's.

Key:   int16 version (0) + TransactionLogKey v0   {TransactionalId: string}
Value: int16 version + TransactionLogValue v0|v1 (v1 flexible, with tagged fields), or null
       (a tombstone: the transactional id expired).

Kafka writes value version 0 until transaction.version 1 is finalized; so do we, which keeps
our logs readable by Kafka's own tools. Both versions decode. Small and hand-written on
purpose: the coordinator's state and recovery must not depend on the generated codec.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from kbroker.wire.errors import CodecError
from kbroker.wire.primitives import rd_uvarint, wr_uvarint

from kbroker.txn.txn_state import NO_PRODUCER_ID, TxnState, TxnTransit

TRANSACTION_STATE_TOPIC = "__transaction_state"
DEFAULT_NUM_PARTITIONS = 50  # transaction.state.log.num.partitions

KEY_VERSION = 0
VALUE_VERSION = 0

_H = struct.Struct(">h")
_I = struct.Struct(">i")
_VALUE_HEAD = struct.Struct(">qhib")  # producerId, producerEpoch, timeoutMs, status
_TWO_Q = struct.Struct(">qq")  # lastUpdateTimestampMs, startTimestampMs


class TxnLogDecodeError(ValueError):
    pass


def java_string_hash(s: str) -> int:
    """Java's String.hashCode (over UTF-16 code units, int32 arithmetic)."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(transactional_id: str, num_partitions: int = DEFAULT_NUM_PARTITIONS) -> int:
    """Kafka's TransactionStateManager.partitionFor: Utils.abs(hashCode) % partitions."""
    h = java_string_hash(transactional_id)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


# ---- key ----------------------------------------------------------------------------------


def encode_key(transactional_id: str) -> bytes:
    raw = transactional_id.encode("utf-8")
    return _H.pack(KEY_VERSION) + _H.pack(len(raw)) + raw


def decode_key(data) -> str | None:
    """The transactional id, or None for a key version we do not know (Kafka skips those)."""
    try:
        (version,) = _H.unpack_from(data, 0)
        if version != KEY_VERSION:
            return None
        (n,) = _H.unpack_from(data, 2)
        if n < 0 or 4 + n > len(data):
            raise TxnLogDecodeError("transaction log key: bad string length")
        return bytes(data[4:4 + n]).decode("utf-8")
    except (struct.error, UnicodeDecodeError) as e:
        raise TxnLogDecodeError(f"transaction log key: {e}") from e


# ---- value --------------------------------------------------------------------------------


def _group_partitions(partitions) -> list[tuple[str, list[int]]]:
    by_topic: dict[str, list[int]] = {}
    for topic, p in sorted(partitions):
        by_topic.setdefault(topic, []).append(p)
    return list(by_topic.items())


def _uvarint(n: int) -> bytearray:
    out = bytearray()
    wr_uvarint(out, n)
    return out


def encode_value(t: TxnTransit, version: int = VALUE_VERSION) -> bytes:
    if t.state == TxnState.EMPTY and t.partitions:
        raise ValueError("an Empty transaction has no partitions")
    groups = None if t.state == TxnState.EMPTY else _group_partitions(t.partitions)
    out = bytearray(_H.pack(version))
    out += _VALUE_HEAD.pack(t.producer_id, t.producer_epoch, t.txn_timeout_ms, int(t.state))
    if version == 0:
        if groups is None:
            out += _I.pack(-1)
        else:
            out += _I.pack(len(groups))
            for topic, ids in groups:
                raw = topic.encode("utf-8")
                out += _H.pack(len(raw)) + raw + _I.pack(len(ids))
                out += struct.pack(f">{len(ids)}i", *ids)
        out += _TWO_Q.pack(t.txn_last_update_ms, t.txn_start_ms)
    elif version == 1:
        if groups is None:
            out += _uvarint(0)
        else:
            out += _uvarint(len(groups) + 1)
            for topic, ids in groups:
                raw = topic.encode("utf-8")
                out += _uvarint(len(raw) + 1) + raw + _uvarint(len(ids) + 1)
                out += struct.pack(f">{len(ids)}i", *ids) + _uvarint(0)
        out += _TWO_Q.pack(t.txn_last_update_ms, t.txn_start_ms)
        tags = []
        if t.prev_producer_id != NO_PRODUCER_ID:
            tags.append((0, struct.pack(">q", t.prev_producer_id)))
        if t.next_producer_id != NO_PRODUCER_ID:
            tags.append((1, struct.pack(">q", t.next_producer_id)))
        out += _uvarint(len(tags))
        for tag, data in tags:
            out += _uvarint(tag) + _uvarint(len(data)) + data
    else:
        raise ValueError(f"unsupported TransactionLogValue version {version}")
    return bytes(out)


class _Cursor:
    __slots__ = ("buf", "pos")

    def __init__(self, buf):
        self.buf = memoryview(buf)
        self.pos = 0

    def take(self, st: struct.Struct):
        v = st.unpack_from(self.buf, self.pos)
        self.pos += st.size
        return v

    def uvarint(self) -> int:
        try:
            v, self.pos = rd_uvarint(self.buf, self.pos)
        except (IndexError, CodecError):
            raise TxnLogDecodeError("bad varint") from None
        return v

    def raw(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise TxnLogDecodeError("length past the end of the value")
        v = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return v

    def int32s(self, n: int) -> list[int]:
        return list(struct.unpack(f">{n}i", self.raw(4 * n)))


@dataclass(frozen=True, slots=True)
class TxnLogValue:
    """A decoded value; ``transit`` carries what the coordinator needs."""

    version: int
    transit: TxnTransit
    client_transaction_version: int = 0


def decode_value(data) -> TxnLogValue | None:
    """None for a tombstone (the id expired)."""
    if data is None:
        return None
    c = _Cursor(data)
    try:
        (version,) = c.take(_H)
        pid, epoch, timeout, status = c.take(_VALUE_HEAD)
        partitions: set[tuple[str, int]] = set()
        prev_pid = next_pid = NO_PRODUCER_ID
        client_tv = 0
        if version == 0:
            (n,) = c.take(_I)
            for _ in range(max(n, 0)):
                (tlen,) = c.take(_H)
                topic = c.raw(tlen).decode("utf-8")
                (k,) = c.take(_I)
                partitions.update((topic, p) for p in c.int32s(k))
            last_update, start = c.take(_TWO_Q)
        elif version == 1:
            n = c.uvarint() - 1
            for _ in range(max(n, 0)):
                topic = c.raw(c.uvarint() - 1).decode("utf-8")
                partitions.update((topic, p) for p in c.int32s(c.uvarint() - 1))
                for _ in range(c.uvarint()):  # tagged fields of PartitionsSchema: none known
                    c.uvarint()
                    c.raw(c.uvarint())
            last_update, start = c.take(_TWO_Q)
            for _ in range(c.uvarint()):
                tag, size = c.uvarint(), c.uvarint()
                field = c.raw(size)
                if tag == 0:
                    (prev_pid,) = struct.unpack(">q", field)
                elif tag == 1:
                    (next_pid,) = struct.unpack(">q", field)
                elif tag == 2:
                    (client_tv,) = struct.unpack(">h", field)
        else:
            raise TxnLogDecodeError(f"unknown TransactionLogValue version {version}")
        state = TxnState(status)
    except (struct.error, UnicodeDecodeError, ValueError) as e:
        if isinstance(e, TxnLogDecodeError):
            raise
        raise TxnLogDecodeError(f"transaction log value: {e}") from e
    if state == TxnState.EMPTY:
        partitions = set()
    transit = TxnTransit(pid, prev_pid, epoch, -1, timeout, state, frozenset(partitions),
                         start, last_update, next_pid)
    return TxnLogValue(version, transit, client_tv)


def encode_record(transactional_id: str, transit: TxnTransit | None) -> tuple[bytes, bytes | None]:
    """(key, value) of one __transaction_state record; transit None writes a tombstone."""
    return encode_key(transactional_id), (None if transit is None else encode_value(transit))
