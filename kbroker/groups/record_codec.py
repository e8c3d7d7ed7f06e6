"""__consumer_offsets keys and values in Kafka's format: a big-endian int16 version, then the
record encoded at that version (group-coordinator/*Key.json, *Value.json).

Written so Kafka's own tools could read our offsets topic, and read so we replay theirs.
"""
from __future__ import annotations

import struct

from kbroker.groups import records as R
from kbroker.wire.generated.consumer_group_current_member_assignment_key import ConsumerGroupCurrentMemberAssignmentKey
from kbroker.wire.generated.consumer_group_current_member_assignment_value import ConsumerGroupCurrentMemberAssignmentValue
from kbroker.wire.generated.consumer_group_member_metadata_key import ConsumerGroupMemberMetadataKey
from kbroker.wire.generated.consumer_group_member_metadata_value import ConsumerGroupMemberMetadataValue
from kbroker.wire.generated.consumer_group_metadata_key import ConsumerGroupMetadataKey
from kbroker.wire.generated.consumer_group_metadata_value import ConsumerGroupMetadataValue
from kbroker.wire.generated.consumer_group_partition_metadata_key import ConsumerGroupPartitionMetadataKey
from kbroker.wire.generated.consumer_group_partition_metadata_value import ConsumerGroupPartitionMetadataValue
from kbroker.wire.generated.consumer_group_target_assignment_member_key import ConsumerGroupTargetAssignmentMemberKey
from kbroker.wire.generated.consumer_group_target_assignment_member_value import ConsumerGroupTargetAssignmentMemberValue
from kbroker.wire.generated.consumer_group_target_assignment_metadata_key import ConsumerGroupTargetAssignmentMetadataKey
from kbroker.wire.generated.consumer_group_target_assignment_metadata_value import ConsumerGroupTargetAssignmentMetadataValue
from kbroker.wire.generated.group_metadata_key import GroupMetadataKey
from kbroker.wire.generated.group_metadata_value import GroupMetadataValue
from kbroker.wire.generated.offset_commit_key import OffsetCommitKey
from kbroker.wire.generated.offset_commit_value import OffsetCommitValue

_H = struct.Struct(">h")


def _versioned(version: int, msg) -> bytes:
    return _H.pack(version) + msg.encode(version)


def _tp_list(cls, assignment):
    return [cls(topic_id=t, partitions=list(ps)) for t, ps in sorted(assignment.items(), key=lambda kv: str(kv[0]))]


def _tp_dict(items) -> dict:
    return {tp.topic_id: list(tp.partitions) for tp in items}


def encode(record) -> tuple[bytes, bytes | None]:
    """(key, value) bytes; value None is a tombstone."""
    if isinstance(record, R.OffsetCommitRecord):
        key = _versioned(1, OffsetCommitKey(group=record.group, topic=record.topic, partition=record.partition))
        v = record.value
        if v is None:
            return key, None
        # v1 is the only version that can carry an explicit expiry (OffsetCommit v2-4 retention).
        version = 1 if v.expire_timestamp >= 0 else 3
        return key, _versioned(version, OffsetCommitValue(
            offset=v.offset, leader_epoch=v.leader_epoch, metadata=v.metadata or "",
            commit_timestamp=v.commit_timestamp, expire_timestamp=v.expire_timestamp))
    if isinstance(record, R.GroupMetadataRecord):
        key = _versioned(2, GroupMetadataKey(group=record.group))
        v = record.value
        if v is None:
            return key, None
        members = [GroupMetadataValue.MemberMetadata(
            member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
            client_host=m.client_host, rebalance_timeout=m.rebalance_timeout, session_timeout=m.session_timeout,
            subscription=bytes(m.subscription), assignment=bytes(m.assignment)) for m in v.members]
        return key, _versioned(3, GroupMetadataValue(
            protocol_type=v.protocol_type, generation=v.generation, protocol=v.protocol, leader=v.leader,
            current_state_timestamp=v.current_state_timestamp, members=members))
    if isinstance(record, R.ConsumerGroupMetadataRecord):
        key = _versioned(3, ConsumerGroupMetadataKey(group_id=record.group))
        return key, None if record.epoch is None else _versioned(0, ConsumerGroupMetadataValue(epoch=record.epoch))
    if isinstance(record, R.ConsumerGroupPartitionMetadataRecord):
        key = _versioned(4, ConsumerGroupPartitionMetadataKey(group_id=record.group))
        if record.topics is None:
            return key, None
        topics = [ConsumerGroupPartitionMetadataValue.TopicMetadata(topic_id=tid, topic_name=name, num_partitions=n,
                                                                    partition_metadata=[])
                  for name, (tid, n) in sorted(record.topics.items())]
        return key, _versioned(0, ConsumerGroupPartitionMetadataValue(topics=topics))
    if isinstance(record, R.ConsumerGroupMemberMetadataRecord):
        key = _versioned(5, ConsumerGroupMemberMetadataKey(group_id=record.group, member_id=record.member_id))
        v = record.value
        if v is None:
            return key, None
        return key, _versioned(0, ConsumerGroupMemberMetadataValue(
            instance_id=v.instance_id, rack_id=v.rack_id, client_id=v.client_id, client_host=v.client_host,
            subscribed_topic_names=list(v.subscribed_topic_names), subscribed_topic_regex=v.subscribed_topic_regex,
            rebalance_timeout_ms=v.rebalance_timeout_ms, server_assignor=v.server_assignor))
    if isinstance(record, R.ConsumerGroupTargetAssignmentMetadataRecord):
        key = _versioned(6, ConsumerGroupTargetAssignmentMetadataKey(group_id=record.group))
        return key, None if record.epoch is None else _versioned(
            0, ConsumerGroupTargetAssignmentMetadataValue(assignment_epoch=record.epoch))
    if isinstance(record, R.ConsumerGroupTargetAssignmentMemberRecord):
        key = _versioned(7, ConsumerGroupTargetAssignmentMemberKey(group_id=record.group, member_id=record.member_id))
        if record.partitions is None:
            return key, None
        return key, _versioned(0, ConsumerGroupTargetAssignmentMemberValue(
            topic_partitions=_tp_list(ConsumerGroupTargetAssignmentMemberValue.TopicPartition, record.partitions)))
    if isinstance(record, R.ConsumerGroupCurrentMemberAssignmentRecord):
        key = _versioned(8, ConsumerGroupCurrentMemberAssignmentKey(group_id=record.group, member_id=record.member_id))
        v = record.value
        if v is None:
            return key, None
        tps = ConsumerGroupCurrentMemberAssignmentValue.TopicPartitions
        return key, _versioned(0, ConsumerGroupCurrentMemberAssignmentValue(
            member_epoch=v.member_epoch, previous_member_epoch=v.previous_member_epoch, state=v.state,
            assigned_partitions=_tp_list(tps, v.assigned),
            partitions_pending_revocation=_tp_list(tps, v.pending_revocation)))
    raise TypeError(f"not a group coordinator record: {record!r}")


