"""ConsumerGroupHeartbeat (KIP-848) as a state machine over ``ConsumerGroup``.

One heartbeat: validate, update the member's subscription, bump the group epoch when
subscriptions or the subscribed topics' metadata changed, recompute the target assignment
when the group epoch is ahead of it, then move this member one reconciliation step toward
its target. Every change is a record; the heartbeat answers after they are appended.
"""
from __future__ import annotations

import functools
import logging
from collections import Counter
from typing import TYPE_CHECKING

from kbroker.groups import errors
from kbroker.groups.consumer.assignors import ASSIGNORS, MemberSpec
from kbroker.groups.consumer.group import (STATIC_LEAVE_EPOCH, ConsumerGroup, ConsumerMember, MemberState,
                                           copy_assignment, from_lists, to_lists)
from kbroker.groups.consumer.messages import HeartbeatRequest, HeartbeatResponse
from kbroker.groups.consumer.reconciliation import reconcile
from kbroker.groups.consumer.regex import RegexError, compile_topic_regex, matching_topics
from kbroker.groups.errors import GroupError
from kbroker.groups.records import (ConsumerGroupCurrentMemberAssignmentRecord, ConsumerGroupMemberMetadataRecord,
                                    ConsumerGroupMetadataRecord, ConsumerGroupPartitionMetadataRecord,
                                    ConsumerGroupTargetAssignmentMemberRecord,
                                    ConsumerGroupTargetAssignmentMetadataRecord)
from kbroker.groups.result import Result

if TYPE_CHECKING:
    from kbroker.groups.shard import GroupShard

log = logging.getLogger("kbroker.groups.consumer")


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str):
    return compile_topic_regex(pattern)


def _session_key(group_id: str, member_id: str) -> str:
    return f"consumer-session:{group_id}:{member_id}"


def _revocation_key(group_id: str, member_id: str) -> str:
    return f"consumer-revocation:{group_id}:{member_id}"


def _is_subset(owned, assigned) -> bool:
    if owned is None:
        return False
    return all(set(ps) <= assigned.get(t, set()) for t, ps in owned.items())


