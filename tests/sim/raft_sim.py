"""Seeded deterministic simulation of the Raft quorum (kbroker.kraft.raft).

Many RaftNodes on a fake clock, an event loop and the in-memory network (seeded delays,
drops, duplicates, reordering, cut links), with crashes and restarts (optionally losing what
was not flushed), isolated leaders, splits, flapping links, clock-rate skew, snapshots with
log cleaning and catch-up by FetchSnapshot, and voters added and removed (KIP-853). After
every step the checker asserts:

- at most one leader per epoch;
- no node's epoch goes back (across restarts too), no node's high watermark goes back;
- every committed entry (below any node's high watermark) is the same on every node, and
  what is committed is never lost: it stays on a majority of the committed voter set;
- a state machine loaded from a snapshot equals one that replayed the committed log;
- after the faults heal, a leader is elected and a new record commits within a bound.

By hand:  python -m tests.sim.raft_sim --scenario crash --voters 3 --seeds 2000
One seed: python -m tests.sim.raft_sim --scenario crash --voters 3 --seed 17 -v
"""

from __future__ import annotations

import argparse
import heapq
import os
import random
import sys
import tempfile
import time
from collections import defaultdict

from kbroker.kraft import snapshots as snaps
from kbroker.kraft.quorum_store import FileQuorumStore, MemoryQuorumStore
from kbroker.kraft.raft import LEADER, FOLLOWER, CommittedBatch, RaftConfig, RaftNode, SnapshotLoaded
from kbroker.kraft.raft_log import METADATA_PARTITION_DIR, DiskRaftLog, MemoryRaftLog, control_type
from kbroker.kraft.snapshots import DirSnapshotStore, MemorySnapshotStore
from kbroker.kraft.transport import Envelope, Faults, MemoryNetwork
from kbroker.wire.generated.add_raft_voter_request import AddRaftVoterRequest
from kbroker.wire.generated.remove_raft_voter_request import RemoveRaftVoterRequest
from kbroker.wire.generated.voters_record import VotersRecord
from kbroker.wire.records import ControlRecordType

SCENARIOS = ("crash", "isolate", "split", "flaky", "snapshot", "voters")
QUIET = "quiet"                             # no planned faults: tests script their own
ADMIN = -7                                  # the id AddRaftVoter/RemoveRaftVoter come from

CONFIG = dict(election_timeout_ms=100, fetch_timeout_ms=200, election_backoff_max_ms=100,
              request_timeout_ms=100, retry_backoff_ms=10, fetch_max_wait_ms=50)
CHAOS_MS = 800                              # faults happen in [0, CHAOS_MS)
HEAL_BOUND_MS = 1000                        # after healing: a leader and a commit within 10 election timeouts


class Violation(AssertionError):
    pass


