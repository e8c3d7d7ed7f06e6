"""One group coordinator shard: the groups and offsets of one __consumer_offsets partition.

Owns the classic and consumer protocol state machines, the offset store and a timer. Every
operation takes ``now_ms`` and returns a ``Result``; records are applied here as they are
produced (so the next operation sees them) and are exactly what ``replay`` rebuilds the
shard from after a restart.
"""
from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from kbroker.groups import errors
from kbroker.groups.classic.group import ClassicGroup, GroupState
from kbroker.groups.classic.protocol import ClassicProtocol
from kbroker.groups.config import GroupConfig
from kbroker.groups.consumer.group import ConsumerGroup, ConsumerMember, from_lists
from kbroker.groups.consumer.protocol import ConsumerProtocol
from kbroker.groups.errors import GroupError
from kbroker.groups.offsets import CommitPartition, OffsetStore
from kbroker.groups.records import (ConsumerGroupCurrentMemberAssignmentRecord, ConsumerGroupMemberMetadataRecord,
                                    ConsumerGroupMetadataRecord, ConsumerGroupPartitionMetadataRecord,
                                    ConsumerGroupTargetAssignmentMemberRecord,
                                    ConsumerGroupTargetAssignmentMetadataRecord, GroupMetadataRecord,
                                    OffsetCommitRecord)
from kbroker.groups.result import Result
from kbroker.groups.timer import Timer

log = logging.getLogger("kbroker.groups")

Group = ClassicGroup | ConsumerGroup


@dataclass
class OffsetCommitRequest:
    group_id: str
    topics: list[tuple[str, list[CommitPartition]]]
    generation_id_or_member_epoch: int = -1
    member_id: str = ""
    group_instance_id: str | None = None
    retention_time_ms: int = -1
    version: int = 9


@dataclass
class GroupListing:
    group_id: str
    protocol_type: str
    state: str
    group_type: str


@dataclass
class ClassicDescription:
    error: int
    group_id: str
    state: str = "Dead"
    protocol_type: str = ""
    protocol_data: str = ""
    members: list = field(default_factory=list)   # (member_id, instance_id, client_id, host, metadata, assignment)


def _gen_member_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4()}" if prefix else str(uuid.uuid4())