class ConsumerProtocol:
    def __init__(self, shard: "GroupShard"):
        self.shard = shard
        self.config = shard.config
        self.timer = shard.timer

    # ------------------------------------------------------------------------------------------

    def heartbeat(self, req: HeartbeatRequest, now_ms: int) -> Result:
        try:
            return self._heartbeat(req, now_ms)
        except GroupError as e:
            return Result(response=HeartbeatResponse(e.code, e.message, member_epoch=req.member_epoch))

    def _validate(self, req: HeartbeatRequest) -> None:
        bad = lambda msg: GroupError(errors.INVALID_REQUEST, msg)  # noqa: E731
        if not req.group_id:
            raise bad("GroupId can't be empty.")
        if req.instance_id == "":
            raise bad("InstanceId can't be empty.")
        if req.rack_id == "":
            raise bad("RackId can't be empty.")
        if req.member_epoch > 0 or req.member_epoch in (-1, -2) or req.version >= 1:
            if not req.member_id:
                raise bad("MemberId can't be empty.")
        if req.member_epoch == 0:
            if req.rebalance_timeout_ms == -1:
                raise bad("RebalanceTimeoutMs must be provided in first request.")
            if req.topic_partitions is None or any(req.topic_partitions.values()):
                raise bad("TopicPartitions must be empty when (re-)joining.")
            if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
                raise bad("SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
        elif req.member_epoch < -2:
            raise bad(f"MemberEpoch is invalid: {req.member_epoch}")
        if req.server_assignor is not None and req.server_assignor not in self.config.consumer_assignors:
            raise GroupError(errors.UNSUPPORTED_ASSIGNOR, f"ServerAssignor {req.server_assignor} is not supported.")
        if req.subscribed_topic_regex:
            try:
                compile_topic_regex(req.subscribed_topic_regex)
            except RegexError as e:
                raise GroupError(errors.INVALID_REGULAR_EXPRESSION, str(e)) from None

    def _heartbeat(self, req: HeartbeatRequest, now_ms: int) -> Result:
        self._validate(req)
        if req.member_epoch < 0:
            return self._leave(req, now_ms)
        res = Result()
        group = self.shard.consumer_group_for_heartbeat(req.group_id, create=req.member_epoch == 0,
                                                        now_ms=now_ms, result=res)
        member, bump = self._member_for(group, req, res)
        before = member.metadata_value()

        if req.subscribed_topic_names is not None:
            member.subscribed_topic_names = list(req.subscribed_topic_names)
        if req.subscribed_topic_regex is not None:
            member.subscribed_topic_regex = req.subscribed_topic_regex or None
        if req.server_assignor is not None:
            member.server_assignor = req.server_assignor
        if req.rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = req.rebalance_timeout_ms
        if req.rack_id is not None:
            member.rack_id = req.rack_id
        member.client_id, member.client_host = req.client_id, req.client_host
        after = member.metadata_value()
        if after != before or bump:
            res.records.append(ConsumerGroupMemberMetadataRecord(group.group_id, member.member_id, after))
        if (sorted(after.subscribed_topic_names) != sorted(before.subscribed_topic_names)
                or after.subscribed_topic_regex != before.subscribed_topic_regex
                or after.server_assignor != before.server_assignor):
            bump = True

        if self._refresh_subscription_metadata(group, res):
            bump = True
        if bump:
            self._bump_group_epoch(group, res)
        if group.group_epoch > group.assignment_epoch:
            self._compute_target_assignment(group, res)

        owned = from_lists(req.topic_partitions) if req.topic_partitions is not None else None
        previous_assigned = copy_assignment(member.assigned)
        self._reconcile(group, member, owned, res)
        self._schedule_timers(group, member, now_ms)

        send = req.member_epoch == 0 or req.topic_partitions is not None or member.assigned != previous_assigned
        res.response = HeartbeatResponse(errors.NONE, None, member.member_id, member.member_epoch,
                                         self.config.consumer_heartbeat_interval_ms,
                                         to_lists(member.assigned) if send else None)
        return res

    def _member_for(self, group: ConsumerGroup, req: HeartbeatRequest, res: Result) -> tuple[ConsumerMember, bool]:
        """The member this heartbeat is from, created or taken over when joining; True when
        it is new to the group (its arrival changes the group epoch)."""
        mid = req.member_id or self.shard.new_member_id("")
        if req.member_epoch == 0:
            if req.instance_id is not None:
                existing_id = group.static_members.get(req.instance_id)
                if existing_id is not None and existing_id != mid:
                    existing = group.members[existing_id]
                    if existing.member_epoch != STATIC_LEAVE_EPOCH:
                        raise GroupError(errors.UNRELEASED_INSTANCE_ID,
                                         f"Static member {req.instance_id} is still in use by {existing_id}.")
                    return self._replace_static_member(group, existing, mid, res), False
            member = group.members.get(mid)
            if member is not None:
                return member, False      # a member rejoining after a fence keeps its id
            if len(group.members) >= self.config.consumer_max_size:
                raise GroupError(errors.GROUP_MAX_SIZE_REACHED, "The consumer group has reached its maximum capacity.")
            member = ConsumerMember(mid, instance_id=req.instance_id, rack_id=req.rack_id,
                                    rebalance_timeout_ms=req.rebalance_timeout_ms)
            group.add_member(member)
            return member, True
        member = group.members.get(mid)
        if member is None:
            raise GroupError(errors.UNKNOWN_MEMBER_ID, f"Member {mid} is not a member of group {group.group_id}.")
        if req.instance_id is not None and member.instance_id != req.instance_id:
            raise GroupError(errors.FENCED_INSTANCE_ID, "InstanceId does not match the member.")
        if req.member_epoch > member.member_epoch:
            raise GroupError(errors.FENCED_MEMBER_EPOCH, "The consumer group member has a greater epoch.")
        if req.member_epoch < member.member_epoch:
            # A lost response: accept the previous epoch if the member owns nothing it should not.
            owned = from_lists(req.topic_partitions) if req.topic_partitions is not None else None
            if req.member_epoch != member.previous_member_epoch or not _is_subset(owned, member.assigned):
                raise GroupError(errors.FENCED_MEMBER_EPOCH, "The consumer group member has a smaller epoch.")
        return member, False

    def _replace_static_member(self, group: ConsumerGroup, old: ConsumerMember, new_id: str, res: Result) -> ConsumerMember:
        gid = group.group_id
        self._cancel_timers(gid, old.member_id)
        target = group.target.get(old.member_id, {})
        group.remove_member(old.member_id)
        res.records += self._member_tombstones(gid, old.member_id)
        member = ConsumerMember(new_id, old.instance_id, old.rack_id, old.client_id, old.client_host,
                                list(old.subscribed_topic_names), old.subscribed_topic_regex,
                                old.rebalance_timeout_ms, old.server_assignor, member_epoch=0,
                                assigned=copy_assignment(old.assigned),
                                assignment_epochs=dict(old.assignment_epochs))
        group.add_member(member)
        group.target[new_id] = target
        group.set_member_partitions(member)
        res.records.append(ConsumerGroupTargetAssignmentMemberRecord(gid, new_id, to_lists(target)))
        log.info("group %s: static member %s now %s (was %s)", gid, old.instance_id, new_id, old.member_id)
        return member

    # ------------------------------------------------------------------------------------------

    def _leave(self, req: HeartbeatRequest, now_ms: int) -> Result:
        group = self.shard.consumer_group(req.group_id)
        if group is None:
            raise GroupError(errors.GROUP_ID_NOT_FOUND, f"Group {req.group_id} not found.")
        member = group.members.get(req.member_id)
        if member is None:
            if req.instance_id is not None and req.instance_id in group.static_members:
                raise GroupError(errors.FENCED_INSTANCE_ID, "InstanceId belongs to another member.")
            raise GroupError(errors.UNKNOWN_MEMBER_ID, f"Member {req.member_id} is not a member of group {req.group_id}.")
        res = Result()
        if req.member_epoch == STATIC_LEAVE_EPOCH and member.instance_id is not None:
            # A static member going away for a restart keeps its partitions for its successor.
            member.member_epoch = STATIC_LEAVE_EPOCH
            res.records.append(ConsumerGroupCurrentMemberAssignmentRecord(group.group_id, member.member_id,
                                                                          member.assignment_value()))
            self.timer.cancel(_revocation_key(group.group_id, member.member_id))
            self._schedule_session(group.group_id, member.member_id, now_ms)
        else:
            res.add(self.remove_member(group, member.member_id, "left the group"))
        res.response = HeartbeatResponse(errors.NONE, None, req.member_id, req.member_epoch,
                                         self.config.consumer_heartbeat_interval_ms)
        return res

    def remove_member(self, group: ConsumerGroup, member_id: str, reason: str) -> Result:
        res = Result()
        if member_id not in group.members:
            return res
        self._cancel_timers(group.group_id, member_id)
        group.remove_member(member_id)
        res.records += self._member_tombstones(group.group_id, member_id)
        self._refresh_subscription_metadata(group, res)
        self._bump_group_epoch(group, res)
        log.info("group %s: member %s removed (%s)", group.group_id, member_id, reason)
        return res

    @staticmethod
    def _member_tombstones(group_id: str, member_id: str) -> list:
        return [ConsumerGroupCurrentMemberAssignmentRecord(group_id, member_id, None),
                ConsumerGroupTargetAssignmentMemberRecord(group_id, member_id, None),
                ConsumerGroupMemberMetadataRecord(group_id, member_id, None)]

    # ------------------------------------------------------------------------------------------
    # Subscriptions and the target assignment

    def resolve_subscription(self, member: ConsumerMember, topics: dict) -> set[str]:
        names = {n for n in member.subscribed_topic_names if n in topics}
        if member.subscribed_topic_regex:
            try:
                names |= matching_topics(_compiled(member.subscribed_topic_regex), topics)
            except RegexError:          # only a pattern replayed from an older log can get here
                pass
        return names

    def _refresh_subscription_metadata(self, group: ConsumerGroup, res: Result) -> bool:
        topics = self.shard.topics()
        wanted: set[str] = set()
        for m in group.members.values():
            wanted |= self.resolve_subscription(m, topics)
        meta = {n: (topics[n][0], topics[n][1]) for n in sorted(wanted)}
        if meta == group.subscription_metadata:
            return False
        group.subscription_metadata = meta
        res.records.append(ConsumerGroupPartitionMetadataRecord(group.group_id, dict(meta)))
        return True

    def _bump_group_epoch(self, group: ConsumerGroup, res: Result) -> None:
        group.group_epoch += 1
        res.records.append(ConsumerGroupMetadataRecord(group.group_id, group.group_epoch))

    def _choose_assignor(self, group: ConsumerGroup) -> str:
        votes = Counter(m.server_assignor for m in group.members.values()
                        if m.server_assignor in self.config.consumer_assignors)
        if votes:
            return max(sorted(votes), key=lambda a: votes[a])
        return self.config.consumer_assignors[0]

    def _compute_target_assignment(self, group: ConsumerGroup, res: Result) -> None:
        meta = group.subscription_metadata
        specs = {}
        for mid, m in group.members.items():
            names = self.resolve_subscription(m, meta)
            specs[mid] = MemberSpec({meta[n][0] for n in names}, group.target.get(mid, {}))
        assignor = self._choose_assignor(group)
        new = ASSIGNORS[assignor](specs, {tid: n for tid, n in meta.values()})
        for mid, a in new.items():
            clean = copy_assignment(a)
            if clean != group.target.get(mid):
                res.records.append(ConsumerGroupTargetAssignmentMemberRecord(group.group_id, mid, to_lists(clean)))
            group.target[mid] = clean
        group.assignment_epoch = group.group_epoch
        res.records.append(ConsumerGroupTargetAssignmentMetadataRecord(group.group_id, group.assignment_epoch))
        log.info("group %s: target assignment epoch %d by %s", group.group_id, group.assignment_epoch, assignor)

    def _reconcile(self, group: ConsumerGroup, member: ConsumerMember, owned, res: Result) -> None:
        try:
            nxt = reconcile(member, group.assignment_epoch, group.target.get(member.member_id, {}),
                            group.owner_of, owned)
        except ValueError as e:      # pragma: no cover - defensive
            raise GroupError(errors.FENCED_MEMBER_EPOCH, str(e)) from None
        if (nxt.state, nxt.member_epoch, nxt.assigned, nxt.pending_revocation) == (
                member.state, member.member_epoch, member.assigned, member.pending_revocation):
            return
        if nxt.member_epoch != member.member_epoch:
            member.previous_member_epoch = member.member_epoch
        member.state, member.member_epoch = nxt.state, nxt.member_epoch
        member.set_assignment(nxt.assigned, nxt.pending_revocation)
        group.set_member_partitions(member)
        res.records.append(ConsumerGroupCurrentMemberAssignmentRecord(group.group_id, member.member_id,
                                                                      member.assignment_value()))

    # ------------------------------------------------------------------------------------------
    # Timers

    def _schedule_session(self, group_id: str, member_id: str, now_ms: int) -> None:
        self.timer.schedule(_session_key(group_id, member_id), now_ms + self.config.consumer_session_timeout_ms,
                            lambda t: self._expire(group_id, member_id, "session timeout", t))

    def _schedule_timers(self, group: ConsumerGroup, member: ConsumerMember, now_ms: int) -> None:
        gid, mid = group.group_id, member.member_id
        self._schedule_session(gid, mid, now_ms)
        key = _revocation_key(gid, mid)
        if member.state == MemberState.UNREVOKED_PARTITIONS:
            if not self.timer.is_scheduled(key):
                timeout = member.rebalance_timeout_ms if member.rebalance_timeout_ms > 0 else self.config.consumer_session_timeout_ms
                self.timer.schedule(key, now_ms + timeout,
                                    lambda t: self._expire(gid, mid, "did not revoke partitions in time", t))
        else:
            self.timer.cancel(key)

    def _cancel_timers(self, group_id: str, member_id: str) -> None:
        self.timer.cancel(_session_key(group_id, member_id))
        self.timer.cancel(_revocation_key(group_id, member_id))

    def _expire(self, group_id: str, member_id: str, reason: str, now_ms: int) -> Result:
        group = self.shard.consumer_group(group_id)
        if group is None or member_id not in group.members:
            return Result()
        return self.remove_member(group, member_id, reason)

    def on_loaded(self, group: ConsumerGroup, now_ms: int) -> None:
        for m in group.members.values():
            self._schedule_timers(group, m, now_ms)

    def cancel_timers(self, group: ConsumerGroup) -> None:
        for mid in group.members:
            self._cancel_timers(group.group_id, mid)