def is_offset_commit_key(key: bytes | memoryview | None) -> bool:
    """Whether ``key`` is an OffsetCommitKey (version 0 or 1), without decoding it."""
    return key is not None and len(key) >= 2 and key[0] == 0 and key[1] <= 1


def decode(key: bytes | memoryview | None, value: bytes | memoryview | None):
    """The record for a __consumer_offsets entry, or None for key types we do not keep
    (share groups, future versions)."""
    if is_offset_commit_key(key):
        rec = decode_offset_commit_fast(key, value)
        if rec is not None:
            return rec
    return decode_generated(key, value)


# OffsetCommit records are nearly all of a large __consumer_offsets, and the generated codec
# (~5 us a record) was most of the time a start-up load took. Their layouts are fixed, so
# they are read here with a few struct calls; anything unusual goes to the generated codec.
_KEY_LEN = struct.Struct(">2xh")                 # key version, group length
_I16 = struct.Struct(">h").unpack_from
_I32 = struct.Struct(">i").unpack_from
_I64 = struct.Struct(">q").unpack_from
_I64_I64 = struct.Struct(">qq").unpack_from
_V0_HEAD = struct.Struct(">2xqh").unpack_from     # v0-v2: offset, metadata length
_V3_HEAD = struct.Struct(">2xqih").unpack_from    # v3: offset, leader epoch, metadata length
_V4_HEAD = struct.Struct(">2xqi").unpack_from     # v4: offset, leader epoch (then a compact string)


def decode_offset_commit_fast(key, value) -> R.OffsetCommitRecord | None:
    """The OffsetCommit record of a version 0/1 key and a version 0-4 value (or a tombstone),
    or None when the bytes are anything but the plain layout (bad lengths, trailing bytes,
    tagged fields, other versions, invalid UTF-8): the generated codec then decides, with
    its errors. tests/groups/test_offset_commit_fast_decode.py holds it to that codec."""
    try:
        glen = _KEY_LEN.unpack_from(key)[0]
        g_end = 4 + glen
        tlen = _I16(key, g_end)[0]
        t_end = g_end + 2 + tlen
        if glen < 0 or tlen < 0 or t_end + 4 != len(key):
            return None
        group = str(key[4:g_end], "utf-8")
        topic = str(key[g_end + 2:t_end], "utf-8")
        partition = _I32(key, t_end)[0]
        if value is None:
            return R.OffsetCommitRecord(group, topic, partition, None)
        version = _I16(value)[0]
        expire = -1
        if version == 4:
            offset, epoch = _V4_HEAD(value)
            n = value[14]
            pos = 15
            if n >= 0x80:                        # metadata of 127 bytes or more
                b = value[15]
                if b >= 0x80:
                    return None
                n = (n & 0x7F) | (b << 7)
                pos = 16
            if n == 0:                           # null: the generated codec says why not
                return None
            m_end = pos + n - 1
            commit = _I64(value, m_end)[0]
            if value[m_end + 8] != 0:            # tagged fields: kept by the generated codec
                return None
            end = m_end + 9
        elif 0 <= version <= 3:
            if version == 3:
                offset, epoch, mlen = _V3_HEAD(value)
                pos = 16
            else:
                offset, mlen = _V0_HEAD(value)
                epoch = -1
                pos = 12
            if mlen < 0:
                return None
            m_end = pos + mlen
            if version == 1:
                commit, expire = _I64_I64(value, m_end)
                end = m_end + 16
            else:
                commit = _I64(value, m_end)[0]
                end = m_end + 8
        else:
            return None
        if end != len(value):
            return None
        metadata = str(value[pos:m_end], "utf-8")
    except (struct.error, IndexError, UnicodeDecodeError):
        return None
    return R.OffsetCommitRecord(group, topic, partition, R.OffsetValue(offset, epoch, metadata, commit, expire))