class GroupShard:
    def __init__(self, partition: int, config: GroupConfig | None = None,
                 topics: Callable[[], dict[str, tuple[Any, int]]] | None = None,
                 member_id_factory: Callable[[str], str] = _gen_member_id):
        self.partition = partition
        self.config = config or GroupConfig()
        self.topics = topics or (lambda: {})
        self.new_member_id = member_id_factory
        self.timer = Timer()
        self.groups: dict[str, Group] = {}
        self.offsets = OffsetStore(self.config.offset_metadata_max_bytes)
        self.classic = ClassicProtocol(self)
        self.consumer = ConsumerProtocol(self)
        self.coordinator_epoch = -1   # the partition's leader epoch when this shard was loaded
        self.last_written = -1        # offset of the last record appended (answers wait for it)

    # ------------------------------------------------------------------------------------------
    # Group lookup and creation

    def classic_group(self, group_id: str) -> ClassicGroup | None:
        g = self.groups.get(group_id)
        return g if isinstance(g, ClassicGroup) else None

    def consumer_group(self, group_id: str) -> ConsumerGroup | None:
        g = self.groups.get(group_id)
        return g if isinstance(g, ConsumerGroup) else None

    def classic_group_for_join(self, group_id: str, create: bool, now_ms: int, result: Result):
        g = self.groups.get(group_id)
        if isinstance(g, ConsumerGroup):
            if g.members or not create:
                return None, errors.INCONSISTENT_GROUP_PROTOCOL
            # An empty consumer group turns into a classic one (a downgrade); offsets stay.
            result.records += self._consumer_group_tombstones(g)
            del self.groups[group_id]
            g = None
        if g is None:
            if not create:
                return None, errors.UNKNOWN_MEMBER_ID
            g = ClassicGroup(group_id, state_timestamp=now_ms)
            self.groups[group_id] = g
        return g, errors.NONE

    def consumer_group_for_heartbeat(self, group_id: str, create: bool, now_ms: int, result: Result) -> ConsumerGroup:
        if "consumer" not in self.config.rebalance_protocols:
            raise GroupError(errors.UNSUPPORTED_VERSION, "The consumer rebalance protocol is disabled.")
        g = self.groups.get(group_id)
        if isinstance(g, ClassicGroup):
            if g.members or not create:
                raise GroupError(errors.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
            # An empty classic group (e.g. only committed offsets) becomes a consumer group.
            self.classic.cancel_timers(g)
            if g.generation > 0 or g.protocol_type:
                result.records.append(GroupMetadataRecord(group_id, None))
            del self.groups[group_id]
            g = None
        if g is None:
            if not create:
                raise GroupError(errors.UNKNOWN_MEMBER_ID, f"Group {group_id} not found.")
            g = ConsumerGroup(group_id)
            self.groups[group_id] = g
        return g

    # ------------------------------------------------------------------------------------------
    # Protocol entry points (thin: the logic is in classic/ and consumer/)

    def join_group(self, req, token, now_ms: int) -> Result:
        return self._applied(self.classic.join(req, token, now_ms))

    def sync_group(self, req, token, now_ms: int) -> Result:
        return self._applied(self.classic.sync(req, token, now_ms))

    def heartbeat(self, req, now_ms: int) -> Result:
        return self._applied(self.classic.heartbeat(req, now_ms))

    def leave_group(self, group_id: str, members, now_ms: int) -> Result:
        return self._applied(self.classic.leave(group_id, members, now_ms))

    def consumer_group_heartbeat(self, req, now_ms: int) -> Result:
        return self._applied(self.consumer.heartbeat(req, now_ms))

    def poll(self, now_ms: int) -> Result:
        """Run every timer that is due; called by the runtime at ``next_deadline()``."""
        res = Result()
        for _key, fn in self.timer.pop_expired(now_ms):
            out = fn(now_ms)
            if out is not None:
                res.add(out)
        return self._applied(res)

    def next_deadline(self) -> int | None:
        return self.timer.next_deadline()

    def _applied(self, res: Result) -> Result:
        # Offset records change state on replay only, so the store has one code path.
        for r in res.records:
            if isinstance(r, OffsetCommitRecord):
                self.offsets.replay(r)
        return res

    # ------------------------------------------------------------------------------------------
    # Offsets

    def _validate_commit(self, req: OffsetCommitRequest, now_ms: int, res: Result) -> Group:
        """Group-level checks only; raises GroupError. An epoch older than a consumer-protocol
        member's current one is refused here (what Kafka 4.0 does everywhere); OffsetCommit
        itself uses ``validate_commit`` and its per-partition KIP-1251 check instead."""
        g, per_partition = self.validate_commit(req, now_ms, res)
        if per_partition is not None:
            raise GroupError(errors.STALE_MEMBER_EPOCH)
        return g

    def validate_commit(self, req: OffsetCommitRequest, now_ms: int, res: Result):
        """(group, per-partition check or None); raises GroupError for group-level errors.

        Consumer-protocol members (KIP-848) commit with their member epoch. Kafka 4.0 wanted
        it equal to the current epoch; since KIP-1251 (Kafka 4.3) an older epoch is fine for
        a partition the member still owns and got at or before that epoch, so a commit racing
        a heartbeat that bumped the epoch is not refused. A newer epoch is always stale.
        """
        g = self.groups.get(req.group_id)
        epoch = req.generation_id_or_member_epoch
        if g is None:
            if epoch >= 0:
                raise GroupError(errors.GROUP_ID_NOT_FOUND if req.version >= 9 else errors.ILLEGAL_GENERATION)
            # A "simple" group: offsets stored for a client that assigns partitions itself.
            g = ClassicGroup(req.group_id, state_timestamp=now_ms)
            self.groups[req.group_id] = g
            return g, None
        if isinstance(g, ClassicGroup):
            if g.is_in(GroupState.DEAD):
                raise GroupError(errors.COORDINATOR_NOT_AVAILABLE)
            if epoch < 0 and g.is_in(GroupState.EMPTY):
                return g, None
            if epoch >= 0 or req.member_id or req.group_instance_id is not None:
                code = ClassicProtocol._validate_member(g, req.member_id, req.group_instance_id)
                if code:
                    raise GroupError(code)
                if epoch != g.generation:
                    raise GroupError(errors.ILLEGAL_GENERATION)
            elif not g.is_in(GroupState.EMPTY):
                raise GroupError(errors.UNKNOWN_MEMBER_ID)
            if g.is_in(GroupState.COMPLETING_REBALANCE):
                raise GroupError(errors.REBALANCE_IN_PROGRESS)
            return g, None
        # consumer group
        if epoch < 0 and not g.members:
            return g, None
        member = g.members.get(req.member_id)
        if member is None:
            raise GroupError(errors.UNKNOWN_MEMBER_ID)
        if req.version < 9:
            raise GroupError(errors.UNSUPPORTED_VERSION)
        if epoch == member.member_epoch:
            return g, None
        if epoch > member.member_epoch or epoch < 0:
            raise GroupError(errors.STALE_MEMBER_EPOCH)
        topics = self.topics()

        def check(topic: str, partition: int) -> int:
            tid = topics.get(topic, (None, 0))[0]
            assigned_at = member.assignment_epoch(tid, partition) if tid is not None else None
            return errors.NONE if assigned_at is not None and assigned_at <= epoch else errors.STALE_MEMBER_EPOCH
        return g, check

    def commit_offsets(self, req: OffsetCommitRequest, now_ms: int) -> Result:
        """Response: [(topic, [(partition, error)])]; a group-level error applies to all."""
        res = Result()
        try:
            _, check = self.validate_commit(req, now_ms, res)
        except GroupError as e:
            res.response = [(t, [(cp.partition, e.code) for cp in parts]) for t, parts in req.topics]
            return res
        topics, refused = req.topics, {}
        if check is not None:
            topics = []
            for t, parts in req.topics:
                ok = []
                for cp in parts:
                    code = check(t, cp.partition)
                    if code:
                        refused[(t, cp.partition)] = code
                    else:
                        ok.append(cp)
                topics.append((t, ok))
        records, answer = self.offsets.commit(req.group_id, topics, now_ms, req.retention_time_ms)
        if refused:
            codes = {(t, p): c for t, rows in answer for p, c in rows}
            codes.update(refused)
            answer = [(t, [(cp.partition, codes[(t, cp.partition)]) for cp in parts]) for t, parts in req.topics]
        res.records += records
        res.response = answer
        return self._applied(res)

    def commit_transactional_offsets(self, req: OffsetCommitRequest, producer_id: int, now_ms: int) -> Result:
        """TxnOffsetCommit. Response: (group error, [(topic, [(partition, error)])]); the
        records stay pending for ``producer_id`` until its transaction's marker."""
        res = Result()
        try:
            self._validate_commit(req, now_ms, res)
        except GroupError as e:
            res.response = (e.code, [])
            return res
        records, answer = self.offsets.commit(req.group_id, req.topics, now_ms)
        for rec in records:
            self.replay(rec, producer_id=producer_id)
        res.records += records
        res.response = (errors.NONE, answer)
        return res

    def fetch_offsets(self, group_id: str, topics, require_stable: bool = False,
                      member_id: str | None = None, member_epoch: int = -1):
        """Returns (group error, [(topic, [FetchedOffset])])."""
        g = self.groups.get(group_id)
        if isinstance(g, ConsumerGroup) and member_id is not None:
            member = g.members.get(member_id)
            if member is None:
                return errors.UNKNOWN_MEMBER_ID, []
            if member_epoch != member.member_epoch:
                return errors.STALE_MEMBER_EPOCH, []
        return errors.NONE, self.offsets.fetch(group_id, topics, require_stable)

    def delete_offsets(self, group_id: str, topics: list[tuple[str, list[int]]]) -> Result:
        """Response: (group error, [(topic, [(partition, error)])])."""
        g = self.groups.get(group_id)
        if g is None or (isinstance(g, ClassicGroup) and g.is_in(GroupState.DEAD)):
            return Result(response=(errors.GROUP_ID_NOT_FOUND, []))
        subscribed: set[str] = set()
        if isinstance(g, ClassicGroup):
            if not g.is_in(GroupState.EMPTY):
                if g.protocol_type != "consumer":
                    return Result(response=(errors.NON_EMPTY_GROUP, []))
                subscribed = self._classic_subscribed_topics(g)
        else:
            subscribed = set(g.subscription_metadata) if g.members else set()
        res = Result()
        answer, doomed = [], []
        for topic, parts in topics:
            if topic in subscribed:
                answer.append((topic, [(p, errors.GROUP_SUBSCRIBED_TO_TOPIC) for p in parts]))
            else:
                answer.append((topic, [(p, errors.NONE) for p in parts]))
                doomed += [(topic, p) for p in parts]
        res.records += self.offsets.delete(group_id, doomed)
        res.response = (errors.NONE, answer)
        return self._applied(res)

    @staticmethod
    def _classic_subscribed_topics(g: ClassicGroup) -> set[str]:
        from kbroker.groups.consumer_protocol_bytes import subscription_topics
        out: set[str] = set()
        for m in g.members.values():
            out |= subscription_topics(m.metadata(g.protocol_name))
        return out

    # ------------------------------------------------------------------------------------------
    # Admin

    def list_groups(self, states: list[str] | None = None, types: list[str] | None = None) -> list[GroupListing]:
        want_states = {s.lower() for s in states or []}
        want_types = {t.lower() for t in types or []}
        out = []
        for gid, g in self.groups.items():
            if isinstance(g, ClassicGroup):
                if g.is_in(GroupState.DEAD):
                    continue
                listing = GroupListing(gid, g.protocol_type or "", g.state.value, "classic")
            else:
                listing = GroupListing(gid, "consumer", g.state.value, "consumer")
            if want_states and listing.state.lower() not in want_states:
                continue
            if want_types and listing.group_type not in want_types:
                continue
            out.append(listing)
        return out

    def describe_classic_group(self, group_id: str) -> ClassicDescription:
        g = self.groups.get(group_id)
        if g is None:
            return ClassicDescription(errors.GROUP_ID_NOT_FOUND, group_id)
        if isinstance(g, ConsumerGroup):
            # DescribeGroups on a consumer group: a classic-shaped view (members and assignments).
            return self._consumer_group_as_classic(g)
        stable = g.is_in(GroupState.STABLE)
        members = [(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                    m.metadata(g.protocol_name) if not g.is_in(GroupState.DEAD) else b"",
                    m.assignment if stable else b"") for m in g.members.values()]
        return ClassicDescription(errors.NONE, group_id, g.state.value, g.protocol_type or "",
                                  g.protocol_name or "" if stable else "", members)

    def _consumer_group_as_classic(self, g: ConsumerGroup) -> ClassicDescription:
        from kbroker.groups.consumer_protocol_bytes import encode_assignment, encode_subscription
        names = {tid: name for name, (tid, _) in g.subscription_metadata.items()}
        members = []
        for m in g.members.values():
            sub = encode_subscription(sorted(m.subscribed_topic_names))
            assigned = {names.get(t, str(t)): sorted(ps) for t, ps in m.assigned.items()}
            members.append((m.member_id, m.instance_id, m.client_id, m.client_host, sub, encode_assignment(assigned)))
        return ClassicDescription(errors.NONE, g.group_id, g.state.value, "consumer",
                                  self._choose_assignor_name(g), members)

    def _choose_assignor_name(self, g: ConsumerGroup) -> str:
        return self.consumer._choose_assignor(g)

    def describe_consumer_group(self, group_id: str) -> ConsumerGroup | None:
        return self.consumer_group(group_id)

    def delete_group(self, group_id: str, now_ms: int) -> Result:
        g = self.groups.get(group_id)
        if g is None or (isinstance(g, ClassicGroup) and g.is_in(GroupState.DEAD)):
            return Result(response=errors.GROUP_ID_NOT_FOUND)
        if isinstance(g, ClassicGroup):
            if not g.is_in(GroupState.EMPTY):
                return Result(response=errors.NON_EMPTY_GROUP)
        elif g.members:
            return Result(response=errors.NON_EMPTY_GROUP)
        res = Result(records=self.offsets.delete_all(group_id), response=errors.NONE)
        res.records += self._group_tombstones(g)
        self._drop_group(g, now_ms)
        return self._applied(res)

    def _group_tombstones(self, g: Group) -> list:
        if isinstance(g, ClassicGroup):
            return [GroupMetadataRecord(g.group_id, None)]
        return self._consumer_group_tombstones(g)

    def _consumer_group_tombstones(self, g: ConsumerGroup) -> list:
        out = []
        for mid in g.members:
            out += ConsumerProtocol._member_tombstones(g.group_id, mid)
        return out + [ConsumerGroupTargetAssignmentMetadataRecord(g.group_id, None),
                      ConsumerGroupPartitionMetadataRecord(g.group_id, None),
                      ConsumerGroupMetadataRecord(g.group_id, None)]

    def _drop_group(self, g: Group, now_ms: int) -> None:
        if isinstance(g, ClassicGroup):
            self.classic.cancel_timers(g)
            g.transition(GroupState.DEAD, now_ms)
        else:
            self.consumer.cancel_timers(g)
            g.dead = True
        self.groups.pop(g.group_id, None)

    # ------------------------------------------------------------------------------------------
    # Offset expiry (offsets.retention.minutes)

    def expire_offsets(self, now_ms: int) -> Result:
        res = Result()
        retention = self.config.offsets_retention_ms
        for gid in list(set(self.groups) | set(self.offsets.offsets)):
            g = self.groups.get(gid)
            base_of, keep = (lambda v: v.commit_timestamp), (lambda t: False)
            if isinstance(g, ClassicGroup):
                if g.is_in(GroupState.EMPTY):
                    if g.protocol_type:
                        # Retention counts from when the group emptied, not from each commit.
                        since = g.state_timestamp
                        base_of = lambda v, s=since: max(v.commit_timestamp, s) if s >= 0 else v.commit_timestamp  # noqa: E731
                elif g.protocol_type == "consumer" and g.is_in(GroupState.STABLE):
                    subscribed = self._classic_subscribed_topics(g)
                    keep = lambda t, s=subscribed: t in s  # noqa: E731
                else:
                    continue
            elif isinstance(g, ConsumerGroup) and g.members:
                subscribed = set(g.subscription_metadata)
                keep = lambda t, s=subscribed: t in s  # noqa: E731
            expired = self.offsets.expire(gid, now_ms, retention, base_of, keep)
            res.records += expired
            if expired:
                log.info("group %s: %d offsets expired", gid, len(expired))
        self._applied(res)
        # A group with neither members nor offsets left is deleted.
        for gid, g in list(self.groups.items()):
            if self.offsets.has_offsets(gid):
                continue
            if isinstance(g, ClassicGroup) and g.is_in(GroupState.EMPTY):
                if g.generation > 0 or g.protocol_type:
                    res.records.append(GroupMetadataRecord(gid, None))
                self._drop_group(g, now_ms)
            elif isinstance(g, ConsumerGroup) and not g.members and g.group_epoch > 0:
                res.records += self._consumer_group_tombstones(g)
                self._drop_group(g, now_ms)
        return res

    # ------------------------------------------------------------------------------------------
    # Replay (loading the partition) and the records' own effects

    def replay(self, record, producer_id: int = -1) -> None:
        if isinstance(record, OffsetCommitRecord):
            if producer_id >= 0:
                self.offsets.replay_transactional(producer_id, record)
                return
            self.offsets.replay(record)
            if record.value is not None and record.group not in self.groups:
                self.groups[record.group] = ClassicGroup(record.group)
            elif record.value is None and not self.offsets.has_offsets(record.group):
                # The last offset of a simple group expired or was deleted: so is the group.
                g = self.groups.get(record.group)
                if isinstance(g, ClassicGroup) and g.is_in(GroupState.EMPTY) and g.generation == 0 \
                        and not g.protocol_type:
                    del self.groups[record.group]
            return
        if isinstance(record, GroupMetadataRecord):
            if record.value is None:
                g = self.groups.get(record.group)
                if isinstance(g, ClassicGroup):
                    del self.groups[record.group]
                    if self.offsets.has_offsets(record.group):
                        self.groups[record.group] = ClassicGroup(record.group)
            else:
                self.groups[record.group] = ClassicGroup.from_record_value(record.group, record.value)
            return
        self._replay_consumer(record)

    def _replay_consumer(self, record) -> None:
        gid = record.group
        g = self.groups.get(gid)
        tombstone = getattr(record, "value", 0) is None or getattr(record, "epoch", 0) is None \
            or getattr(record, "topics", 0) is None or getattr(record, "partitions", 0) is None
        if not isinstance(g, ConsumerGroup):
            if tombstone:
                return
            g = ConsumerGroup(gid)
            self.groups[gid] = g
        if isinstance(record, ConsumerGroupMetadataRecord):
            if record.epoch is None:
                # The last tombstone of a deleted group; offsets may keep a simple group alive.
                del self.groups[gid]
                if self.offsets.has_offsets(gid):
                    self.groups[gid] = ClassicGroup(gid)
            else:
                g.group_epoch = record.epoch
        elif isinstance(record, ConsumerGroupPartitionMetadataRecord):
            g.subscription_metadata = dict(record.topics or {})
        elif isinstance(record, ConsumerGroupTargetAssignmentMetadataRecord):
            g.assignment_epoch = record.epoch if record.epoch is not None else 0
        elif isinstance(record, ConsumerGroupTargetAssignmentMemberRecord):
            if record.partitions is None:
                g.target.pop(record.member_id, None)
            else:
                g.target[record.member_id] = from_lists(record.partitions)
        elif isinstance(record, ConsumerGroupMemberMetadataRecord):
            if record.value is None:
                g.remove_member(record.member_id)
            else:
                m = g.members.get(record.member_id) or ConsumerMember(record.member_id)
                m.apply_metadata(record.value)
                g.add_member(m)
        elif isinstance(record, ConsumerGroupCurrentMemberAssignmentRecord):
            m = g.members.get(record.member_id)
            if record.value is None:
                if m is not None:
                    g.release_member_partitions(record.member_id)
                return
            if m is None:
                m = ConsumerMember(record.member_id)
                g.members[record.member_id] = m
            m.apply_assignment(record.value)
            g.set_member_partitions(m)

    def on_loaded(self, now_ms: int) -> None:
        """After replay: restart session timers and the periodic offset expiry."""
        for g in self.groups.values():
            if isinstance(g, ClassicGroup):
                if g.members:
                    g.state_timestamp = now_ms if g.state_timestamp < 0 else g.state_timestamp
                self.classic.on_loaded(g, now_ms)
            else:
                self.consumer.on_loaded(g, now_ms)
        self.schedule_offset_expiry(now_ms)

    def schedule_offset_expiry(self, now_ms: int) -> None:
        def run(t: int) -> Result:
            out = self.expire_offsets(t)
            self.schedule_offset_expiry(t)
            return out
        self.timer.schedule("offset-expiry", now_ms + self.config.offsets_retention_check_interval_ms, run)
