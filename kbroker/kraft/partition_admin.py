"""Operator requests on partitions, decided on the active controller (Kafka's
ReplicationControlManager.electLeaders / alterPartitionReassignments /
listPartitionReassignments, and the QuorumController's leader-balance task).

Pure functions over the metadata image: each returns the PartitionChangeRecords to commit and
the per-partition outcome; nothing here writes, awaits or reads a clock. The rules of a single
partition change live in ``kbroker.kraft.partition_change``; this module applies them to
requests.

* ElectLeaders PREFERRED (0): the first replica leads when it is live and in the ISR
  (ELECTION_NOT_NEEDED if it already does, PREFERRED_LEADER_NOT_AVAILABLE if it cannot);
  UNCLEAN (1): a partition without a leader gets one, from the ISR if a member is live, else
  any live replica (reported as possible data loss; ELECTION_NOT_NEEDED if it has a leader,
  ELIGIBLE_LEADERS_NOT_AVAILABLE if no replica is live). A null partition list means every
  partition, and then the ones that needed nothing are left out of the answer.
* AlterPartitionReassignments: the target replicas are validated like a manual assignment;
  the new replicas join (``adding``), catch up and enter the ISR, then the old ones
  (``removing``) leave (``partition_change.alter_partition`` completes it). A change that adds
  nobody completes at once. Null replicas cancel (NO_REASSIGNMENT_IN_PROGRESS if none runs).
* Auto leader rebalance (``auto.leader.rebalance.enable``): every
  ``leader.imbalance.check.interval.seconds`` the brokers whose share of partitions led by
  someone else exceeds ``leader.imbalance.per.broker.percentage`` get their preferred
  leaderships back.
"""

from __future__ import annotations

import logging

from kbroker.kraft.partition_change import (NO_LEADER, NO_LEADER_CHANGE, _after, _complete_reassignment,
                                            _live, change_record, elect_leader, leaderless_election,
                                            preferred_leader_change, start_reassignment)
from kbroker.wire.errors import Errors

log = logging.getLogger("kbroker.controller.partitions")

PREFERRED = 0
UNCLEAN = 1


# -- ElectLeaders ------------------------------------------------------------------------------

def _unclean_change(image, topic, p, live):
    """ElectLeaders(UNCLEAN) for one partition: (error, record)."""
    if p.leader != NO_LEADER:
        return Errors.ELECTION_NOT_NEEDED, None
    e, rec = leaderless_election(topic, p, live, unclean_allowed=True)
    if e.leader == NO_LEADER:
        return Errors.ELIGIBLE_LEADERS_NOT_AVAILABLE, None
    return Errors.NONE, rec


def elect_one(image, topic_name: str, partition: int, election_type: int, live=None):
    """(error, message, record or None) for one partition."""
    t = image.topics_by_name.get(topic_name)
    if t is None:
        return Errors.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {topic_name}", None
    p = t.partitions.get(partition)
    if p is None:
        return Errors.UNKNOWN_TOPIC_OR_PARTITION, f"No such partition as {topic_name}-{partition}", None
    if election_type == PREFERRED:
        err, rec = preferred_leader_change(image, t.topic_id, p)
    elif election_type == UNCLEAN:
        err, rec = _unclean_change(image, t, p, _live(image) if live is None else live)
    else:
        return Errors.INVALID_REQUEST, f"Unknown election type {election_type}", None
    return err, None, rec


def elect_leaders(image, election_type: int, targets):
    """``targets``: [(topic, [partition, ...])] or None for every partition.
    Returns (records, [(topic, [(partition, error, message)])])."""
    live = _live(image)
    records: list = []
    results: list = []
    everything = targets is None
    if everything:
        targets = [(t.name, sorted(t.partitions)) for t in image.topics_by_name.values()]
    for topic, partitions in targets:
        out = []
        for pid in partitions:
            err, msg, rec = elect_one(image, topic, pid, election_type, live)
            if rec is not None:
                records.append(rec)
            if everything and err == Errors.ELECTION_NOT_NEEDED:
                continue   # Kafka leaves these out when asked about every partition
            out.append((pid, int(err), msg))
        if out or not everything:
            results.append((topic, out))
    return records, results


# -- auto leader rebalance ---------------------------------------------------------------------

