"""Seeded simulation of producer id blocks: no two brokers ever hand out the same id.

The Raft quorum of ``tests.sim.raft_sim`` (three controllers: crashes with lost unflushed
writes, isolated leaders, splits, flaky links) carries the metadata log. On every
controller node a real ``kbroker.kraft.controller.Controller`` replays the committed records
(ProducerIdsRecord into its MetadataImage) and answers AllocateProducerIds with
``allocate_producer_ids``, as ``kbroker.kraft.quorum_runtime`` runs it: only while active
(leader, and everything up to its epoch's start applied); operations pipelined, each one's
records applied to the controller at append so the next sees them (dropped again when the
node is deposed); the answer released once the record is committed in the epoch it was
appended in (RaftDriver.append's rule), NOT_CONTROLLER otherwise. Brokers are ``kbroker.broker.producer_ids.ProducerIdBlocks``
(the broker's real state: current block, prefetch at 90%) taking ids at random rates; they
restart (losing their blocks), their requests go to whichever node claims to lead (a deposed
leader too), answers are delayed or lost.

Checked after every step: no id is handed out twice (whoever, whenever), no two granted
blocks overlap, and, after the faults heal, every broker gets new ids again.

By hand:  python -m tests.sim.producer_id_sim --seeds 2000
One seed: python -m tests.sim.producer_id_sim --seed 17 -v
A broken rule the checker must catch: --bad answer_before_commit | stale_image | early_active
"""

from __future__ import annotations

import argparse
import copy
import sys
import time

from kbroker.broker.producer_ids import ProducerIdBlocks
from kbroker.kraft.controller import Controller
from kbroker.kraft.raft import LEADER
from kbroker.kraft.records import decode_record, encode_record
from kbroker.wire.errors import CodecError
from tests.sim.raft_sim import CHAOS_MS, HEAL_BOUND_MS, Sim, Violation

SCENARIOS = ("crash", "isolate", "split", "flaky")
BAD_RULES = ("answer_before_commit", "stale_image", "early_active")


class SimBroker:
    def __init__(self, broker_id: int) -> None:
        self.id = broker_id
        self.session = 0            # bumps at each restart (the broker epoch)
        self.blocks = ProducerIdBlocks()
        self.last_block_t = -1


