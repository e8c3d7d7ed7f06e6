"""The controller's partition decisions, as pure functions over the metadata image.

Each returns the PartitionChangeRecords (or PartitionRecords) to commit; nothing here
writes, awaits or reads a clock. The controller (kbroker.kraft.controller) wraps each in a
thin method; the broker lifecycle (fencing, controlled shutdown) calls
``leadership_off_broker``.

Kafka's rules (QuorumController / PartitionChangeBuilder / ReplicationControlManager):

* a new leader comes from the ISR, first in replica order, among live brokers; with
  ``unclean.leader.election.enable`` (off by default) any live replica may lead when no ISR
  member can, which loses whatever the ISR had and it did not (reported as data loss);
* a broker leaving (fenced, shutting down) leaves every ISR it is in, unless it is the last
  member: the ISR then keeps it (so a clean election stays possible when it returns) and
  the partition has no leader;
* AlterPartition from a leader is checked against the partition's current leader epoch and
  partition epoch; stale proposals are refused, so an ISR change is never lost or doubled;
* reassignment: the target replicas are added (``adding_replicas``), catch up and join the
  ISR; then the old ones (``removing_replicas``) leave, and the leader moves if it was one;
* preferred leader: the first replica leads when it is live and in the ISR.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Iterable

from kbroker.wire.errors import Errors
from kbroker.wire.generated.partition_change_record import PartitionChangeRecord

log = logging.getLogger("kbroker.controller.partitions")

NO_LEADER = -1
NO_LEADER_CHANGE = -2


@dataclass(frozen=True, slots=True)
class Election:
    leader: int          # NO_LEADER when nobody can lead
    unclean: bool = False


def elect_leader(replicas: Iterable[int], isr: Iterable[int], live: set[int],
                 unclean_allowed: bool = False) -> Election:
    isr = set(isr)
    for r in replicas:
        if r in isr and r in live:
            return Election(r)
    if unclean_allowed:
        for r in replicas:
            if r in live:
                return Election(r, unclean=True)
    return Election(NO_LEADER)


def change_record(topic_id, p, *, isr=None, leader: int = NO_LEADER_CHANGE, replicas=None,
                  adding=None, removing=None) -> PartitionChangeRecord | None:
    """A PartitionChangeRecord with only what differs from ``p`` (None if nothing does)."""
    kw = {}
    if isr is not None and list(isr) != list(p.isr):
        kw["isr"] = list(isr)
    if leader != NO_LEADER_CHANGE and leader != p.leader:
        kw["leader"] = leader
    if replicas is not None and list(replicas) != list(p.replicas):
        kw["replicas"] = list(replicas)
    if adding is not None and list(adding) != list(p.adding_replicas):
        kw["adding_replicas"] = list(adding)
    if removing is not None and list(removing) != list(p.removing_replicas):
        kw["removing_replicas"] = list(removing)
    if not kw:
        return None
    return PartitionChangeRecord(partition_id=p.partition_id, topic_id=topic_id, **kw)


def _live(image) -> set[int]:
    return {b.broker_id for b in image.brokers.values()
            if not b.fenced and not getattr(b, "in_controlled_shutdown", False)}


def _unclean_for(image, topic: str, default: bool) -> bool:
    v = image.topic_configs(topic).get("unclean.leader.election.enable")
    return default if v is None else v.strip().lower() == "true"


def move_off(image, leaving: set[int], *, unclean_default: bool = False,
             live: set[int] | None = None) -> list[PartitionChangeRecord]:
    """The brokers in ``leaving`` were fenced or are shutting down (session expiry can fence
    several at once): take them out of every ISR (unless one is the last member) and give
    their partitions new leaders."""
    live = (_live(image) if live is None else set(live)) - set(leaving)
    out = []
    for t in image.topics_by_name.values():
        for p in t.partitions.values():
            if leaving.isdisjoint(p.replicas):
                continue
            isr = [r for r in p.isr if r not in leaving] or list(p.isr)
            leader = NO_LEADER_CHANGE
            if p.leader in leaving or p.leader == NO_LEADER:
                e = elect_leader(p.replicas, isr, live, _unclean_for(image, t.name, unclean_default))
                leader = e.leader
                if e.unclean:
                    _warn_unclean(t.name, p, e.leader)
                    isr = [e.leader]
            rec = change_record(t.topic_id, p, isr=isr, leader=leader)
            if rec is not None:
                out.append(rec)
    return out


def leadership_off_broker(image, broker_id: int, *, unclean_default: bool = False,
                          live: set[int] | None = None) -> list[PartitionChangeRecord]:
    """``broker_id`` was fenced or is shutting down (``move_off`` for one broker)."""
    return move_off(image, {broker_id}, unclean_default=unclean_default, live=live)


def elect_leaders_for_offline(image, *, unclean_default: bool = False,
                              live: set[int] | None = None) -> list[PartitionChangeRecord]:
    """Partitions without a leader whose replicas came back (a broker unfenced)."""
    live = _live(image) if live is None else live
    out = []
    for t in image.topics_by_name.values():
        for p in t.partitions.values():
            if p.leader != NO_LEADER:
                continue
            rec = leaderless_election(t, p, live, _unclean_for(image, t.name, unclean_default))[1]
            if rec is not None:
                out.append(rec)
    return out


def leaderless_election(topic, p, live: set[int], unclean_allowed: bool):
    """(Election, record or None) giving leaderless ``p`` a leader; an unclean one leads
    alone in the ISR."""
    e = elect_leader(p.replicas, p.isr, live, unclean_allowed)
    if e.leader == NO_LEADER:
        return e, None
    if e.unclean:
        _warn_unclean(topic.name, p, e.leader)
    return e, change_record(topic.topic_id, p, leader=e.leader, isr=[e.leader] if e.unclean else None)


def _warn_unclean(topic_name: str, p, leader: int) -> None:
    log.warning("unclean leader election for %s-%d: broker %d leads without being in the ISR %s; "
                "records only the ISR had are lost", topic_name, p.partition_id, leader, p.isr)


def elect_where_leaderless(image, returning: int, *, unclean_default: bool = False) -> list[PartitionChangeRecord]:
    """``returning`` is being unfenced (its UnfenceBrokerRecord is in the same batch, not yet
    in the image): leaderless partitions it can lead get it back."""
    return elect_leaders_for_offline(image, unclean_default=unclean_default, live=_live(image) | {returning})


# -- AlterPartition ----------------------------------------------------------------------------

def validate_alter_partition(image, p, broker_id: int, leader_epoch: int,
                             partition_epoch: int, new_isr: list[int],
                             broker_epochs: list[int] | None = None) -> int:
    """Kafka's checks of one AlterPartition partition (error code, NONE when it applies)."""
    if p.leader != broker_id:
        return Errors.INVALID_REQUEST if leader_epoch == p.leader_epoch else Errors.FENCED_LEADER_EPOCH
    if leader_epoch < p.leader_epoch:
        return Errors.FENCED_LEADER_EPOCH
    if leader_epoch > p.leader_epoch:
        return Errors.NOT_CONTROLLER          # this controller is behind
    if partition_epoch < p.partition_epoch:
        return Errors.INVALID_UPDATE_VERSION  # a stale proposal
    if partition_epoch > p.partition_epoch:
        return Errors.NOT_CONTROLLER
    if broker_id not in new_isr:
        return Errors.INVALID_REQUEST
    if len(set(new_isr)) != len(new_isr) or any(r not in p.replicas for r in new_isr):
        return Errors.INVALID_REQUEST
    live = _live(image)
    for i, r in enumerate(new_isr):
        if r in p.isr:
            continue  # only joining members must be eligible
        b = image.brokers.get(r)
        if b is None or r not in live:
            return Errors.INELIGIBLE_REPLICA
        if broker_epochs is not None and i < len(broker_epochs) and broker_epochs[i] >= 0 \
                and broker_epochs[i] != b.epoch:
            return Errors.INELIGIBLE_REPLICA
    return Errors.NONE


