"""Moves one member's current assignment toward its target, one safe step at a time.

A member first gives up what it must revoke (keeping its epoch), and only then receives new
partitions, and only those no other member still owns. Same rules as Kafka's
CurrentAssignmentBuilder, written from the KIP-848 description.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from kbroker.groups.consumer.group import Assignment, ConsumerMember, MemberState


@dataclass
class NextState:
    state: MemberState
    member_epoch: int
    assigned: Assignment
    pending_revocation: Assignment


def _owns_any(owned: Assignment | None, partitions: Assignment) -> bool:
    """Whether the member still reports owning any of ``partitions``; unknown (None) counts
    as yes, since the member has not confirmed anything."""
    if owned is None:
        return True
    return any(owned.get(t, set()) & ps for t, ps in partitions.items())


def reconcile(member: ConsumerMember, target_epoch: int, target: Assignment,
              owner_of: Callable[[Any, int], str | None], owned: Assignment | None) -> NextState:
    current = NextState(member.state, member.member_epoch, member.assigned, member.pending_revocation)
    if member.state == MemberState.STABLE:
        if member.member_epoch == target_epoch:
            return current
        return _next(member, member.member_epoch, target_epoch, target, owner_of, owned)
    if member.state == MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(owned, member.pending_revocation):
            return current
        # Revocation acknowledged: the epoch moves on even if more must be revoked.
        return _next(member, member.member_epoch + 1, target_epoch, target, owner_of, owned)
    if member.state == MemberState.UNRELEASED_PARTITIONS:
        return _next(member, member.member_epoch, target_epoch, target, owner_of, owned)
    # UNKNOWN: only an empty-handed member can be brought back.
    return _next(member, target_epoch, target_epoch, target, owner_of, owned)


def _next(member: ConsumerMember, member_epoch: int, target_epoch: int, target: Assignment,
          owner_of, owned: Assignment | None) -> NextState:
    assigned: Assignment = {}
    revoke: Assignment = {}
    free_new: Assignment = {}
    unreleased = False
    for t in set(target) | set(member.assigned):
        want = target.get(t, set())
        have = member.assigned.get(t, set())
        keep = have & want
        if keep:
            assigned[t] = set(keep)
        if have - want:
            revoke[t] = have - want
        new = want - keep
        free = {p for p in new if owner_of(t, p) in (None, member.member_id)}
        if len(free) != len(new):
            unreleased = True
        if free:
            free_new[t] = free
    if revoke and _owns_any(owned, revoke):
        return NextState(MemberState.UNREVOKED_PARTITIONS, member_epoch, assigned, revoke)
    for t, ps in free_new.items():
        assigned.setdefault(t, set()).update(ps)
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return NextState(state, target_epoch, assigned, {})
