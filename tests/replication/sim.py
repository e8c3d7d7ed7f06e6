"""A seeded, deterministic simulation of one partition replicated on N brokers.

Real state machines, fake everything else: each broker's replica is an in-memory log
(``MemReplica``) driven by the project's ``roles.apply_partition_state``, ``LeaderState`` /
``answer_replica_fetch`` on the leader, ``ReplicaFetcher`` on followers and
``DelayedProduces`` for acks=all; the controller is a real ``MetadataImage`` changed only
through ``kbroker.kraft.partition_change`` (fencing, AlterPartition validation, elections).
Messages travel through a seeded queue with delays and drops; brokers crash and restart,
links between chosen brokers (and to the controller) are cut and healed, brokers learn
metadata late, and the clock is fake.

After every step ``check()`` asserts:
* no acknowledged (acks=all) record is missing from any replica of the controller's ISR;
* any two replicas agree on every offset below both of their high watermarks;
* no replica's high watermark ever goes back (truncation below it included).
With ``unclean=True`` (unclean.leader.election.enable) acknowledged records may be lost, as
Kafka warns; only convergence of every replica to the leader's log is checked.
``run(seed, steps)`` ends by healing everything and checking that every replica converged
to the leader's log and that each acknowledged record is in it exactly once.

Reproduce a seed: ``python -m tests.replication.sim --seed 17 --steps 400``.
"""

from __future__ import annotations

import argparse
import heapq
import random
from collections import deque
import uuid
from dataclasses import dataclass, field

from kbroker.kraft import partition_change as pc
from kbroker.kraft.image import BrokerRegistration, MetadataImage
from kbroker.replication.delayed_produce import DelayedProduces, check_before_append
from kbroker.replication.fetcher import ReplicaFetcher
from kbroker.replication.leader_state import answer_replica_fetch
from kbroker.replication.roles import RoleChange, apply_partition_state
from kbroker.wire.errors import Errors
from kbroker.wire.generated.fetch_response import FetchResponse
from kbroker.wire.generated.partition_record import PartitionRecord
from kbroker.wire.generated.topic_record import TopicRecord

from tests.replication.memlog import MemReplica

TOPIC = "t"
TOPIC_ID = uuid.UUID(int=7)
CONTROLLER = 0
LAG_MAX_MS = 300
SESSION_TIMEOUT_MS = 400
REQUEST_TIMEOUT_MS = 1_000
FETCH_RETRY_MS = 100
_PD = FetchResponse.FetchableTopicResponse.PartitionData


class InvariantError(AssertionError):
    pass


@dataclass
class Node:
    node_id: int
    replica: MemReplica
    alive: bool = True
    fetcher: ReplicaFetcher | None = None
    inflight: tuple | None = None         # (request, sent_ms)
    alter_inflight_ms: int = -1
    produces: DelayedProduces = field(default_factory=DelayedProduces)
    last_contact_ms: int = 0              # last time the controller heard from it
    hw_seen: int = 0