class PidSim(Sim):
    def __init__(self, seed: int, brokers: int = 3, bad: str | None = None,
                 verbose: bool = False) -> None:
        self.pid_bad = bad
        self.brokers = {b: SimBroker(b) for b in range(1, brokers + 1)}
        self.owner: dict[int, tuple[int, int, int]] = {}     # id -> (broker, session, t)
        self.granted: list[tuple[int, int, int]] = []        # (start, end, broker)
        self.ctrl: dict[int, list] = {}      # node -> [its values list, Controller, replayed]
        self.spec: dict[int, tuple[int, list]] = {}   # node -> (epoch, [(offset, record)])
        self.inflight: dict[int, list] = {}  # node -> [(offset, epoch, request, block)]
        super().__init__(SCENARIOS[seed % len(SCENARIOS)], seed, voters=3, observers=0,
                         verbose=verbose)
        r = self.rng
        t = r.randrange(100, 300)
        while t < CHAOS_MS:
            self.at(t, "broker_restart", r.choice(sorted(self.brokers)))
            t += r.randrange(60, 300)

    def command(self) -> str:
        bad = f" --bad {self.pid_bad}" if self.pid_bad else ""
        return f"python -m tests.sim.producer_id_sim --seed {self.seed}{bad}"

    # -- the controllers ---------------------------------------------------------------------

    def controller(self, nid: int) -> Controller:
        """Node ``nid``'s controller with every committed record it has applied replayed."""
        n = self.nodes[nid]
        entry = self.ctrl.get(nid)
        if entry is None or entry[0] is not n.values:   # restarted or loaded a snapshot
            entry = self.ctrl[nid] = [n.values, Controller(nid, {}), 0]
        values, c, done = entry
        for v in values[done:]:
            try:
                rec = decode_record(v)
            except (CodecError, KeyError, ValueError):
                continue                     # the raft sim's own client values
            c.replay(rec)
        entry[2] = len(values)
        return c

    def active(self, nid: int) -> bool:
        n = self.nodes[nid]
        if n.node is None or n.node.role != LEADER:
            return False
        return self.pid_bad == "early_active" or n.applied > n.node.epoch_start_offset

    def submit(self, nid: int, req) -> None:
        """One AllocateProducerIds on node ``nid`` (quorum_runtime.submit)."""
        n = self.nodes[nid]
        if not self.active(nid):
            self.answer(req, None)
            return
        epoch = n.node.epoch
        spec_epoch, spec = self.spec.get(nid, (epoch, []))
        if spec_epoch != epoch:
            spec = []                        # deposed since: its speculation is gone
        c = self.controller(nid)
        if spec and self.pid_bad != "stale_image":
            c = Controller(nid, {}, image=copy.deepcopy(c.image))
            for off, rec in spec:
                if off >= n.applied:         # applied at append, not yet committed
                    c.replay(rec, off)
        res = c.allocate_producer_ids(req[0], req[1], n.local(self.t))
        off = n.node.append([encode_record(r) for r in res.records], n.local(self.t))
        spec = [(o, r) for o, r in spec if o >= n.applied] + [(off, r) for r in res.records]
        self.spec[nid] = (epoch, spec)
        n.deadline = min(n.deadline, self.t + 1)
        if self.pid_bad == "answer_before_commit":
            self.answer(req, res.response)
        else:
            self.inflight.setdefault(nid, []).append((off, epoch, req, res.response))

    def settle(self, nid: int) -> None:
        """Answer the operations of ``nid`` whose records committed, or whose leadership
        moved first (RaftDriver.append's rule)."""
        n = self.nodes[nid]
        keep = []
        for off, epoch, req, block in self.inflight.get(nid, []):
            node = n.node
            if node is None:
                self.answer(req, None)
            elif off < node.high_watermark and node.log.epoch_for_offset(off) == epoch:
                self.answer(req, block)
            elif node.epoch != epoch or node.role != LEADER:
                self.answer(req, None)
            else:
                keep.append((off, epoch, req, block))
        self.inflight[nid] = keep

    def answer(self, req, block) -> None:
        if req is None:
            return
        if block is not None and self.rng.random() < 0.05:
            block = None                     # the answer is lost: the broker asks again
        self.at(self.t + self.rng.randrange(1, 6), "pid_answer", req[0], req[1], block)

    # -- the brokers -----------------------------------------------------------------------------

    def client_append(self) -> None:
        super().client_append()              # the raft sim's own traffic (and its liveness)
        for b in self.brokers.values():
            for _ in range(self.rng.randrange(0, 80)):
                pid = b.blocks.take()
                if pid is None:
                    break
                prev = self.owner.get(pid)
                if prev is not None:
                    self.fail(f"producer id {pid} handed out twice: broker {prev[0]} (session "
                              f"{prev[1]}, t={prev[2]}) and broker {b.id} (session {b.session})")
                self.owner[pid] = (b.id, b.session, self.t)
            if b.blocks.wants_block():
                b.blocks.requesting = True
                leaders = [i for i, n in sorted(self.nodes.items())
                           if n.node is not None and n.node.role == LEADER]
                live = [i for i, n in sorted(self.nodes.items()) if n.node is not None]
                target = self.rng.choice(leaders or live or [1])
                self.at(self.t + self.rng.randrange(1, 6), "pid_request", b.id, b.session, target)

    def do(self, what: str, args: tuple) -> None:
        if what.startswith(("broker_", "pid_")):
            self.stats[what] += 1
        if what == "broker_restart":
            b = self.brokers[args[0]]
            b.session += 1
            b.blocks = ProducerIdBlocks()    # in memory only: a restart asks for a new block
        elif what == "pid_request":
            bid, session, nid = args
            if self.nodes[nid].node is None:
                self.at(self.t + 20, "pid_answer", bid, session, None)   # request timed out
            else:
                self.submit(nid, (bid, session))
        elif what == "pid_answer":
            bid, session, block = args
            b = self.brokers[bid]
            if session != b.session:
                return                       # an answer to the broker's previous life
            if block is not None:
                start, size = block
                for s, e, owner in self.granted:
                    if start < e and s < start + size:
                        self.fail(f"block [{start}, {start + size}) to broker {bid} overlaps "
                                  f"[{s}, {e}) granted to broker {owner}")
                self.granted.append((start, start + size, bid))
                b.last_block_t = self.t
                b.blocks.on_block(start, size)
            else:
                b.blocks.requesting = False
        else:
            super().do(what, args)
            if what in ("crash", "heal_all"):
                for nid in list(self.inflight):
                    self.settle(nid)

    def apply(self, n) -> None:
        super().apply(n)
        self.controller(n.id)
        self.settle(n.id)

    def run_all(self) -> "PidSim":
        self.run(CHAOS_MS + HEAL_BOUND_MS, final=False)
        self.check_liveness()
        for b in self.brokers.values():
            if b.last_block_t < self.healed_at:
                self.fail(f"broker {b.id} got no producer id block after the faults healed")
        return self


def run_seeds(seeds, bad: str | None = None) -> list[str]:
    failures = []
    for s in seeds:
        try:
            PidSim(s, bad=bad).run_all()
        except Violation as e:
            failures.append(str(e))
    return failures


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--seed", type=int, help="run one seed")
    ap.add_argument("--bad", choices=BAD_RULES, help="a deliberately broken rule")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args(argv)
    seeds = [a.seed] if a.seed is not None else range(a.first_seed, a.first_seed + a.seeds)
    t0 = time.monotonic()
    bad = ids = 0
    for s in seeds:
        try:
            sim = PidSim(s, bad=a.bad, verbose=a.verbose).run_all()
            ids += len(sim.owner)
            if a.verbose:
                print(f"seed {s} ({sim.scenario}): {len(sim.owner)} ids, {len(sim.granted)} "
                      f"blocks, {dict(sim.stats)}")
        except Violation as e:
            bad += 1
            print(f"VIOLATION seed {s}: {e}")
    print(f"{len(seeds)} seeds in {time.monotonic() - t0:.1f} s; {ids} ids handed out; "
          f"{bad} violations")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