def alter_partition(image, topic_id, p, new_isr: list[int]) -> list[PartitionChangeRecord]:
    """The records for a validated ISR change, finishing a reassignment it completes."""
    rec = change_record(topic_id, p, isr=new_isr)
    out = [rec] if rec is not None else []
    done = _complete_reassignment(topic_id, p, new_isr, _live(image))
    if done is not None:
        out.append(done)
    return out


# -- reassignment ------------------------------------------------------------------------------

def start_reassignment(topic_id, p, target: list[int]) -> PartitionChangeRecord | None:
    """Begin moving ``p`` to ``target``: the union is replicated while new replicas catch up.
    A running reassignment is replaced from the current replica set (Kafka's
    PartitionReassignmentReplicas), so a leader among its new replicas stays until the
    replacement completes."""
    base = list(p.replicas)
    adding = [r for r in target if r not in base]
    removing = [r for r in base if r not in target]
    replicas = list(target) + removing
    return change_record(topic_id, p, replicas=replicas, adding=adding, removing=removing)


def _complete_reassignment(topic_id, p, isr: list[int], live: set[int]) -> PartitionChangeRecord | None:
    if not p.adding_replicas and not p.removing_replicas:
        return None
    if any(r not in isr for r in p.adding_replicas):
        return None  # new replicas still catching up
    target = [r for r in p.replicas if r not in p.removing_replicas]
    new_isr = [r for r in isr if r in target]
    if not new_isr:
        return None  # (Kafka's rule) never an empty ISR: wait for the new replicas
    leader = NO_LEADER_CHANGE
    if p.leader not in target:
        leader = elect_leader(target, new_isr, live).leader
    # apply against the state after the ISR change (the two records commit together)
    after = _Shadow(p, isr)
    return change_record(topic_id, after, isr=new_isr, leader=leader, replicas=target,
                         adding=[], removing=[])