class Sim:
    def __init__(self, seed: int, n: int = 3, min_isr: int = 2, unclean: bool = False,
                 drop: float = 0.05) -> None:
        self.rng = random.Random(seed)
        self.seed = seed
        self.now = 0
        self.min_isr = min_isr
        self.unclean = unclean
        self.drop = drop
        self.ids = list(range(1, n + 1))
        self.nodes = {i: Node(i, MemReplica(i)) for i in self.ids}
        self.cut: set[frozenset] = set()
        self.queue: list = []
        self.seq = 0
        self.next_value = 0
        self.acked: dict[int, int] = {}    # value -> offset acknowledged at
        self.sent: set[int] = set()
        self.trace: deque[str] = deque(maxlen=40)
        self.image = MetadataImage()
        for i in self.ids:
            self.image.brokers[i] = BrokerRegistration(i, 1, uuid.UUID(int=i), {}, None, False)
        self.image.apply(TopicRecord(name=TOPIC, topic_id=TOPIC_ID))
        self.image.apply(PartitionRecord(partition_id=0, topic_id=TOPIC_ID, replicas=self.ids,
                                         isr=self.ids, leader=self.ids[0], leader_epoch=0,
                                         partition_epoch=0, removing_replicas=[],
                                         adding_replicas=[]))
        for node in self.nodes.values():
            self.sync_metadata(node)

    # -- controller ----------------------------------------------------------------------

    @property
    def part(self):
        return self.image.topics_by_id[TOPIC_ID].partitions[0]

    def commit(self, records) -> None:
        for r in records:
            self.image.apply(r)
            self.trace.append(f"{self.now}: controller {type(r).__name__} leader={self.part.leader} "
                              f"epoch={self.part.leader_epoch} isr={self.part.isr}")

    def controller_tick(self) -> None:
        for i, node in self.nodes.items():
            b = self.image.brokers[i]
            reachable = node.alive and not self.is_cut(i, CONTROLLER)
            if reachable:
                node.last_contact_ms = self.now
                if b.fenced:
                    b.fenced = False
                    self.trace.append(f"{self.now}: unfence {i}")
                    self.commit(pc.elect_leaders_for_offline(self.image, unclean_default=self.unclean))
            elif not b.fenced and self.now - node.last_contact_ms > SESSION_TIMEOUT_MS:
                b.fenced = True
                self.trace.append(f"{self.now}: fence {i}")
                self.commit(pc.leadership_off_broker(self.image, i, unclean_default=self.unclean))

    def sync_metadata(self, node: Node) -> None:
        if not node.alive or self.is_cut(node.node_id, CONTROLLER):
            return
        p = self.part
        r = node.replica
        change = apply_partition_state(r, node.node_id, p.leader, p.leader_epoch, p.partition_epoch,
                                       p.replicas, p.isr, self.now)
        if change in (RoleChange.BECAME_LEADER, RoleChange.BECAME_FOLLOWER):
            node.fetcher = None
            node.inflight = None
            for token, err in node.produces.fail(0, Errors.NOT_LEADER_OR_FOLLOWER):
                pass
        if r.leader_state is None and p.leader not in (-1, node.node_id) and node.node_id in p.replicas:
            if node.fetcher is None or node.fetcher.leader_id != p.leader:
                node.fetcher = ReplicaFetcher(node.node_id, p.leader,
                                              broker_epoch=self.image.brokers[node.node_id].epoch,
                                              backoff_ms=FETCH_RETRY_MS)
                node.fetcher.add(TOPIC, 0, TOPIC_ID, p.leader_epoch, r)
            else:
                node.fetcher.set_leader_epoch(TOPIC, 0, p.leader_epoch)
        self.on_hw(node)

    # -- network -------------------------------------------------------------------------

    def is_cut(self, a: int, b: int) -> bool:
        return frozenset((a, b)) in self.cut

    def send(self, src: int, dst: int, msg) -> None:
        if self.rng.random() < self.drop:
            return
        self.seq += 1
        heapq.heappush(self.queue, (self.now + self.rng.randint(1, 30), self.seq, src, dst, msg))

    def deliver_due(self) -> None:
        while self.queue and self.queue[0][0] <= self.now:
            _, _, src, dst, msg = heapq.heappop(self.queue)
            if self.is_cut(src, dst):
                continue
            if dst == CONTROLLER:
                if self.nodes[src].alive:
                    self.on_alter_partition(src, msg[1])
                continue
            node = self.nodes[dst]
            if not node.alive:
                continue
            kind = msg[0]
            if kind == "fetch":
                self.on_fetch(node, src, msg[1])
            elif kind == "fetch_resp":
                req, resp = msg[1], msg[2]
                if node.inflight is not None and node.inflight[0] is req and node.fetcher is not None:
                    node.inflight = None
                    node.fetcher.handle_response(req, resp, self.now)
                    self.on_hw(node)
            elif kind == "alter_resp":
                _, proposal, err, st = msg
                r = node.replica
                if r.leader_state is not None and r.leader_state.leader_epoch == proposal.leader_epoch:
                    if err == Errors.NONE:  # the committed state, as the metadata will say
                        apply_partition_state(r, node.node_id, *st, self.now)
                    else:
                        r.leader_state.on_alter_partition_response(proposal, err)
                    self.on_hw(node)

    # -- broker behaviour ----------------------------------------------------------------

    def on_fetch(self, leader: Node, src: int, req) -> None:
        r = leader.replica
        fp = req.topics[0].partitions[0]
        ans = answer_replica_fetch(r.leader_state, r, src, fp.current_leader_epoch, fp.fetch_offset,
                                   fp.last_fetched_epoch, req.replica_state.replica_epoch, self.now)
        pd = _PD(partition_index=0, error_code=ans.error, high_watermark=ans.high_watermark,
                 log_start_offset=0)
        if ans.diverging is not None:
            pd.diverging_epoch = _PD.EpochEndOffset(epoch=ans.diverging[0], end_offset=ans.diverging[1])
        elif ans.read_offset >= 0:
            pd.records = r.read(ans.read_offset, self.rng.randint(1, 5)) or None
        resp = FetchResponse(responses=[FetchResponse.FetchableTopicResponse(topic=TOPIC, partitions=[pd])])
        self.send(leader.node_id, src, ("fetch_resp", req, resp))
        self.on_hw(leader)

    def on_alter_partition(self, src: int, proposal) -> None:
        p = self.part
        err = pc.validate_alter_partition(self.image, p, src, proposal.leader_epoch,
                                          proposal.partition_epoch, list(proposal.new_isr),
                                          list(proposal.broker_epochs))
        if err == Errors.NONE:
            self.commit(pc.alter_partition(self.image, TOPIC_ID, p, list(proposal.new_isr)))
        p = self.part
        self.send(CONTROLLER, src, ("alter_resp", proposal, err,
                                    (p.leader, p.leader_epoch, p.partition_epoch, p.replicas, p.isr)))

    def on_hw(self, node: Node) -> None:
        r = node.replica
        if self.unclean:  # an unclean election may cut below a high watermark (data loss)
            r.hw_went_back = None
        elif r.hw < node.hw_seen or r.hw_went_back is not None:
            raise InvariantError(f"node {node.node_id}: high watermark went back "
                                 f"{r.hw_went_back or (node.hw_seen, r.hw)}")
        node.hw_seen = r.hw
        ls = r.leader_state
        if ls is None:
            return
        for (value, off), err in node.produces.on_high_watermark(0, r.hw, len(ls.isr), self.min_isr):
            if err == Errors.NONE:
                self.acked[value] = off
                self.trace.append(f"{self.now}: ack {value}@{off} by {node.node_id}")

    def produce(self) -> None:
        leaders = [n for n in self.nodes.values() if n.alive and n.replica.leader_state is not None]
        if not leaders:
            return
        node = self.rng.choice(leaders)
        r = node.replica
        if check_before_append(-1, len(r.leader_state.isr), self.min_isr):
            return
        value = self.next_value
        self.next_value += 1
        off = r.append_as_leader(value)
        self.sent.add(value)
        node.produces.add(0, off, self.now + REQUEST_TIMEOUT_MS, (value, off))
        r.advance_high_watermark(r.leader_state.high_watermark(r.log_end_offset))
        self.on_hw(node)

    def tick_node(self, node: Node) -> None:
        if not node.alive:
            return
        r = node.replica
        node.produces.expire(self.now)
        if r.leader_state is not None:
            prop = r.leader_state.propose_isr_change(self.now, r.log_end_offset, LAG_MAX_MS)
            if prop is None and r.leader_state.pending is not None \
                    and self.now - node.alter_inflight_ms > 200:
                prop = r.leader_state.pending               # unanswered: send it again
            if prop is not None:
                node.alter_inflight_ms = self.now
                self.send(node.node_id, CONTROLLER, ("alter", prop))
        f = node.fetcher
        if f is not None:
            if node.inflight is not None and self.now - node.inflight[1] > 200:
                node.inflight = None
                f.backoff_all(self.now)
            if node.inflight is None:
                req = f.build_request(self.now)
                if req is not None:
                    node.inflight = (req, self.now)
                    self.send(node.node_id, f.leader_id, ("fetch", req))

    # -- faults --------------------------------------------------------------------------

    def crash(self, node: Node) -> None:
        node.alive = False
        node.fetcher = None
        node.inflight = None
        node.alter_inflight_ms = -1
        node.produces = DelayedProduces()
        node.replica.leader_state = None   # in-memory role state is gone; the log is durable
        self.trace.append(f"{self.now}: crash {node.node_id}")

    def restart(self, node: Node) -> None:
        node.alive = True
        node.replica.leader_id = -1        # relearns its role from metadata
        self.image.brokers[node.node_id].epoch += 1   # registers again: a new broker epoch
        self.trace.append(f"{self.now}: restart {node.node_id}")

    def random_fault(self) -> None:
        x = self.rng.random()
        node = self.nodes[self.rng.choice(self.ids)]
        if x < 0.3:
            if node.alive and sum(n.alive for n in self.nodes.values()) > 1:
                self.crash(node)
            elif not node.alive:
                self.restart(node)
        elif x < 0.7:
            other = self.rng.choice([CONTROLLER] + [i for i in self.ids if i != node.node_id])
            link = frozenset((node.node_id, other))
            if link in self.cut:
                self.cut.discard(link)
                self.trace.append(f"{self.now}: heal {sorted(link)}")
            else:
                self.cut.add(link)
                self.trace.append(f"{self.now}: cut {sorted(link)}")
        else:
            self.cut.clear()
            self.trace.append(f"{self.now}: heal all")

    # -- the run -------------------------------------------------------------------------

    def step(self, faults: bool = True, load: bool = True) -> None:
        self.now += self.rng.randint(1, 25)
        self.deliver_due()
        self.controller_tick()
        for node in self.nodes.values():
            if self.rng.random() < 0.5:
                self.sync_metadata(node)
            self.tick_node(node)
        if load and self.rng.random() < 0.5:
            self.produce()
        if faults and self.rng.random() < 0.04:
            self.random_fault()
        self.check()

    def check(self) -> None:
        """Safety; with unclean elections allowed only convergence is promised."""
        if self.unclean:
            return
        p = self.part
        for value, off in self.acked.items():
            for i in p.isr:
                e = self.nodes[i].replica.entries
                if off >= len(e) or e[off][1] != value:
                    raise InvariantError(f"acknowledged record {value}@{off} missing from ISR "
                                         f"member {i} (isr {p.isr}, its log end {len(e)})")
        reps = [n.replica for n in self.nodes.values()]
        for a in reps:
            for b in reps:
                if a.node_id < b.node_id:
                    upto = min(a.hw, b.hw)
                    if a.entries[:upto] != b.entries[:upto]:
                        raise InvariantError(f"replicas {a.node_id} and {b.node_id} disagree below "
                                             f"their high watermarks ({upto})")

    def converge(self, max_steps: int = 3_000) -> None:
        """Heal everything and run until every replica holds the leader's whole log."""
        self.cut.clear()
        for node in self.nodes.values():
            if not node.alive:
                self.restart(node)
        for _ in range(max_steps):
            self.step(faults=False, load=False)
            p = self.part
            if p.leader < 0 or len(p.isr) < len(p.replicas):
                continue
            lead = self.nodes[p.leader].replica
            if lead.leader_state is None:
                continue
            if all(n.replica.entries == lead.entries and n.replica.hw == lead.log_end_offset
                   for n in self.nodes.values()):
                return
        raise InvariantError(f"no convergence after {max_steps} healed steps: "
                             f"leader {self.part.leader} isr {self.part.isr} ends "
                             f"{[(n.node_id, len(n.replica.entries), n.replica.hw) for n in self.nodes.values()]}")

    def final_check(self) -> None:
        values = self.nodes[self.part.leader].replica.values()
        seen = set()
        for v in values:
            if v in seen:
                raise InvariantError(f"record {v} is in the log twice")
            seen.add(v)
        if self.unclean:
            return
        lost = [v for v in self.acked if v not in seen]
        if lost:
            raise InvariantError(f"acknowledged records lost: {sorted(lost)[:10]}")


def run(seed: int, steps: int = 400, **kw) -> Sim:
    sim = Sim(seed, **kw)
    try:
        for _ in range(steps):
            sim.step()
        sim.converge()
        sim.final_check()
    except InvariantError as e:
        tail = "\n".join(sim.trace)
        raise InvariantError(f"seed {seed}: {e}\nreproduce: python -m tests.replication.sim "
                             f"--seed {seed} --steps {steps}"
                             + (" --unclean" if kw.get("unclean") else "")
                             + f"\nlast events:\n{tail}") from None
    return sim


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, help="one seed (else --seeds from 0)")
    ap.add_argument("--seeds", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--unclean", action="store_true")
    a = ap.parse_args()
    seeds = [a.seed] if a.seed is not None else range(a.seeds)
    acked = 0
    for s in seeds:
        sim = run(s, a.steps, unclean=a.unclean)
        acked += len(sim.acked)
    print(f"{len(seeds)} seed(s) passed, {acked} acknowledged records checked")


if __name__ == "__main__":
    main()