def imbalance_by_broker(image) -> dict[int, tuple[int, int]]:
    """broker -> (partitions it is preferred leader of, of those led by someone else)."""
    out: dict[int, list[int]] = {}
    for t in image.topics_by_name.values():
        for p in t.partitions.values():
            if not p.replicas:
                continue
            c = out.setdefault(p.replicas[0], [0, 0])
            c[0] += 1
            if p.leader != p.replicas[0]:
                c[1] += 1
    return {b: (n, off) for b, (n, off) in out.items()}


def rebalance_leaders(image, per_broker_percentage: int) -> list:
    """The preferred-leader elections of every broker whose imbalance ratio is above
    ``per_broker_percentage`` (only the ones that can happen: preferred live and in the ISR)."""
    live = _live(image)
    over = {b for b, (n, off) in imbalance_by_broker(image).items()
            if b in live and n and off * 100 > per_broker_percentage * n}
    records = []
    for t in image.topics_by_name.values():
        for p in t.partitions.values():
            if p.replicas and p.replicas[0] in over:
                err, rec = preferred_leader_change(image, t.topic_id, p)
                if rec is not None:
                    records.append(rec)
    return records


class IntervalTimer:
    """Due every ``interval_ms`` (pure: the caller passes ``now_ms``)."""

    def __init__(self, interval_ms: int, now_ms: int) -> None:
        self.interval_ms = interval_ms
        self.next_ms = now_ms + interval_ms

    def due(self, now_ms: int) -> bool:
        if now_ms < self.next_ms:
            return False
        self.next_ms = now_ms + self.interval_ms
        return True


# -- reassignments -----------------------------------------------------------------------------