class SimNode:
    def __init__(self, sim: "Sim", node_id: int) -> None:
        self.sim = sim
        self.id = node_id
        if sim.root is None:
            self.log = MemoryRaftLog(later_flushes=sim.later_flushes)
            self.store = MemoryQuorumStore()
            self.snaps = MemorySnapshotStore()
        else:                               # the real files: PartitionLog, quorum-state, checkpoints
            self.dir = os.path.join(sim.root, f"node-{node_id}")
            self.log = DiskRaftLog.open(self.dir)
            self.store = FileQuorumStore(self.dir, kraft_version=1 if sim.dynamic else 0)
            self.snaps = DirSnapshotStore(os.path.join(self.dir, METADATA_PARTITION_DIR))
        self.rate = 1.0
        self.offset = sim.rng.randrange(10_000)
        self.incarnation = 0
        self.flush_due = False              # (later flushes) a completion is scheduled
        self.node: RaftNode | None = None
        self.deadline = 0                   # global time of the next poll it asked for
        self.values: list[bytes] = []       # the state machine: data records in order
        self.applied = 0
        self.last_snapshot_applied = 0
        self.last_hw = 0
        self.last_epoch = 0

    def local(self, t: int) -> int:
        return int(t * self.rate) + self.offset

    def to_global(self, local_ms: int) -> int:
        return -int(-(local_ms - self.offset) // self.rate)    # ceil

    def start(self, t: int) -> None:
        voters = None if self.sim.dynamic else self.sim.static_voters
        cfg = RaftConfig(**CONFIG, unsafe_minority_hw=self.sim.bad == "minority_hw",
                         unsafe_fetch_before_flush=self.sim.bad == "fetch_before_flush")
        self.node = RaftNode(self.id, self.log, self.store, self.snaps, cfg,
                             random.Random(self.sim.rng.random()), voters=voters, now_ms=self.local(t))
        self.log.on_flushed = self.flushed    # (as the driver does: a flush done later wakes the node)
        self.values, self.applied, self.last_hw = [], 0, 0
        self.deadline = t
        self.sim.net.set_down(self.id, False)

    def flushed(self) -> None:
        self.deadline = min(self.deadline, self.sim.t)

    def crash(self, lose_unflushed: bool) -> None:
        self.node = None
        self.incarnation += 1                 # a flush under way dies with the process
        self.flush_due = False
        self.sim.net.set_down(self.id, True)
        if isinstance(self.log, DiskRaftLog):
            # a killed process: files stay as written (page cache); reopen runs recovery
            self.log.plog.close_without_trim()
            self.log = DiskRaftLog.open(self.dir)
        elif lose_unflushed:
            self.log.lose_unflushed()
        else:
            self.log.flush_wanted = self.log.flushed_offset


class Sim:
    def __init__(self, scenario: str, seed: int, voters: int = 3, observers: int = 1,
                 bad: str | None = None, verbose: bool = False, root: str | None = None,
                 later_flushes: bool | None = None) -> None:
        """``root``: a directory for on-disk storage (else everything is in memory).
        ``later_flushes``: None, the seed decides (in memory only)."""
        self.scenario, self.seed, self.bad, self.verbose = scenario, seed, bad, verbose
        self.root = root
        self.rng = random.Random(f"{scenario}/{voters}/{seed}")
        # half the seeds flush later, as the broker's metadata log does (an fsync off the
        # loop): a flush ends 0-9 ms after the poll that asked, or never if the node crashes
        self.flush_rng = random.Random(f"flush/{scenario}/{voters}/{seed}")
        seeded = self.flush_rng.random() < 0.5
        self.later_flushes = root is None and (seeded if later_flushes is None else later_flushes)
        faults = Faults(min_delay_ms=1, max_delay_ms=5)
        if scenario == "flaky":
            faults = Faults(min_delay_ms=1, max_delay_ms=8, drop=0.05, duplicate=0.05,
                            reorder=0.1, reorder_extra_ms=40)
        self.faults = faults
        self.net = MemoryNetwork(random.Random(self.rng.random()), faults)
        self.dynamic = scenario == "voters"
        ids = list(range(1, voters + 1))
        self.static_voters = set(ids)
        obs = [100 + i for i in range(observers)]
        if self.dynamic:
            obs += [voters + 1, voters + 2]            # observers that will be added as voters
        self.nodes = {i: SimNode(self, i) for i in ids + obs}
        if self.dynamic:
            rec = VotersRecord(version=0, voters=[VotersRecord.Voter(voter_id=i, endpoints=[])
                                                  for i in ids])
            for n in self.nodes.values():
                snaps.write_bootstrap_checkpoint(n.snaps, rec)
        if scenario in ("flaky", "split", "isolate"):
            for n in self.nodes.values():
                n.rate = self.rng.uniform(0.9, 1.1)     # timer skew
        self.t = 0
        self.committed: list[tuple[int, bytes | None]] = []   # offset -> (epoch, value|None)
        self.committed_voters: list[tuple[int, frozenset]] = [(-1, frozenset(ids))]
        self.leaders: dict[int, int] = {}
        self.actions: list[tuple[int, int, str, tuple]] = []
        self._aseq = 0
        self.next_value = 0
        self.acked: dict[int, tuple[int, bytes]] = {}
        self.pending_appends: list[tuple[int, int, int, bytes]] = []   # node, offset, epoch, value
        self.healed_at: int | None = None
        self.post_heal_commit = False
        self.stats = defaultdict(int)
        for n in self.nodes.values():
            n.start(0)
        self._plan()

    # -- fault plans --------------------------------------------------------------------------

    def at(self, t: int, what: str, *args) -> None:
        self._aseq += 1
        heapq.heappush(self.actions, (t, self._aseq, what, args))

    def _plan(self) -> None:
        r = self.rng
        voters = sorted(self.static_voters)
        all_ids = sorted(self.nodes)
        t = r.randrange(150, 300)
        while t < CHAOS_MS and self.scenario != QUIET:
            s = self.scenario
            if s in ("crash", "snapshot"):
                victim = r.choice(all_ids if r.random() < 0.3 else voters)
                self.at(t, "crash", victim, r.random() < 0.5)
                self.at(t + r.randrange(50, 400 if s == "crash" else 700), "restart", victim)
                t += r.randrange(100, 350)
            elif s == "isolate":
                self.at(t, "isolate_leader")
                t += r.randrange(200, 500)
                self.at(t, "heal")
                t += r.randrange(50, 200)
            elif s == "split":
                ids = voters[:]
                r.shuffle(ids)
                k = len(ids) // 2 if r.random() < 0.5 else (len(ids) + 1) // 2
                self.at(t, "partition", tuple(ids[:k]), tuple(ids[k:] + [o for o in all_ids if o not in voters]))
                t += r.randrange(200, 500)
                self.at(t, "heal")
                t += r.randrange(50, 200)
            elif s == "flaky":
                a, b = r.sample(all_ids, 2)
                self.at(t, "cut", a, b)
                self.at(t + r.randrange(5, 120), "heal_link", a, b)
                t += r.randrange(10, 60)
                if r.random() < 0.05:
                    v = r.choice(voters)
                    self.at(t, "crash", v, r.random() < 0.5)
                    self.at(t + r.randrange(20, 200), "restart", v)
            elif s == "voters":
                self.at(t, "voter_change")
                t += r.randrange(80, 250)
                if r.random() < 0.3:
                    victim = r.choice(all_ids)
                    self.at(t, "crash", victim, r.random() < 0.5)
                    self.at(t + r.randrange(50, 300), "restart", victim)
        if self.scenario != QUIET:
            self.at(CHAOS_MS, "heal_all")

    def do(self, what: str, args: tuple) -> None:
        self.stats[what] += 1
        if what == "crash":
            n = self.nodes[args[0]]
            if n.node is not None:
                n.crash(args[1])
        elif what == "flushed":
            n = self.nodes[args[0]]
            if n.incarnation == args[1]:
                n.flush_due = False
                n.log.complete_flush()
        elif what == "restart":
            n = self.nodes[args[0]]
            if n.node is None:
                n.start(self.t)
        elif what == "isolate_leader":
            lead = self.current_leader()
            if lead is not None:
                self.net.isolate(lead, self.nodes)
        elif what == "partition":
            self.net.partition([list(args[0]), list(args[1])])
        elif what == "cut":
            self.net.cut(args[0], args[1])
        elif what == "heal_link":
            self.net.heal(args[0], args[1])
        elif what == "heal":
            self.net.heal_all()
        elif what == "heal_all":
            self.net.heal_all()
            self.net.faults = Faults(min_delay_ms=1, max_delay_ms=5)
            for n in self.nodes.values():
                if n.node is None:
                    n.start(self.t)
            self.healed_at = self.t
        elif what == "voter_change":
            lead = self.current_leader()
            if lead is None:
                return
            node = self.nodes[lead].node
            candidates = [i for i in self.nodes if i < 100]
            voters = node.voters
            if len(voters) > 2 and self.rng.random() < 0.5:
                vid = self.rng.choice(sorted(voters))
                msg = RemoveRaftVoterRequest(voter_id=vid)
            else:
                outside = [i for i in candidates if i not in voters]
                if not outside:
                    return
                vid = self.rng.choice(outside)
                msg = AddRaftVoterRequest(voter_id=vid, timeout_ms=300, listeners=[])
            self.net.send(Envelope(ADMIN, lead, self.t, msg), self.t)

    def close(self) -> None:
        for n in self.nodes.values():
            if isinstance(n.log, DiskRaftLog):
                n.log.close()

    def current_leader(self) -> int | None:
        best = None
        for n in self.nodes.values():
            if n.node is not None and n.node.role == LEADER:
                if best is None or n.node.epoch > self.nodes[best].node.epoch:
                    best = n.id
        return best

    # -- the loop -----------------------------------------------------------------------------

    def run(self, end_ms: int | None = None, final: bool = True) -> "Sim":
        """Run to end_ms (default: the healing bound); ``final`` checks liveness at the end
        and stops early once it holds."""
        end = end_ms if end_ms is not None else CHAOS_MS + HEAL_BOUND_MS
        next_client = 0
        while self.t <= end:
            cands = [end + 1, next_client]
            due = self.net.next_due_ms()
            if due is not None:
                cands.append(due)
            if self.actions:
                cands.append(self.actions[0][0])
            cands.extend(n.deadline for n in self.nodes.values() if n.node is not None)
            self.t = max(self.t, min(cands))
            if self.t > end:
                break
            while self.actions and self.actions[0][0] <= self.t:
                _t, _s, what, args = heapq.heappop(self.actions)
                self.do(what, args)
            if self.t >= next_client:
                self.client_append()
                next_client = self.t + self.rng.randrange(5, 30)
            inbox: dict[int, list[Envelope]] = defaultdict(list)
            for env in self.net.pop_due(self.t):
                if env.dst == ADMIN:
                    self.stats["admin_" + type(env.msg).__name__ + str(env.msg.error_code)] += 1
                    continue
                inbox[env.dst].append(env)
            for n in self.nodes.values():
                if n.node is None:
                    continue
                got = inbox.get(n.id)
                if not got and n.deadline > self.t:
                    continue
                try:
                    out, deadline = n.node.poll(n.local(self.t), got or [])
                except AssertionError as e:
                    self.fail(f"node {n.id} refused: {e}")
                n.deadline = max(self.t + (0 if got else 1), n.to_global(deadline))
                if getattr(n.log, "flush_wanted", 0) > n.log.flushed_offset and not n.flush_due:
                    n.flush_due = True
                    self.at(self.t + self.flush_rng.randrange(10), "flushed", n.id, n.incarnation)
                for env in out:
                    self.net.send(env, self.t)
                self.stats["polls"] += 1
                self.apply(n)
            self.check()
            if final and self.post_heal_commit and self.live():
                self.stats["recovered_ms"] = self.t - self.healed_at
                return self
        if final:
            self.check_liveness()
        return self

    def live(self) -> bool:
        lead = self.current_leader()
        if lead is None:
            return False
        node = self.nodes[lead].node
        following = [v for v in node.voters if v != lead and self.nodes[v].node is not None
                     and self.nodes[v].node.leader_id == lead and self.nodes[v].node.role == FOLLOWER]
        return (len(following) + 1) * 2 > len(node.voters)

    def client_append(self) -> None:
        lead = self.current_leader()
        if lead is None:
            return
        n = self.nodes[lead]
        self.next_value += 1
        value = b"v%d" % self.next_value
        try:
            off = n.node.append([value], n.local(self.t))
        except Exception:
            return
        self.pending_appends.append((lead, off, n.node.epoch, value))
        n.deadline = min(n.deadline, self.t + self.rng.randrange(4))   # a crash may beat the flush

    # -- the state machine and the checks -----------------------------------------------------

    def fail(self, why: str) -> None:
        raise Violation(f"t={self.t}: {why}\n  reproduce: {self.command()}")

    def command(self) -> str:
        bad = f" --bad {self.bad}" if self.bad else ""
        disk = " --disk" if self.root else ""
        return (f"python -m tests.sim.raft_sim --scenario {self.scenario} "
                f"--voters {len(self.static_voters)} --seed {self.seed}{bad}{disk}")

    def apply(self, n: SimNode) -> None:
        node = n.node
        for item in node.take_committed():
            if isinstance(item, SnapshotLoaded):
                end = item.snapshot_id.end_offset
                if end > len(self.committed):
                    self.fail(f"node {n.id} loaded snapshot {item.snapshot_id} beyond what is committed")
                replay = [v for _e, v in self.committed[:end] if v is not None]
                if item.records != replay:
                    self.fail(f"node {n.id}: snapshot {item.snapshot_id} != replay of the log")
                n.values, n.applied = list(item.records), end
                self.stats["snapshot_loads"] += 1
                continue
            b: CommittedBatch = item
            if b.base_offset != n.applied:
                self.fail(f"node {n.id}: committed batch at {b.base_offset}, expected {n.applied}")
            vals = b.records if not b.is_control else [None] * (b.last_offset - b.base_offset + 1)
            for i, v in enumerate(vals):
                off = b.base_offset + i
                if off < len(self.committed):
                    if self.committed[off] != (b.epoch, v):
                        self.fail(f"node {n.id}: committed offset {off} is {(b.epoch, v)}, "
                                  f"was {self.committed[off]}")
                elif off == len(self.committed):
                    self.committed.append((b.epoch, v))
                    if b.is_control:
                        self._note_control(n, off)
                else:
                    self.fail(f"gap in committed log at {off}")
                if v is not None:
                    n.values.append(v)
            n.applied = b.last_offset + 1
        if n.applied != node.high_watermark:
            self.fail(f"node {n.id}: applied {n.applied} != hw {node.high_watermark}")
        # the state machine above asks for snapshots now and then (by "size")
        every = 5 if self.scenario == "snapshot" else 15
        if n.applied - n.last_snapshot_applied >= every and self.rng.random() < 0.5:
            node.create_snapshot(n.applied, list(n.values), n.local(self.t))
            n.last_snapshot_applied = n.applied
            self.stats["snapshots"] += 1

    def _note_control(self, n: SimNode, off: int) -> None:
        for b in n.log.batches(off):
            for rec in b.records():
                if rec.offset == off and control_type(rec.key) == ControlRecordType.KRAFT_VOTERS:
                    vs = frozenset(v.voter_id for v in VotersRecord.decode(rec.value, 0).voters)
                    self.committed_voters.append((off, vs))
            return

    def check(self) -> None:
        for n in self.nodes.values():
            node = n.node
            if node is None:
                continue
            if node.epoch < n.last_epoch:
                self.fail(f"node {n.id}: epoch went back {n.last_epoch} -> {node.epoch}")
            n.last_epoch = node.epoch
            if node.high_watermark < n.last_hw:
                self.fail(f"node {n.id}: high watermark went back {n.last_hw} -> {node.high_watermark}")
            n.last_hw = node.high_watermark
            if node.role == LEADER:
                prev = self.leaders.setdefault(node.epoch, n.id)
                if prev != n.id:
                    self.fail(f"two leaders in epoch {node.epoch}: {prev} and {n.id}")
        c = len(self.committed)
        if c == 0:
            return
        epoch = self.committed[c - 1][0]
        # a committed entry lives on a majority of the committed voter set, or, while a
        # voter change is in flight (it takes effect once appended), of the new set
        sets = {self.committed_voters[-1][1]}
        if self.dynamic:
            for n in self.nodes.values():
                if n.node is not None:
                    sets.update(frozenset(vs) for off, vs in n.node._voter_history if off >= c)
        holding = set()
        for i in frozenset().union(*sets):
            log = self.nodes[i].log
            snap = snaps.latest(self.nodes[i].snaps)       # a snapshot covers what is below it
            if log.start_offset >= c or (snap is not None and snap.end_offset >= c) or \
                    (log.flushed_offset >= c and log.epoch_for_offset(c - 1) == epoch):
                holding.add(i)
        if not any(len(holding & vs) * 2 > len(vs) for vs in sets):
            self.fail(f"committed offset {c - 1} (epoch {epoch}) is only on {sorted(holding)}; "
                      f"voter sets {[sorted(v) for v in sets]}")
        for lead, off, ep, value in self.pending_appends:
            if off < c:
                if self.committed[off] == (ep, value):
                    self.acked[off] = (ep, value)
                    if self.healed_at is not None and self.t >= self.healed_at:
                        self.post_heal_commit = True
        self.pending_appends = [p for p in self.pending_appends if p[1] >= c]

    def check_liveness(self) -> None:
        lead = self.current_leader()
        if lead is None:
            self.fail(f"no leader {HEAL_BOUND_MS} ms after healing")
        if not self.live():
            self.fail(f"leader {lead} is not followed by a majority of {sorted(self.nodes[lead].node.voters)}")
        if not self.post_heal_commit:
            self.fail(f"nothing committed in the {HEAL_BOUND_MS} ms after healing")


def run_seeds(scenario: str, voters: int, seeds, bad: str | None = None) -> list[str]:
    """Runs the seeds; returns the violations (each ending with its reproduce command)."""
    failures = []
    for s in seeds:
        try:
            Sim(scenario, s, voters=voters, bad=bad).run()
        except Violation as e:
            failures.append(str(e))
    return failures


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", choices=SCENARIOS + ("all",), default="all")
    ap.add_argument("--voters", type=int, default=3)
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--seed", type=int, help="run one seed")
    ap.add_argument("--bad", choices=("minority_hw", "fetch_before_flush"), help="a deliberately broken rule")
    ap.add_argument("--disk", action="store_true", help="real files (in a temporary directory)")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args(argv)
    scenarios = SCENARIOS if a.scenario == "all" else (a.scenario,)
    seeds = [a.seed] if a.seed is not None else range(a.first_seed, a.first_seed + a.seeds)
    bad = 0
    for sc in scenarios:
        t0 = time.monotonic()
        n = worst = 0
        for s in seeds:
            n += 1
            try:
                if a.disk:
                    with tempfile.TemporaryDirectory() as root:
                        sim = Sim(sc, s, voters=a.voters, bad=a.bad, verbose=a.verbose, root=root)
                        try:
                            sim.run()
                        finally:
                            sim.close()
                else:
                    sim = Sim(sc, s, voters=a.voters, bad=a.bad, verbose=a.verbose).run()
                worst = max(worst, sim.stats["recovered_ms"])
                if a.verbose:
                    print(f"seed {s}: committed {len(sim.committed)}, leaders {len(sim.leaders)}, "
                          f"{dict(sim.stats)}")
            except Violation as e:
                bad += 1
                print(f"VIOLATION {sc} seed {s}: {e}")
        print(f"{sc} ({a.voters} voters): {n} seeds in {time.monotonic() - t0:.1f} s; "
              f"slowest recovery after healing {worst} ms")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