class _Shadow:
    """A partition state with another ISR (for a second record in the same batch)."""

    def __init__(self, p, isr) -> None:
        self.partition_id, self.replicas, self.leader = p.partition_id, p.replicas, p.leader
        self.adding_replicas, self.removing_replicas, self.isr = p.adding_replicas, p.removing_replicas, isr


def list_reassignments(image) -> list[tuple[str, int, list[int], list[int], list[int]]]:
    """(topic, partition, replicas, adding, removing) of every reassignment in progress."""
    return [(t.name, p.partition_id, list(p.replicas), list(p.adding_replicas), list(p.removing_replicas))
            for t in image.topics_by_name.values() for p in t.partitions.values()
            if p.adding_replicas or p.removing_replicas]


# -- preferred leaders -------------------------------------------------------------------------

def preferred_leader_change(image, topic_id, p) -> tuple[int, PartitionChangeRecord | None]:
    """ElectLeaders(PREFERRED) for one partition: (error, record)."""
    preferred = p.replicas[0] if p.replicas else NO_LEADER
    if p.leader == preferred:
        return Errors.ELECTION_NOT_NEEDED, None
    if preferred not in p.isr or preferred not in _live(image):
        return Errors.PREFERRED_LEADER_NOT_AVAILABLE, None
    return Errors.NONE, change_record(topic_id, p, leader=preferred)


def rebalance_preferred_leaders(image) -> list[PartitionChangeRecord]:
    """auto.leader.rebalance.enable: move every partition back to its preferred leader."""
    out = []
    for t in image.topics_by_name.values():
        for p in t.partitions.values():
            err, rec = preferred_leader_change(image, t.topic_id, p)
            if rec is not None:
                out.append(rec)
    return out


# -- placement ---------------------------------------------------------------------------------