def _validate_target(image, replicas: list[int]) -> tuple[int, str | None]:
    if not replicas:
        return Errors.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes an empty replica list."
    if len(set(replicas)) != len(replicas):
        return (Errors.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes the broker(s) more than once: {replicas}")
    for r in replicas:
        if r not in image.brokers:
            return (Errors.INVALID_REPLICA_ASSIGNMENT,
                    f"The manual partition assignment includes broker {r}, but no such broker is registered.")
    return Errors.NONE, None


def _cancel(image, topic_name, topic_id, p):
    """Back to the replicas from before the reassignment (Kafka's PartitionReassignmentRevert).
    When only new replicas were in the ISR, an original one must lead uncleanly."""
    original = [r for r in p.replicas if r not in p.adding_replicas]
    isr = [r for r in p.isr if r in original]
    leader = NO_LEADER_CHANGE
    if p.leader not in original or not isr:
        e = elect_leader(original, isr, _live(image), unclean_allowed=not isr)
        leader = e.leader
        if not isr:
            log.warning("cancelling the reassignment of %s-%d: no original replica is in the "
                        "ISR %s; %s leads uncleanly, records only the ISR had are lost",
                        topic_name, p.partition_id, p.isr, e.leader if e.leader != NO_LEADER else "nobody yet")
            isr = [e.leader if e.leader != NO_LEADER else original[0]]
    return change_record(topic_id, p, replicas=original, isr=isr, leader=leader, adding=[], removing=[])


def reassign_one(image, topic_name: str, partition: int, replicas: list[int] | None):
    """(error, message, [records]) for one partition of AlterPartitionReassignments."""
    t = image.topics_by_name.get(topic_name)
    p = t.partitions.get(partition) if t is not None else None
    if p is None:
        return Errors.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find partition {topic_name}:{partition}.", []
    ongoing = bool(p.adding_replicas or p.removing_replicas)
    if replicas is None:
        if not ongoing:
            return Errors.NO_REASSIGNMENT_IN_PROGRESS, None, []
        rec = _cancel(image, topic_name, t.topic_id, p)
        return Errors.NONE, None, [rec] if rec is not None else []
    err, msg = _validate_target(image, replicas)
    if err:
        return err, msg, []
    start = start_reassignment(t.topic_id, p, list(replicas))
    if start is None:
        return Errors.NONE, None, []
    after = _after(t, p, [start])     # the state once the start is applied
    replicas_, isr, leader = after.replicas, after.isr, NO_LEADER_CHANGE
    adding, removing = after.adding_replicas, after.removing_replicas
    done = _complete_reassignment(t.topic_id, after, after.isr, _live(image))
    if done is not None:   # nobody to wait for (only removals): straight to the target
        replicas_ = done.replicas if done.replicas is not None else replicas_
        isr = done.isr if done.isr is not None else isr
        leader, adding, removing = done.leader, [], []
    rec = change_record(t.topic_id, p, replicas=replicas_, isr=isr, leader=leader,
                        adding=adding, removing=removing)
    return Errors.NONE, None, [rec] if rec is not None else []


def alter_reassignments(image, targets):
    """``targets``: [(topic, [(partition, replicas or None)])].
    Returns (records, [(topic, [(partition, error, message)])])."""
    records: list = []
    results = []
    for topic, parts in targets:
        out = []
        for pid, replicas in parts:
            err, msg, recs = reassign_one(image, topic, pid, replicas)
            records += recs
            out.append((pid, int(err), msg))
            if recs:
                log.info("reassignment of %s-%d to %s: %s", topic, pid, replicas,
                         "cancelled" if replicas is None else "started")
        results.append((topic, out))
    return records, results


def list_reassignments(image, targets=None):
    """[(topic, [(partition, replicas, adding, removing)])] of the reassignments in progress,
    among ``targets`` ([(topic, [partition])]) or all of them (None)."""
    if targets is None:
        targets = [(t.name, sorted(t.partitions)) for t in image.topics_by_name.values()]
    out = []
    for topic, parts in targets:
        t = image.topics_by_name.get(topic)
        if t is None:
            continue
        found = []
        for pid in parts:
            p = t.partitions.get(pid)
            if p is not None and (p.adding_replicas or p.removing_replicas):
                found.append((pid, list(p.replicas), list(p.adding_replicas), list(p.removing_replicas)))
        if found:
            out.append((topic, found))
    return out


# -- the controller's periodic partition work --------------------------------------------------

class PartitionTasks:
    """What the active controller does on its own, on a timer: restore preferred leaders
    (``auto.leader.rebalance.enable``, every ``leader.imbalance.check.interval.seconds``) and
    give leaderless partitions a leader where unclean election is now allowed (a topic's
    ``unclean.leader.election.enable`` turned on while it had no leader). ``op(now_ms)``
    returns the controller operation to submit, or None."""

    UNCLEAN_CHECK_MS = 1000

    def __init__(self, *, auto_rebalance: bool, check_interval_ms: int, imbalance_percentage: int,
                 unclean_default, now_ms: int) -> None:
        self.auto_rebalance = auto_rebalance
        self.balance = IntervalTimer(check_interval_ms, now_ms)
        self.unclean = IntervalTimer(self.UNCLEAN_CHECK_MS, now_ms)
        self.percentage = imbalance_percentage
        self.unclean_default = unclean_default     # () -> bool, read when the op runs

    @classmethod
    def from_config(cls, cfg, unclean_default, now_ms: int) -> "PartitionTasks":
        return cls(auto_rebalance=cfg["auto.leader.rebalance.enable"],
                   check_interval_ms=cfg["leader.imbalance.check.interval.seconds"] * 1000,
                   imbalance_percentage=cfg["leader.imbalance.per.broker.percentage"],
                   unclean_default=unclean_default, now_ms=now_ms)

    def op(self, now_ms: int):
        balance = self.auto_rebalance and self.balance.due(now_ms)
        unclean = self.unclean.due(now_ms)
        if not balance and not unclean:
            return None

        def run(c, now):
            from kbroker.kraft.controller import ControllerResult
            from kbroker.kraft.partition_change import elect_leaders_for_offline
            records = []
            if unclean and any(p.leader == NO_LEADER for t in c.image.topics_by_name.values()
                               for p in t.partitions.values()):
                records += elect_leaders_for_offline(c.image, unclean_default=self.unclean_default())
            if balance:   # (each change is judged on the image: one per partition)
                taken = {(r.topic_id, r.partition_id) for r in records}
                moves = [r for r in rebalance_leaders(c.image, self.percentage)
                         if (r.topic_id, r.partition_id) not in taken]
                if moves:
                    log.info("auto leader rebalance: %d partitions back to their preferred leader", len(moves))
                records += moves
            return ControllerResult(records, len(records))
        return run