def decode_generated(key: bytes | memoryview | None, value: bytes | memoryview | None):
    """``decode`` by the generated codecs only."""
    if key is None or len(key) < 2:
        return None
    kv = _H.unpack_from(key)[0]
    kb = memoryview(key)[2:]
    if value is not None:
        vv = _H.unpack_from(value)[0]
        vb = memoryview(value)[2:]
    if kv in (0, 1):
        k = OffsetCommitKey.decode(kb, kv)
        if value is None:
            return R.OffsetCommitRecord(k.group, k.topic, k.partition, None)
        v = OffsetCommitValue.decode(vb, vv)
        return R.OffsetCommitRecord(k.group, k.topic, k.partition, R.OffsetValue(
            v.offset, v.leader_epoch, v.metadata, v.commit_timestamp, v.expire_timestamp))
    if kv == 2:
        k = GroupMetadataKey.decode(kb, kv)
        if value is None:
            return R.GroupMetadataRecord(k.group, None)
        v = GroupMetadataValue.decode(vb, vv)
        members = [R.MemberMetadata(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                    m.rebalance_timeout, m.session_timeout, bytes(m.subscription), bytes(m.assignment))
                   for m in v.members]
        return R.GroupMetadataRecord(k.group, R.GroupMetadataValue(
            v.protocol_type, v.generation, v.protocol, v.leader, v.current_state_timestamp, members))
    if kv == 3:
        k = ConsumerGroupMetadataKey.decode(kb, kv)
        return R.ConsumerGroupMetadataRecord(k.group_id, None if value is None else
                                             ConsumerGroupMetadataValue.decode(vb, vv).epoch)
    if kv == 4:
        k = ConsumerGroupPartitionMetadataKey.decode(kb, kv)
        if value is None:
            return R.ConsumerGroupPartitionMetadataRecord(k.group_id, None)
        v = ConsumerGroupPartitionMetadataValue.decode(vb, vv)
        return R.ConsumerGroupPartitionMetadataRecord(
            k.group_id, {t.topic_name: (t.topic_id, t.num_partitions) for t in v.topics})
    if kv == 5:
        k = ConsumerGroupMemberMetadataKey.decode(kb, kv)
        if value is None:
            return R.ConsumerGroupMemberMetadataRecord(k.group_id, k.member_id, None)
        v = ConsumerGroupMemberMetadataValue.decode(vb, vv)
        return R.ConsumerGroupMemberMetadataRecord(k.group_id, k.member_id, R.ConsumerMemberValue(
            v.instance_id, v.rack_id, v.client_id, v.client_host, list(v.subscribed_topic_names),
            v.subscribed_topic_regex, v.rebalance_timeout_ms, v.server_assignor))
    if kv == 6:
        k = ConsumerGroupTargetAssignmentMetadataKey.decode(kb, kv)
        return R.ConsumerGroupTargetAssignmentMetadataRecord(
            k.group_id, None if value is None else ConsumerGroupTargetAssignmentMetadataValue.decode(vb, vv).assignment_epoch)
    if kv == 7:
        k = ConsumerGroupTargetAssignmentMemberKey.decode(kb, kv)
        if value is None:
            return R.ConsumerGroupTargetAssignmentMemberRecord(k.group_id, k.member_id, None)
        v = ConsumerGroupTargetAssignmentMemberValue.decode(vb, vv)
        return R.ConsumerGroupTargetAssignmentMemberRecord(k.group_id, k.member_id, _tp_dict(v.topic_partitions))
    if kv == 8:
        k = ConsumerGroupCurrentMemberAssignmentKey.decode(kb, kv)
        if value is None:
            return R.ConsumerGroupCurrentMemberAssignmentRecord(k.group_id, k.member_id, None)
        v = ConsumerGroupCurrentMemberAssignmentValue.decode(vb, vv)
        return R.ConsumerGroupCurrentMemberAssignmentRecord(k.group_id, k.member_id, R.CurrentAssignmentValue(
            v.member_epoch, v.previous_member_epoch, v.state, _tp_dict(v.assigned_partitions),
            _tp_dict(v.partitions_pending_revocation)))
    return None