def place_replicas(brokers: list[tuple[int, str | None]], num_partitions: int, rf: int,
                   start: int = 0, first_partition: int = 0) -> list[list[int]]:
    """Replica lists for new partitions, spread across brokers and racks: brokers are
    interleaved rack by rack, then each partition takes ``rf`` consecutive entries of that
    ring starting one further along (the first replica, its preferred leader, rotates)."""
    if rf > len(brokers):
        raise ValueError(f"replication factor {rf} exceeds {len(brokers)} available brokers")
    rack_of = dict(brokers)
    by_rack: dict[str | None, list[int]] = {}
    for b, rack in sorted(brokers, key=lambda x: x[0]):
        by_rack.setdefault(rack, []).append(b)
    racks = sorted(by_rack, key=lambda r: (r is None, r or ""))
    ring: list[int] = []
    i = 0
    while len(ring) < len(brokers):
        for r in racks:
            if i < len(by_rack[r]):
                ring.append(by_rack[r][i])
        i += 1
    n = len(ring)
    out = []
    for p in range(first_partition, first_partition + num_partitions):
        first = (start + p) % n
        # Shift the followers by partition round too, so two partitions with the same leader
        # do not always share their followers.
        shift = 1 + ((p // n) % max(1, n - 1)) if n > 1 else 0
        order = [ring[(first + shift + k) % n] for k in range(n - 1)] + ring
        reps = [ring[first]]
        # prefer a rack not used yet by this partition, then any broker not used yet
        for want_new_rack in (True, False):
            for b in order:
                if len(reps) == rf:
                    break
                if b in reps or (want_new_rack and rack_of[b] in {rack_of[x] for x in reps}):
                    continue
                reps.append(b)
        out.append(reps)
    return out


def assign_replicas(image, live: list[int], name: str, first_partition: int, count: int,
                    rf: int) -> list[list[int]]:
    """Replica lists for ``count`` new partitions of topic ``name`` over the sorted ``live``
    brokers: round robin from a start derived from the name, so topics spread their leaders;
    rack-aware (``place_replicas``) once any of those brokers has a ``broker.rack``."""
    import zlib
    start = zlib.crc32(name.encode()) % len(live)
    racks = {b: (image.brokers[b].rack if b in image.brokers else None) for b in live}
    if any(racks.values()):
        return place_replicas([(b, racks[b]) for b in live], count, rf, start, first_partition)
    return [[live[(start + p + i) % len(live)] for i in range(rf)]
            for p in range(first_partition, first_partition + count)]


def internal_topic_replication_factor(configured: int, live_brokers: int) -> tuple[int, str | None]:
    """Internal topics (__consumer_offsets, __transaction_state) get their configured
    replication factor or are not created yet, never silently fewer replicas (Kafka answers
    COORDINATOR_NOT_AVAILABLE meanwhile)."""
    if live_brokers < configured:
        return -1, (f"Number of alive brokers '{live_brokers}' does not meet the required "
                    f"replication factor '{configured}' for the internal topic (set by the "
                    f"offsets.topic.replication.factor / transaction.state.log.replication.factor "
                    f"configs); it is created once that many brokers are up.")
    return configured, None



def answer_alter_partition(image, req, version: int):
    """An AlterPartition request from a leader: (records to commit, AlterPartitionResponse).
    Partitions are judged one by one against the image as the earlier ones leave it."""
    from kbroker.wire.generated.alter_partition_response import AlterPartitionResponse as R

    b = image.brokers.get(req.broker_id)
    if b is None or (req.broker_epoch >= 0 and b.epoch != req.broker_epoch):
        return [], R(error_code=Errors.STALE_BROKER_EPOCH)
    records: list = []
    topics = []
    for t in req.topics:
        ti = image.topics_by_id.get(t.topic_id) if version >= 2 else image.topics_by_name.get(t.topic_name)
        parts = []
        for p in t.partitions:
            st = ti.partitions.get(p.partition_index) if ti is not None else None
            if st is None:
                code = Errors.UNKNOWN_TOPIC_ID if version >= 2 else Errors.UNKNOWN_TOPIC_OR_PARTITION
                parts.append(R.TopicData.PartitionData(partition_index=p.partition_index, error_code=code))
                continue
            if version >= 3:
                new_isr = [e.broker_id for e in p.new_isr_with_epochs]
                epochs = [e.broker_epoch for e in p.new_isr_with_epochs]
            else:
                new_isr, epochs = list(p.new_isr), None
            code = validate_alter_partition(image, st, req.broker_id, p.leader_epoch,
                                            p.partition_epoch, new_isr, epochs)
            if code == Errors.NONE:
                recs = alter_partition(image, ti.topic_id, st, new_isr)
                records += recs
                if recs:
                    log.info("%s-%d ISR %s -> %s (leader %d)", ti.name, st.partition_id,
                             list(st.isr), new_isr, req.broker_id)
                st = _after(ti, st, recs)   # answered with the state once these commit
            parts.append(R.TopicData.PartitionData(
                partition_index=p.partition_index, error_code=code, leader_id=st.leader,
                leader_epoch=st.leader_epoch, isr=list(st.isr), partition_epoch=st.partition_epoch))
        topics.append(R.TopicData(topic_name=t.topic_name, topic_id=t.topic_id, partitions=parts))
    return records, R(error_code=0, topics=topics)


def _after(topic, st, records):
    """``st`` as it will be once ``records`` are applied (the image itself is changed only
    by replaying committed records)."""
    import copy

    from kbroker.kraft.image import MetadataImage, TopicImage

    scratch = MetadataImage()
    t = TopicImage(topic.name, topic.topic_id, {st.partition_id: copy.deepcopy(st)})
    scratch.topics_by_id[topic.topic_id] = t
    for r in records:
        scratch.apply(r)
    return t.partitions[st.partition_id]
