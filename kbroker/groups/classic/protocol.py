"""The classic rebalance protocol as a state machine over ``ClassicGroup``.

Every entry point takes ``now_ms`` and returns a ``Result``. JoinGroup and SyncGroup are
parked under the caller's token and answered in a later Result (when the join phase ends or
the leader assigns), which is how one member's request completes another's.

Follows Kafka's GroupMetadataManager (classic part): MEMBER_ID_REQUIRED for v4+, initial
rebalance delay, pending-sync expiry (a leader that never syncs), static membership.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from kbroker.groups import errors
from kbroker.groups.classic.group import ClassicGroup, ClassicMember, GroupState
from kbroker.groups.classic.messages import (HeartbeatRequest, JoinMember, JoinRequest, JoinResponse,
                                             LeaveMember, LeaveResponse, SyncRequest, SyncResponse)
from kbroker.groups.records import GroupMetadataRecord
from kbroker.groups.result import Result

if TYPE_CHECKING:
    from kbroker.groups.shard import GroupShard

log = logging.getLogger("kbroker.groups.classic")

S = GroupState


def _hb_key(group_id: str, member_id: str) -> str:
    return f"classic-heartbeat:{group_id}:{member_id}"


def _join_key(group_id: str) -> str:
    return f"classic-join:{group_id}"


def _sync_key(group_id: str) -> str:
    return f"classic-sync:{group_id}"


class ClassicProtocol:
    def __init__(self, shard: "GroupShard"):
        self.shard = shard
        self.config = shard.config
        self.timer = shard.timer

    # ------------------------------------------------------------------------------------------
    # JoinGroup

    def join(self, req: JoinRequest, token, now_ms: int) -> Result:
        res = Result()
        fail = lambda code: res.reply(token, JoinResponse(code, member_id=req.member_id)) or res  # noqa: E731
        if not req.group_id:
            return fail(errors.INVALID_GROUP_ID)
        if not (self.config.min_session_timeout_ms <= req.session_timeout_ms <= self.config.max_session_timeout_ms):
            return fail(errors.INVALID_SESSION_TIMEOUT)
        if req.rebalance_timeout_ms is None or req.rebalance_timeout_ms < 0:
            req.rebalance_timeout_ms = req.session_timeout_ms
        group, code = self.shard.classic_group_for_join(req.group_id, create=not req.member_id, now_ms=now_ms, result=res)
        if group is None:
            return fail(code)
        if not group.supports_protocols(req.protocol_type, [n for n, _ in req.protocols]):
            return fail(errors.INCONSISTENT_GROUP_PROTOCOL)
        if group.is_in(S.DEAD):
            # The group was just deleted or unloaded: the client finds the coordinator again.
            return fail(errors.COORDINATOR_NOT_AVAILABLE)
        if not req.member_id:
            return res.add(self._join_new_member(group, req, token, now_ms))
        return res.add(self._join_known_member(group, req, token, now_ms))

    def _group_full(self, group: ClassicGroup) -> bool:
        return len(group.members) >= self.config.max_size

    def _join_new_member(self, group: ClassicGroup, req: JoinRequest, token, now_ms: int) -> Result:
        res = Result()
        instance = req.group_instance_id
        new_id = self.shard.new_member_id(instance or req.client_id)
        if instance is not None and instance in group.static_members:
            return self._replace_static_member(group, group.static_members[instance], new_id, req, token, now_ms)
        if self._group_full(group):
            res.reply(token, JoinResponse(errors.GROUP_MAX_SIZE_REACHED))
            return res
        if instance is None and req.requires_known_member_id:
            # KIP-394: hand out the id first, so a client that retries after a lost response
            # does not leave a ghost member behind.
            group.pending_members.add(new_id)
            self.timer.schedule(_hb_key(group.group_id, new_id), now_ms + req.session_timeout_ms,
                                lambda t, g=group.group_id, m=new_id: self.expire_heartbeat(g, m, t))
            res.reply(token, JoinResponse(errors.MEMBER_ID_REQUIRED, member_id=new_id))
            return res
        return self._add_member_and_rebalance(group, new_id, req, token, now_ms)

    def _join_known_member(self, group: ClassicGroup, req: JoinRequest, token, now_ms: int) -> Result:
        res = Result()
        mid = req.member_id
        if mid in group.pending_members:
            if req.group_instance_id is None and self._group_full(group) and mid not in group.members:
                group.pending_members.discard(mid)
                self.timer.cancel(_hb_key(group.group_id, mid))
                res.reply(token, JoinResponse(errors.GROUP_MAX_SIZE_REACHED, member_id=mid))
                return res
            return self._add_member_and_rebalance(group, mid, req, token, now_ms)
        code = self._validate_member(group, mid, req.group_instance_id)
        if code:
            res.reply(token, JoinResponse(code, member_id=mid))
            return res
        member = group.members[mid]
        if group.is_in(S.PREPARING_REBALANCE):
            self._update_member(group, member, req, token, res)
            return res.add(self._maybe_complete_join(group, now_ms))
        if group.is_in(S.COMPLETING_REBALANCE):
            if member.same_protocols(req.protocols):
                # A retry of a join whose response was lost: answer with the current generation.
                res.reply(token, self._join_response(group, member, req.version))
                return res
            self._update_member(group, member, req, token, res)
            return res.add(self._prepare_rebalance(group, now_ms, f"{mid} changed its protocols"))
        if group.is_in(S.STABLE):
            if group.is_leader(mid) or not member.same_protocols(req.protocols):
                # The leader rejoining means it wants a new assignment (e.g. metadata changed).
                self._update_member(group, member, req, token, res)
                return res.add(self._prepare_rebalance(group, now_ms, f"{mid} rejoined"))
            res.reply(token, self._join_response(group, member, req.version))
            self._reschedule_heartbeat(group, member, now_ms)
            return res
        res.reply(token, JoinResponse(errors.UNKNOWN_MEMBER_ID, member_id=mid))
        return res

    def _update_member(self, group: ClassicGroup, member: ClassicMember, req: JoinRequest, token,
                       res: Result) -> None:
        if member.join_token is not None and member.join_token is not token:
            # A duplicate join: the older request gets an answer it can retry from.
            res.reply(member.join_token, JoinResponse(errors.REBALANCE_IN_PROGRESS, member_id=member.member_id))
        group.set_protocols(member, [(n, bytes(m)) for n, m in req.protocols])
        member.session_timeout_ms = req.session_timeout_ms
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.client_id, member.client_host = req.client_id, req.client_host
        member.join_token, member.join_version = token, req.version

    def _add_member_and_rebalance(self, group: ClassicGroup, member_id: str, req: JoinRequest, token,
                                  now_ms: int) -> Result:
        member = ClassicMember(member_id, req.group_instance_id, req.client_id, req.client_host,
                               req.rebalance_timeout_ms, req.session_timeout_ms, req.protocol_type,
                               [(n, bytes(m)) for n, m in req.protocols], join_token=token,
                               join_version=req.version, is_new=True)
        group.add(member)
        if group.is_in(S.PREPARING_REBALANCE) and group.previous_state == S.EMPTY:
            group.new_member_added = True
        # A new member that never completes its join is dropped after this long.
        self.timer.schedule(_hb_key(group.group_id, member_id), now_ms + self.config.new_member_join_timeout_ms,
                            lambda t, g=group.group_id, m=member_id: self.expire_heartbeat(g, m, t))
        return self._maybe_prepare_rebalance_or_complete_join(group, now_ms, f"{member_id} joined")

    def _replace_static_member(self, group: ClassicGroup, old_id: str, new_id: str, req: JoinRequest, token,
                               now_ms: int) -> Result:
        """A known group.instance.id joins with no member id: the new instance takes over and
        the old one is fenced (FENCED_INSTANCE_ID on whatever it has parked)."""
        res = Result()
        old = group.members[old_id]
        if old.join_token is not None:
            res.reply(old.join_token, JoinResponse(errors.FENCED_INSTANCE_ID, member_id=old_id))
            old.join_token = None
        if old.sync_token is not None:
            res.reply(old.sync_token, SyncResponse(errors.FENCED_INSTANCE_ID))
            old.sync_token = None
        self.timer.cancel(_hb_key(group.group_id, old_id))
        member = group.replace_static_member(req.group_instance_id, old_id, new_id)
        member.session_timeout_ms, member.rebalance_timeout_ms = req.session_timeout_ms, req.rebalance_timeout_ms
        member.client_id, member.client_host = req.client_id, req.client_host
        self._reschedule_heartbeat(group, member, now_ms)
        if group.is_in(S.STABLE):
            # KIP-345: a restarted static member takes its old place without a rebalance
            # unless its protocols would change the group's protocol. Its metadata may
            # differ (a new process owns no partitions yet): Kafka takes it and keeps the
            # current assignment (GroupMetadataManager.updateStaticMemberThenRebalanceOrCompleteJoin).
            group.set_protocols(member, [(n, bytes(m)) for n, m in req.protocols])
            if group.select_protocol() == group.protocol_name:
                res.records.append(GroupMetadataRecord(group.group_id, group.to_record_value()))
                res.reply(token, self._join_response(group, member, req.version, static_rejoin=True))
                return res
        self._update_member(group, member, req, token, res)
        if group.is_in(S.PREPARING_REBALANCE):
            return res.add(self._maybe_complete_join(group, now_ms))
        return res.add(self._prepare_rebalance(group, now_ms, f"static member {req.group_instance_id} replaced"))

    def _join_response(self, group: ClassicGroup, member: ClassicMember, version: int,
                       static_rejoin: bool = False) -> JoinResponse:
        leader = group.is_leader(member.member_id)
        # A rejoining static leader gets the member list but is told to keep the assignment
        # (v9); older clients cannot be told that, so they see a follower's answer.
        members, skip = [], False
        if leader and (not static_rejoin or version >= 9):
            members = [JoinMember(m.member_id, m.group_instance_id, m.metadata(group.protocol_name))
                       for m in group.members.values()]
            skip = static_rejoin
        return JoinResponse(errors.NONE, group.generation, group.protocol_type, group.protocol_name,
                            group.leader_id or "", member.member_id, members, skip)

    # ------------------------------------------------------------------------------------------
    # Rebalance phases

    def _maybe_prepare_rebalance_or_complete_join(self, group: ClassicGroup, now_ms: int, reason: str) -> Result:
        if group.is_in(S.STABLE, S.COMPLETING_REBALANCE, S.EMPTY):
            return self._prepare_rebalance(group, now_ms, reason)
        return self._maybe_complete_join(group, now_ms)

    def _prepare_rebalance(self, group: ClassicGroup, now_ms: int, reason: str) -> Result:
        res = Result()
        if group.is_in(S.COMPLETING_REBALANCE):
            # The assignment the members wait for will never come: tell them to rejoin.
            for m in group.members.values():
                m.assignment = b""
                if m.sync_token is not None:
                    res.reply(m.sync_token, SyncResponse(errors.REBALANCE_IN_PROGRESS))
                    m.sync_token = None
        group.pending_sync.clear()
        self.timer.cancel(_sync_key(group.group_id))
        initial = group.is_in(S.EMPTY)
        gid = group.group_id
        if initial:
            rebalance_timeout = group.rebalance_timeout_ms()
            delay = min(self.config.initial_rebalance_delay_ms, rebalance_timeout)
            remaining = max(rebalance_timeout - self.config.initial_rebalance_delay_ms, 0)
            group.new_member_added = False
            self.timer.schedule(_join_key(gid), now_ms + delay,
                                lambda t: self._initial_join_expired(gid, remaining, t))
        else:
            self.timer.schedule(_join_key(gid), now_ms + group.rebalance_timeout_ms(),
                                lambda t: self._join_expired(gid, t))
        log.info("group %s: preparing rebalance (generation %d): %s", gid, group.generation, reason)
        group.transition(S.PREPARING_REBALANCE, now_ms)
        if not initial:
            res.add(self._maybe_complete_join(group, now_ms))
        return res

    def _initial_join_expired(self, group_id: str, remaining_ms: int, now_ms: int) -> Result:
        group = self.shard.classic_group(group_id)
        if group is None or not group.is_in(S.PREPARING_REBALANCE):
            return Result()
        if group.new_member_added and remaining_ms > 0:
            # Members are still arriving: wait another delay, within the rebalance timeout.
            group.new_member_added = False
            delay = min(self.config.initial_rebalance_delay_ms, remaining_ms)
            rest = max(remaining_ms - self.config.initial_rebalance_delay_ms, 0)
            self.timer.schedule(_join_key(group_id), now_ms + delay,
                                lambda t: self._initial_join_expired(group_id, rest, t))
            return Result()
        return self._complete_join(group, now_ms)

    def _join_expired(self, group_id: str, now_ms: int) -> Result:
        group = self.shard.classic_group(group_id)
        if group is None or not group.is_in(S.PREPARING_REBALANCE):
            return Result()
        return self._complete_join(group, now_ms)

    def _maybe_complete_join(self, group: ClassicGroup, now_ms: int) -> Result:
        if (group.is_in(S.PREPARING_REBALANCE) and group.has_all_members_joined()
                and group.previous_state != S.EMPTY):
            return self._complete_join(group, now_ms)
        return Result()

    def _complete_join(self, group: ClassicGroup, now_ms: int) -> Result:
        res = Result()
        gid = group.group_id
        self.timer.cancel(_join_key(gid))
        for m in list(group.members.values()):
            if not m.awaiting_join and not m.is_static:
                group.remove(m.member_id)
                self.timer.cancel(_hb_key(gid, m.member_id))
        if group.is_in(S.DEAD):
            return res
        if group.members and not group.maybe_elect_joined_leader():
            # Nobody rejoined: wait for session timeouts to clear the stragglers.
            self.timer.schedule(_join_key(gid), now_ms + group.rebalance_timeout_ms(),
                                lambda t: self._join_expired(gid, t))
            return res
        group.generation += 1
        if not group.members:
            group.protocol_name = None
            group.leader_id = None
            group.transition(S.EMPTY, now_ms)
            log.info("group %s: generation %d is empty", gid, group.generation)
            res.records.append(GroupMetadataRecord(gid, group.to_record_value({})))
            return res
        group.protocol_name = group.select_protocol()
        group.transition(S.COMPLETING_REBALANCE, now_ms)
        log.info("group %s: generation %d with %d members, leader %s, protocol %s", gid, group.generation,
                 len(group.members), group.leader_id, group.protocol_name)
        for m in group.members.values():
            if m.join_token is not None:
                res.reply(m.join_token, self._join_response(group, m, m.join_version))
                m.join_token = None
            m.is_new = False
            self._reschedule_heartbeat(group, m, now_ms)
        # Everyone must now sync within the rebalance timeout, the leader above all.
        group.pending_sync = set(group.members)
        generation = group.generation
        self.timer.schedule(_sync_key(gid), now_ms + group.rebalance_timeout_ms(),
                            lambda t: self._pending_sync_expired(gid, generation, t))
        return res

    def _pending_sync_expired(self, group_id: str, generation: int, now_ms: int) -> Result:
        group = self.shard.classic_group(group_id)
        if (group is None or group.generation != generation
                or not group.is_in(S.COMPLETING_REBALANCE, S.STABLE) or not group.pending_sync):
            return Result()
        res = Result()
        missing = sorted(group.pending_sync)
        for mid in missing:
            member = group.remove(mid)
            self.timer.cancel(_hb_key(group_id, mid))
            if member is not None and member.sync_token is not None:
                res.reply(member.sync_token, SyncResponse(errors.UNKNOWN_MEMBER_ID))
        log.info("group %s: members %s did not sync in time", group_id, missing)
        return res.add(self._maybe_prepare_rebalance_or_complete_join(group, now_ms, "members failed to sync"))

    # ------------------------------------------------------------------------------------------
    # SyncGroup

    def sync(self, req: SyncRequest, token, now_ms: int) -> Result:
        res = Result()
        group = self.shard.classic_group(req.group_id)
        if group is None:
            code = errors.UNKNOWN_MEMBER_ID if req.group_id in self.shard.groups or req.group_id else errors.INVALID_GROUP_ID
            res.reply(token, SyncResponse(code))
            return res
        if group.is_in(S.DEAD):
            res.reply(token, SyncResponse(errors.COORDINATOR_NOT_AVAILABLE))
            return res
        code = self._validate_member(group, req.member_id, req.group_instance_id)
        if not code and req.generation_id != group.generation:
            code = errors.ILLEGAL_GENERATION
        if not code and ((req.protocol_type is not None and req.protocol_type != group.protocol_type)
                         or (req.protocol_name is not None and req.protocol_name != group.protocol_name)):
            code = errors.INCONSISTENT_GROUP_PROTOCOL
        if code:
            res.reply(token, SyncResponse(code))
            return res
        group.pending_sync.discard(req.member_id)
        if not group.pending_sync:
            self.timer.cancel(_sync_key(group.group_id))
        member = group.members[req.member_id]
        if group.is_in(S.EMPTY):
            res.reply(token, SyncResponse(errors.UNKNOWN_MEMBER_ID))
        elif group.is_in(S.PREPARING_REBALANCE):
            res.reply(token, SyncResponse(errors.REBALANCE_IN_PROGRESS))
        elif group.is_in(S.COMPLETING_REBALANCE):
            if member.sync_token is not None and member.sync_token is not token:
                res.reply(member.sync_token, SyncResponse(errors.REBALANCE_IN_PROGRESS))
            member.sync_token = token
            self._reschedule_heartbeat(group, member, now_ms)
            if group.is_leader(req.member_id):
                res.add(self._apply_assignment(group, req.assignments, now_ms))
        else:   # Stable: the assignment is known, e.g. a follower syncing after the leader
            self._reschedule_heartbeat(group, member, now_ms)
            res.reply(token, SyncResponse(errors.NONE, group.protocol_type, group.protocol_name, member.assignment))
        return res

    def _apply_assignment(self, group: ClassicGroup, assignments: dict[str, bytes], now_ms: int) -> Result:
        res = Result()
        full = {mid: bytes(assignments.get(mid, b"")) for mid in group.members}
        res.records.append(GroupMetadataRecord(group.group_id, group.to_record_value(full)))
        for mid, m in group.members.items():
            m.assignment = full[mid]
            if m.sync_token is not None:
                res.reply(m.sync_token, SyncResponse(errors.NONE, group.protocol_type, group.protocol_name, m.assignment))
                m.sync_token = None
            self._reschedule_heartbeat(group, m, now_ms)
        group.transition(S.STABLE, now_ms)
        return res

    # ------------------------------------------------------------------------------------------
    # Heartbeat and session expiry

    def heartbeat(self, req: HeartbeatRequest, now_ms: int) -> Result:
        group = self.shard.classic_group(req.group_id)
        if group is None:
            return Result(response=errors.UNKNOWN_MEMBER_ID)
        if group.is_in(S.DEAD):
            return Result(response=errors.COORDINATOR_NOT_AVAILABLE)
        code = self._validate_member(group, req.member_id, req.group_instance_id)
        if code:
            return Result(response=code)
        if req.generation_id != group.generation:
            return Result(response=errors.ILLEGAL_GENERATION)
        member = group.members[req.member_id]
        if group.is_in(S.EMPTY):
            return Result(response=errors.UNKNOWN_MEMBER_ID)
        self._reschedule_heartbeat(group, member, now_ms)
        if group.is_in(S.PREPARING_REBALANCE):
            return Result(response=errors.REBALANCE_IN_PROGRESS)
        return Result(response=errors.NONE)

    def _reschedule_heartbeat(self, group: ClassicGroup, member: ClassicMember, now_ms: int) -> None:
        gid, mid = group.group_id, member.member_id
        self.timer.schedule(_hb_key(gid, mid), now_ms + member.session_timeout_ms,
                            lambda t: self.expire_heartbeat(gid, mid, t))

    def expire_heartbeat(self, group_id: str, member_id: str, now_ms: int) -> Result:
        group = self.shard.classic_group(group_id)
        if group is None or group.is_in(S.DEAD):
            return Result()
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            return self._maybe_complete_join(group, now_ms)
        member = group.members.get(member_id)
        if member is None:
            return Result()
        if member.has_satisfied_heartbeat():
            self._reschedule_heartbeat(group, member, now_ms)
            return Result()
        log.info("group %s: member %s session expired", group_id, member_id)
        return self._remove_member_and_update(group, member, now_ms, "session timeout")

    def _remove_member_and_update(self, group: ClassicGroup, member: ClassicMember, now_ms: int, reason: str) -> Result:
        res = Result()
        if member.join_token is not None:
            # A new member timing out with a parked join: it may retry as a fresh member.
            res.reply(member.join_token, JoinResponse(errors.UNKNOWN_MEMBER_ID))
            member.join_token = None
        if member.sync_token is not None:
            res.reply(member.sync_token, SyncResponse(errors.UNKNOWN_MEMBER_ID))
            member.sync_token = None
        group.remove(member.member_id)
        self.timer.cancel(_hb_key(group.group_id, member.member_id))
        if group.is_in(S.STABLE, S.COMPLETING_REBALANCE):
            return res.add(self._prepare_rebalance(group, now_ms, f"{member.member_id} removed: {reason}"))
        if group.is_in(S.PREPARING_REBALANCE) and group.has_all_members_joined():
            return res.add(self._complete_join(group, now_ms))
        return res

    # ------------------------------------------------------------------------------------------
    # LeaveGroup

    def leave(self, group_id: str, members: list[LeaveMember], now_ms: int) -> Result:
        group = self.shard.classic_group(group_id)
        if group is None:
            return Result(response=LeaveResponse(errors.UNKNOWN_MEMBER_ID))
        if group.is_in(S.DEAD):
            return Result(response=LeaveResponse(errors.COORDINATOR_NOT_AVAILABLE))
        res = Result()
        answers = []
        removed, pending_removed = 0, False
        for lm in members:
            mid = lm.member_id
            if lm.group_instance_id is not None:
                existing = group.static_members.get(lm.group_instance_id)
                if existing is None:
                    code = errors.UNKNOWN_MEMBER_ID
                elif mid and mid != existing:
                    code = errors.FENCED_INSTANCE_ID
                else:
                    code, mid = errors.NONE, existing
            elif mid in group.pending_members:
                group.pending_members.discard(mid)
                self.timer.cancel(_hb_key(group_id, mid))
                code = errors.NONE
                pending_removed = True
                mid = None
            elif mid in group.members:
                code = errors.NONE
            else:
                code = errors.UNKNOWN_MEMBER_ID
            if code == errors.NONE and mid is not None:
                member = group.remove(mid)
                self.timer.cancel(_hb_key(group_id, mid))
                if member.join_token is not None:
                    res.reply(member.join_token, JoinResponse(errors.UNKNOWN_MEMBER_ID))
                if member.sync_token is not None:
                    res.reply(member.sync_token, SyncResponse(errors.UNKNOWN_MEMBER_ID))
                removed += 1
                log.info("group %s: member %s left (%s)", group_id, mid, lm.reason)
            answers.append((lm.member_id, lm.group_instance_id, code))
        if removed:
            res.add(self._maybe_prepare_rebalance_or_complete_join(group, now_ms, "members left"))
        elif pending_removed:
            res.add(self._maybe_complete_join(group, now_ms))
        res.response = LeaveResponse(errors.NONE, answers)
        return res

    # ------------------------------------------------------------------------------------------

    @staticmethod
    def _validate_member(group: ClassicGroup, member_id: str, instance_id: str | None) -> int:
        if instance_id is not None:
            existing = group.static_members.get(instance_id)
            if existing is None:
                return errors.UNKNOWN_MEMBER_ID
            if existing != member_id:
                return errors.FENCED_INSTANCE_ID
            return errors.NONE
        return errors.NONE if member_id in group.members else errors.UNKNOWN_MEMBER_ID

    def on_loaded(self, group: ClassicGroup, now_ms: int) -> None:
        """After replay: give every restored member a full session to show up again."""
        for m in group.members.values():
            self._reschedule_heartbeat(group, m, now_ms)

    def cancel_timers(self, group: ClassicGroup) -> None:
        for mid in list(group.members) + list(group.pending_members):
            self.timer.cancel(_hb_key(group.group_id, mid))
        self.timer.cancel(_join_key(group.group_id))
        self.timer.cancel(_sync_key(group.group_id))
