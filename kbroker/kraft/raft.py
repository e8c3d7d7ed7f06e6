"""Raft for ``__cluster_metadata`` (Kafka's KRaft: KIP-595, KIP-630, KIP-996, KIP-853) as a
pure object: no I/O besides its RaftLog / QuorumStore / SnapshotStore, no awaits, no clock.

    node = RaftNode(node_id, log, store, snapshots, config, rng, voters={1, 2, 3})
    outbound, next_deadline_ms = node.poll(now_ms, inbound_envelopes)
    last_offset = node.append([framed_record, ...], now_ms)     # leader only
    node.resign(now_ms)                                          # EndQuorumEpoch hand-over
    node.take_committed() -> [CommittedBatch | SnapshotLoaded]   # in log order, once each

Roles, as Kafka's QuorumState: ``unattached`` (epoch known, no leader), ``prospective``
(KIP-996 pre-vote: asks the voters whether they would vote, without bumping the epoch, so a
node cut off and healed cannot depose a healthy leader), ``candidate`` (bumped epoch, voted
for itself), ``leader``, ``follower`` (fetches from the leader), ``resigned`` (a leader that
handed over with EndQuorumEpoch). Observers (nodes not in the voter set) are followers or
unattached and never vote nor stand.

Every change of epoch, vote or leader is written to the QuorumStore before the node acts on
it. Followers and observers pull with Fetch (last fetched epoch; a diverging epoch in the
answer makes them truncate); the leader parks a Fetch that has nothing new until data arrives
or ``max_wait_ms`` passes. The high watermark is the largest offset a majority of voters have
flushed, counted only once it covers the LeaderChangeMessage the leader wrote at the start of
its epoch, and never goes back. A flush may end after the poll that asked for it (the log's
``on_flushed`` then has the node polled again); a follower's next Fetch waits for it. A
replica behind the leader's log start gets a snapshot id and pulls it with FetchSnapshot.
The voter set is static (``controller.quorum.voters``, kraft.version 0) or comes from
VotersRecords in the log and snapshots (KIP-853; one
AddRaftVoter / RemoveRaftVoter at a time, each committed before the next).

Pre-vote travels in the Vote request as a tagged field (``PRE_VOTE_TAG``): the schemas we
generate from stop at Vote v1, before Kafka's v2 PreVote field.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from kbroker.kraft import snapshots as snaps
from kbroker.kraft.quorum_store import ElectionState, QuorumStore
from kbroker.kraft.raft_log import METADATA_TOPIC, RaftLog, build_batch, build_control_batch, control_type
from kbroker.kraft.snapshots import SnapshotId, SnapshotStore
from kbroker.kraft.transport import Envelope
from kbroker.wire.errors import Errors
from kbroker.wire.generated.add_raft_voter_request import AddRaftVoterRequest
from kbroker.wire.generated.add_raft_voter_response import AddRaftVoterResponse
from kbroker.wire.generated.begin_quorum_epoch_request import BeginQuorumEpochRequest
from kbroker.wire.generated.begin_quorum_epoch_response import BeginQuorumEpochResponse
from kbroker.wire.generated.describe_quorum_request import DescribeQuorumRequest
from kbroker.wire.generated.describe_quorum_response import DescribeQuorumResponse
from kbroker.wire.generated.end_quorum_epoch_request import EndQuorumEpochRequest
from kbroker.wire.generated.end_quorum_epoch_response import EndQuorumEpochResponse
from kbroker.wire.generated.fetch_request import FetchRequest
from kbroker.wire.generated.fetch_response import FetchResponse
from kbroker.wire.generated.fetch_snapshot_request import FetchSnapshotRequest
from kbroker.wire.generated.fetch_snapshot_response import FetchSnapshotResponse
from kbroker.wire.generated.k_raft_version_record import KRaftVersionRecord
from kbroker.wire.generated.leader_change_message import LeaderChangeMessage
from kbroker.wire.generated.remove_raft_voter_request import RemoveRaftVoterRequest
from kbroker.wire.generated.remove_raft_voter_response import RemoveRaftVoterResponse
from kbroker.wire.generated.vote_request import VoteRequest
from kbroker.wire.generated.vote_response import VoteResponse
from kbroker.wire.generated.voters_record import VotersRecord
from kbroker.wire.records import ControlRecordType, RecordBatch, iter_batches

PRE_VOTE_TAG = 10_000
_CLUSTER_CHECKED = {"VoteRequest": VoteResponse, "BeginQuorumEpochRequest": BeginQuorumEpochResponse,
                    "EndQuorumEpochRequest": EndQuorumEpochResponse, "FetchRequest": FetchResponse,
                    "FetchSnapshotRequest": FetchSnapshotResponse}
UNATTACHED, PROSPECTIVE, CANDIDATE, LEADER, FOLLOWER, RESIGNED = (
    "unattached", "prospective", "candidate", "leader", "follower", "resigned")
NEVER = 1 << 62


class NotLeaderError(Exception):
    """append() on a node that is not the leader (or is resigning)."""


@dataclass
class RaftConfig:
    """Kafka's controller.quorum.* names and defaults."""
    election_timeout_ms: int = 1000
    fetch_timeout_ms: int = 2000
    election_backoff_max_ms: int = 1000
    request_timeout_ms: int = 2000
    retry_backoff_ms: int = 20
    fetch_max_wait_ms: int = 500
    fetch_max_bytes: int = 8 * 1024 * 1024
    snapshot_chunk_bytes: int = 1024 * 1024
    cluster_id: str | None = None
    # test hooks: deliberately broken rules the simulation's checker must catch
    unsafe_minority_hw: bool = False
    unsafe_fetch_before_flush: bool = False

    @classmethod
    def from_kafka(cls, cfg) -> "RaftConfig":
        """From a kbroker.config.Config (or any mapping with Kafka's keys)."""
        get = cfg.get if hasattr(cfg, "get") else cfg.__getitem__
        return cls(election_timeout_ms=int(get("controller.quorum.election.timeout.ms")),
                   fetch_timeout_ms=int(get("controller.quorum.fetch.timeout.ms")),
                   election_backoff_max_ms=int(get("controller.quorum.election.backoff.max.ms")),
                   request_timeout_ms=int(get("controller.quorum.request.timeout.ms")),
                   retry_backoff_ms=int(get("controller.quorum.retry.backoff.ms")))


class CommittedBatch(NamedTuple):
    base_offset: int
    last_offset: int
    epoch: int
    append_time_ms: int
    records: list          # framed record values (empty for a control batch)
    is_control: bool


class SnapshotLoaded(NamedTuple):
    snapshot_id: SnapshotId
    records: list          # framed record values: the whole state below snapshot_id.end_offset


@dataclass
class ReplicaProgress:
    end_offset: int = -1
    last_fetch_ms: int = -1
    last_caught_up_ms: int = -1


@dataclass
class _Pending:
    dst: int
    kind: str
    deadline: int
    round: int = 0


@dataclass
class _VoterChange:
    src: int
    corr: int
    kind: str              # "add" | "remove"
    voter_id: int
    record: VotersRecord | None = None
    offset: int = -1       # of the VotersRecord, once appended
    deadline: int = 0


def _voters_record(voters: dict[int, Any]) -> VotersRecord:
    return VotersRecord(version=0, voters=[voters[v] if voters[v] is not None else
                                           VotersRecord.Voter(voter_id=v, endpoints=[],
                                                              k_raft_version_feature=VotersRecord.Voter.KRaftVersionFeature(min_supported_version=0, max_supported_version=1))
                                           for v in sorted(voters)])


def _voter_dict(rec: VotersRecord) -> dict[int, Any]:
    return {v.voter_id: v for v in rec.voters}


class RaftNode:
    def __init__(self, node_id: int, log: RaftLog, store: QuorumStore, snapshots: SnapshotStore,
                 config: RaftConfig, rng: random.Random, *, voters=None, now_ms: int = 0,
                 bootstrap: list[int] | None = None) -> None:
        """``voters``: static voter ids (kraft.version 0), or None to take the voter set from
        the snapshots (bootstrap checkpoint) and the log. ``bootstrap``: destination ids an
        observer that knows neither leader nor voters fetches from to find the leader
        (``controller.quorum.bootstrap.servers``; the transport maps them to addresses)."""
        self.node_id = node_id
        self.log = log
        self.store = store
        self.snapshots = snapshots
        self.config = config
        self.rng = rng
        self.kraft_version = 0
        self.bootstrap = list(bootstrap or ())
        # voter set history: (offset of the VotersRecord or -1 for the base, {id: Voter|None})
        self._voter_history: list[tuple[int, dict[int, Any]]] = []
        if voters is not None:
            self._voter_history.append((-1, {v: None for v in voters}))
        self.high_watermark = 0
        self._applied = 0                      # next offset to hand to take_committed
        self._pending_snapshot_load: SnapshotId | None = None
        latest = snaps.latest(snapshots)
        if latest is not None:
            content = snaps.parse_snapshot(snapshots.read(latest))
            if content.voters is not None and voters is None:
                self._voter_history = [(-1, _voter_dict(content.voters))]
                self.kraft_version = max(1, content.kraft_version)
            if log.end_offset < latest.end_offset or log.start_offset > latest.end_offset:
                log.reset_to(latest.end_offset, latest.epoch)
            elif log.start_offset < latest.end_offset:
                log.advance_start(latest.end_offset)
            log.start_epoch = latest.epoch if log.start_offset == latest.end_offset else log.start_epoch
            self.high_watermark = latest.end_offset
            if latest.end_offset > 0 or content.records:
                self._pending_snapshot_load = latest
        self._scan_voters(log.start_offset)
        self.epoch = 0
        self.leader_id = -1
        self.voted_id = -1
        st = store.read()
        if st is not None:
            self.epoch, self.leader_id, self.voted_id = st.epoch, st.leader_id, st.voted_id
        self.role = UNATTACHED
        self.leader_id = -1 if self.leader_id == node_id else self.leader_id
        if self.leader_id >= 0:
            self.role = FOLLOWER
        self._corr = 0
        self._pending: dict[int, _Pending] = {}
        self._out: list[Envelope] = []
        self._election_deadline = NEVER
        self._fetch_deadline = NEVER
        self._next_fetch_ms = 0
        self._round = 0
        self._granted: set[int] = set()
        self._rejected: set[int] = set()
        self._progress: dict[int, ReplicaProgress] = {}
        self._epoch_start = 0
        self._begin_acked: set[int] = set()
        self._begin_resend_ms = 0
        self._parked: list[tuple[Envelope, int, int, int]] = []   # env, deadline, leo, hw
        self._snapshot_fetch: tuple[SnapshotId, bytearray] | None = None
        self._voter_change: _VoterChange | None = None
        self._end_quorum_resend_ms = NEVER
        self._end_quorum_acked: set[int] = set()
        self._preferred: list[int] = []
        self._last_append_ms = now_ms
        self._became_leader_ms = now_ms
        if self.role == FOLLOWER:
            self._fetch_deadline = now_ms + config.fetch_timeout_ms
        else:
            self._reset_election_timer(now_ms)
            if self.voters == {node_id}:
                self._election_deadline = now_ms      # the only voter stands at once (Kafka too)

    # ============================================================== public state

    @property
    def voters(self) -> frozenset:
        return frozenset(self._voter_history[-1][1]) if self._voter_history else frozenset()

    @property
    def voter_entries(self) -> dict:
        """The latest voter set (committed or not, as Raft uses it): voter id -> its entry from
        the VotersRecord (KIP-853: directory id and endpoints), or None for a voter known only
        from static ``controller.quorum.voters``. A copy; callers read endpoints from it."""
        return dict(self._voter_history[-1][1]) if self._voter_history else {}

    @property
    def epoch_start_offset(self) -> int:
        """The log end offset when this node last became leader: its first record of the epoch
        (LeaderChange) goes there, so state applied past it includes every record committed by
        earlier leaders (a new controller is active only then). 0 before any leadership."""
        return self._epoch_start

    @property
    def is_voter(self) -> bool:
        return self.node_id in self.voters

    @property
    def log_end_offset(self) -> int:
        return self.log.end_offset

    def __repr__(self) -> str:
        return (f"RaftNode({self.node_id} {self.role} epoch={self.epoch} leader={self.leader_id} "
                f"hw={self.high_watermark} leo={self.log.end_offset})")

    # ============================================================== poll

    def poll(self, now_ms: int, inbound: list[Envelope]) -> tuple[list[Envelope], int]:
        for env in inbound:
            if env.dst != self.node_id:
                continue
            if env.is_response:
                self._on_response(env, now_ms)
            else:
                self._on_request(env, now_ms)
        self._on_timers(now_ms)
        self._act(now_ms)
        out, self._out = self._out, []
        return out, self._next_deadline(now_ms)

    def _next_deadline(self, now_ms: int) -> int:
        ds = [self._election_deadline, self._fetch_deadline]
        ds.extend(p.deadline for p in self._pending.values())
        ds.extend(d for _e, d, _l, _h in self._parked)
        if self.role == LEADER:
            ds.append(self._begin_resend_ms if len(self._begin_acked) < len(self.voters) else NEVER)
            ds.append(self._check_quorum_deadline())
            if self._voter_change is not None:
                ds.append(self._voter_change.deadline)
        if self.role in (FOLLOWER, UNATTACHED) and not self._fetch_in_flight():
            ds.append(self._next_fetch_ms)
        if self.role == RESIGNED:
            ds.append(self._end_quorum_resend_ms)
        return max(min(ds), now_ms)

    # ============================================================== transitions

    def _persist(self) -> None:
        self.store.write(ElectionState(self.epoch, self.leader_id, self.voted_id,
                                       voters=tuple(sorted(self.voters)) if self.kraft_version == 0 else ()))

    def _random_timeout(self) -> int:
        t = self.config.election_timeout_ms
        return t + self.rng.randrange(t)

    def _reset_election_timer(self, now_ms: int) -> None:
        self._election_deadline = now_ms + self._random_timeout() if self.is_voter else NEVER

    def _become(self, role: str, epoch: int, leader_id: int, voted_id: int, now_ms: int) -> None:
        changed = (epoch, leader_id, voted_id) != (self.epoch, self.leader_id, self.voted_id)
        if epoch < self.epoch:
            raise AssertionError(f"epoch going back {self.epoch} -> {epoch}")
        self.epoch, self.leader_id, self.voted_id = epoch, leader_id, voted_id
        if changed:
            self._persist()
        prev = self.role
        self.role = role
        self._parked.clear()
        self._granted.clear()
        self._rejected.clear()
        self._snapshot_fetch = None if role != FOLLOWER or prev != FOLLOWER else self._snapshot_fetch
        dropped = ("vote", "prevote", "begin", "end")
        if changed or role != prev:
            dropped += ("fetch", "snapshot")   # a fetch to an old leader would block the next
        self._pending = {c: p for c, p in self._pending.items() if p.kind not in dropped}
        self._fetch_deadline = NEVER
        self._election_deadline = NEVER
        if self._voter_change is not None and role != LEADER:
            self._answer_voter_change(Errors.NOT_LEADER_OR_FOLLOWER)
        if role == FOLLOWER:
            self._fetch_deadline = now_ms + self.config.fetch_timeout_ms
            self._next_fetch_ms = now_ms
        elif role == UNATTACHED:
            self._reset_election_timer(now_ms)
            self._next_fetch_ms = now_ms
        elif role in (PROSPECTIVE, CANDIDATE):
            self._round += 1
            self._election_deadline = now_ms + self._random_timeout()
            self._granted.add(self.node_id)
            for v in sorted(self.voters):
                if v != self.node_id:
                    self._send_vote(v, role == PROSPECTIVE, now_ms)
            self._maybe_win(now_ms)
        elif role == RESIGNED:
            self._election_deadline = now_ms + self.config.election_timeout_ms
            self._end_quorum_resend_ms = now_ms
            self._end_quorum_acked = set()

    def _observe_epoch(self, epoch: int, leader_id: int, now_ms: int) -> bool:
        """Something told us of (epoch, leader). Returns True when our state changed."""
        if epoch > self.epoch:
            if leader_id >= 0 and leader_id != self.node_id:
                self._become(FOLLOWER, epoch, leader_id, -1, now_ms)
            else:
                self._become(UNATTACHED, epoch, -1, -1, now_ms)
            return True
        if (epoch == self.epoch and leader_id >= 0 and leader_id != self.node_id
                and (self.role in (UNATTACHED, CANDIDATE) or
                     self.role == PROSPECTIVE and leader_id != self.leader_id)):
            # a prospective keeps the leader it gave up on; hearing of it again is no news
            self._become(FOLLOWER, epoch, leader_id, self.voted_id, now_ms)
            return True
        return False

    def _start_prevote(self, now_ms: int) -> None:
        if not self.is_voter:
            self._become(UNATTACHED, self.epoch, -1, self.voted_id, now_ms)
            return
        self._become(PROSPECTIVE, self.epoch, self.leader_id if self.role in (FOLLOWER, PROSPECTIVE) else -1,
                     self.voted_id, now_ms)

    def _maybe_win(self, now_ms: int) -> None:
        n = len(self.voters)
        if len(self._granted & self.voters) * 2 > n:
            if self.role == PROSPECTIVE:
                self._become(CANDIDATE, self.epoch + 1, -1, self.node_id, now_ms)
            elif self.role == CANDIDATE:
                self._become_leader(now_ms)
        elif len(self._rejected & self.voters) * 2 >= n and self.role == PROSPECTIVE \
                and self.leader_id >= 0:
            # KIP-996: the others still follow our old leader; so do we again
            self._become(FOLLOWER, self.epoch, self.leader_id, self.voted_id, now_ms)
        elif len(self._rejected & self.voters) * 2 >= n and self.role in (PROSPECTIVE, CANDIDATE):
            # lost: back off (Kafka's exponential election backoff, capped) and try again
            backoff = self.rng.randrange(max(1, self.config.election_backoff_max_ms))
            self._election_deadline = min(self._election_deadline, now_ms + backoff)

    def _become_leader(self, now_ms: int) -> None:
        granted = sorted(self._granted & self.voters)
        self._become(LEADER, self.epoch, self.node_id, self.node_id, now_ms)
        self._progress = {}
        self._begin_acked = {self.node_id}
        self._begin_resend_ms = now_ms
        self._became_leader_ms = now_ms
        self._epoch_start = self.log.end_offset
        lc = LeaderChangeMessage(version=0, leader_id=self.node_id,
                                 voters=[LeaderChangeMessage.Voter(voter_id=v) for v in sorted(self.voters)],
                                 granting_voters=[LeaderChangeMessage.Voter(voter_id=v) for v in granted])
        self._append_batch(build_control_batch(self.log.end_offset, self.epoch,
                                               [(ControlRecordType.LEADER_CHANGE, lc.encode(0))], now_ms))

    # ============================================================== timers and actions

    def _on_timers(self, now_ms: int) -> None:
        for corr, p in list(self._pending.items()):
            if now_ms >= p.deadline:
                del self._pending[corr]
                if p.kind in ("fetch", "snapshot"):
                    self._next_fetch_ms = now_ms + self.config.retry_backoff_ms
        if self.role == FOLLOWER and now_ms >= self._fetch_deadline:
            self._start_prevote(now_ms)
        elif self.role in (UNATTACHED, PROSPECTIVE, CANDIDATE, RESIGNED) and now_ms >= self._election_deadline:
            self._start_prevote(now_ms)
        elif self.role == LEADER:
            if now_ms >= self._check_quorum_deadline():
                self.resign(now_ms)           # lost touch with a majority (Kafka's check quorum)
            elif self._voter_change is not None and now_ms >= self._voter_change.deadline \
                    and self._voter_change.offset < 0:
                self._answer_voter_change(Errors.REQUEST_TIMED_OUT)

    def _check_quorum_deadline(self) -> int:
        others = [v for v in self.voters if v != self.node_id]
        if not others or self.role != LEADER:
            return NEVER
        need = len(self.voters) // 2          # other voters needed with us for a majority
        if need == 0:
            return NEVER
        times = sorted((self._progress.get(v, ReplicaProgress()).last_fetch_ms for v in others), reverse=True)
        last = max(times[need - 1], self._became_leader_ms)
        return last + self.config.fetch_timeout_ms * 3 // 2

    def _act(self, now_ms: int) -> None:
        if self.role == LEADER:
            if self.log.flushed_offset < self.log.end_offset:
                self.log.flush()
            self._update_hw(now_ms)
            if now_ms >= self._begin_resend_ms:
                for v in sorted(self.voters - self._begin_acked):
                    self._send_begin(v, now_ms)
                self._begin_resend_ms = now_ms + self.config.request_timeout_ms
            self._complete_parked(now_ms)
            self._progress_voter_change(now_ms)
        elif self.role == RESIGNED:
            if now_ms >= self._end_quorum_resend_ms:
                self._send_end_quorum(now_ms)
                self._end_quorum_resend_ms = now_ms + self.config.request_timeout_ms
        elif self.role in (FOLLOWER, UNATTACHED):
            if self.log.flushed_offset < self.log.end_offset:
                self.log.flush()
            # the fetch offset tells the leader what this voter has durably: the next fetch
            # waits for a flush under way
            if not self._fetch_in_flight() and now_ms >= self._next_fetch_ms \
                    and (self.log.flushed_offset >= self.log.end_offset or self.config.unsafe_fetch_before_flush):
                if self.role == FOLLOWER:
                    self._send_fetch(self.leader_id, now_ms)
                elif not self.is_voter and (self.voters or self.bootstrap):
                    # an observer without a leader asks a voter; its answer names the leader
                    self._send_fetch(self.rng.choice(sorted(self.voters) or self.bootstrap), now_ms)

    def _fetch_in_flight(self) -> bool:
        return any(p.kind in ("fetch", "snapshot") for p in self._pending.values())

    # ============================================================== sending

    def _send(self, dst: int, msg, kind: str, now_ms: int) -> int:
        self._corr += 1
        self._pending[self._corr] = _Pending(dst, kind, now_ms + self.config.request_timeout_ms, self._round)
        self._out.append(Envelope(self.node_id, dst, self._corr, msg))
        return self._corr

    def _reply(self, env: Envelope, msg) -> None:
        self._out.append(Envelope(self.node_id, env.src, env.corr, msg))

    def _send_vote(self, dst: int, pre: bool, now_ms: int) -> None:
        part = VoteRequest.TopicData.PartitionData(
            partition_index=0, candidate_epoch=self.epoch,   # a prospective does not bump it
            candidate_id=self.node_id, last_offset_epoch=self.log.last_epoch,
            last_offset=self.log.end_offset,
            unknown_tagged_fields=[(PRE_VOTE_TAG, b"\x01")] if pre else None)
        req = VoteRequest(cluster_id=self.config.cluster_id, voter_id=dst,
                          topics=[VoteRequest.TopicData(topic_name=METADATA_TOPIC, partitions=[part])])
        self._send(dst, req, "prevote" if pre else "vote", now_ms)

    def _send_begin(self, dst: int, now_ms: int) -> None:
        part = BeginQuorumEpochRequest.TopicData.PartitionData(
            partition_index=0, leader_id=self.node_id, leader_epoch=self.epoch)
        self._send(dst, BeginQuorumEpochRequest(
            cluster_id=self.config.cluster_id, voter_id=dst,
            topics=[BeginQuorumEpochRequest.TopicData(topic_name=METADATA_TOPIC, partitions=[part])]),
            "begin", now_ms)

    def _send_end_quorum(self, now_ms: int) -> None:
        succ = self._preferred
        part = EndQuorumEpochRequest.TopicData.PartitionData(
            partition_index=0, leader_id=self.node_id, leader_epoch=self.epoch,
            preferred_successors=list(succ),
            preferred_candidates=[EndQuorumEpochRequest.TopicData.PartitionData.ReplicaInfo(candidate_id=v)
                                  for v in succ])
        req = EndQuorumEpochRequest(cluster_id=self.config.cluster_id, topics=[
            EndQuorumEpochRequest.TopicData(topic_name=METADATA_TOPIC, partitions=[part])])
        for v in succ:
            if v not in self._end_quorum_acked:
                self._send(v, req, "end", now_ms)

    def _send_fetch(self, dst: int, now_ms: int) -> None:
        if self._snapshot_fetch is not None:
            sid, buf = self._snapshot_fetch
            part = FetchSnapshotRequest.TopicSnapshot.PartitionSnapshot(
                partition=0, current_leader_epoch=self.epoch,
                snapshot_id=FetchSnapshotRequest.TopicSnapshot.PartitionSnapshot.SnapshotId(
                    end_offset=sid.end_offset, epoch=sid.epoch), position=len(buf))
            self._send(dst, FetchSnapshotRequest(
                cluster_id=self.config.cluster_id, replica_id=self.node_id,
                max_bytes=self.config.snapshot_chunk_bytes,
                topics=[FetchSnapshotRequest.TopicSnapshot(name=METADATA_TOPIC, partitions=[part])]),
                "snapshot", now_ms)
            return
        part = FetchRequest.FetchTopic.FetchPartition(
            partition=0, current_leader_epoch=self.epoch, fetch_offset=self.log.end_offset,
            last_fetched_epoch=self.log.last_epoch, log_start_offset=self.log.start_offset,
            partition_max_bytes=self.config.fetch_max_bytes)
        req = FetchRequest(cluster_id=self.config.cluster_id, replica_id=self.node_id,
                           replica_state=FetchRequest.ReplicaState(replica_id=self.node_id, replica_epoch=-1),
                           max_wait_ms=self.config.fetch_max_wait_ms if self.role == FOLLOWER else 0,
                           min_bytes=0, max_bytes=self.config.fetch_max_bytes,
                           topics=[FetchRequest.FetchTopic(topic=METADATA_TOPIC, partitions=[part])])
        self._send(dst, req, "fetch", now_ms)
        p = self._pending[self._corr]
        p.deadline = now_ms + self.config.fetch_max_wait_ms + self.config.request_timeout_ms

    # ============================================================== requests

    def _on_request(self, env: Envelope, now_ms: int) -> None:
        name = type(env.msg).__name__
        handler = getattr(self, "_handle_" + name, None)
        if handler is None:
            return
        theirs = getattr(env.msg, "cluster_id", None)
        if theirs and self.config.cluster_id and theirs != self.config.cluster_id \
                and name in _CLUSTER_CHECKED:
            self._reply(env, _CLUSTER_CHECKED[name](error_code=int(Errors.INCONSISTENT_CLUSTER_ID)))
            return
        handler(env, now_ms)

    def _handle_VoteRequest(self, env: Envelope, now_ms: int) -> None:
        p = env.msg.topics[0].partitions[0]
        pre = any(t == PRE_VOTE_TAG for t, _ in (p.unknown_tagged_fields or ()))
        cand = p.candidate_id
        log_ok = (p.last_offset_epoch, p.last_offset) >= (self.log.last_epoch, self.log.end_offset)
        granted = False
        err = Errors.NONE
        if not self.is_voter and env.msg.voter_id != self.node_id:
            # (a request naming this replica as its voter is answered: the candidate's voter
            # set may hold a VotersRecord adding it that it has not fetched yet, and without
            # its vote that set elects no one; Kafka checks only that the request is for it)
            err = Errors.INCONSISTENT_VOTER_SET
        elif cand not in self.voters:
            pass                        # a removed (or not yet added) voter cannot be elected
        elif pre:
            # KIP-996: grant only if the log is as good and we have no live leader; never
            # change our own state for a pre-vote
            live_leader = (self.role == LEADER or
                           (self.role == FOLLOWER and not self._leader_resigned() and
                            now_ms - self._leader_contact_ms < self.config.fetch_timeout_ms))
            granted = p.candidate_epoch >= self.epoch and log_ok and not live_leader
        else:
            if p.candidate_epoch > self.epoch:
                self._become(UNATTACHED, p.candidate_epoch, -1, -1, now_ms)
            if p.candidate_epoch == self.epoch and self.role in (UNATTACHED, PROSPECTIVE, RESIGNED) \
                    and self.voted_id in (-1, cand) and self.leader_id < 0 and log_ok:
                if self.voted_id != cand:
                    self.voted_id = cand
                    self._persist()
                self._reset_election_timer(now_ms)
                granted = True
            elif p.candidate_epoch == self.epoch and self.voted_id == cand and self.role == UNATTACHED:
                granted = True
        part = VoteResponse.TopicData.PartitionData(
            partition_index=0, error_code=int(Errors.NONE), leader_id=self.leader_id,
            leader_epoch=self.epoch, vote_granted=granted)
        self._reply(env, VoteResponse(error_code=int(err), topics=[
            VoteResponse.TopicData(topic_name=METADATA_TOPIC, partitions=[part])]))

    def _leader_resigned(self) -> bool:
        return self._fetch_deadline != NEVER and self._resigned_leader_epoch == self.epoch

    _resigned_leader_epoch = -1
    _leader_contact_ms = -NEVER        # last successful fetch from the leader (KIP-996 check)

    def _handle_BeginQuorumEpochRequest(self, env: Envelope, now_ms: int) -> None:
        p = env.msg.topics[0].partitions[0]
        err = Errors.NONE
        if p.leader_epoch < self.epoch:
            err = Errors.FENCED_LEADER_EPOCH
        elif p.leader_epoch == self.epoch and self.leader_id >= 0 and self.leader_id != p.leader_id:
            err = Errors.INCONSISTENT_VOTER_SET
        else:
            if self.role != FOLLOWER or self.leader_id != p.leader_id or p.leader_epoch > self.epoch:
                self._become(FOLLOWER, p.leader_epoch, p.leader_id,
                             self.voted_id if p.leader_epoch == self.epoch else -1, now_ms)
            self._leader_contact_ms = now_ms
        part = BeginQuorumEpochResponse.TopicData.PartitionData(
            partition_index=0, error_code=int(err), leader_id=self.leader_id, leader_epoch=self.epoch)
        self._reply(env, BeginQuorumEpochResponse(topics=[
            BeginQuorumEpochResponse.TopicData(topic_name=METADATA_TOPIC, partitions=[part])]))

    def _handle_EndQuorumEpochRequest(self, env: Envelope, now_ms: int) -> None:
        p = env.msg.topics[0].partitions[0]
        err = Errors.NONE
        if p.leader_epoch < self.epoch:
            err = Errors.FENCED_LEADER_EPOCH
        else:
            self._observe_epoch(p.leader_epoch, p.leader_id, now_ms)
            if self.role == FOLLOWER and self.leader_id == p.leader_id and self.is_voter:
                # the leader is leaving: stand soon, the most up to date successor first
                succ = list(p.preferred_successors)
                pos = succ.index(self.node_id) if self.node_id in succ else len(succ)
                backoff = 0 if pos == 0 else min(self.config.election_backoff_max_ms,
                                                 self.config.retry_backoff_ms << pos) + self.rng.randrange(
                    self.config.retry_backoff_ms + 1)
                self._resigned_leader_epoch = self.epoch
                self._fetch_deadline = min(self._fetch_deadline, now_ms + backoff)
                self._pending = {c: q for c, q in self._pending.items()
                                 if q.kind not in ("fetch", "snapshot")}
                self._next_fetch_ms = NEVER
        part = EndQuorumEpochResponse.TopicData.PartitionData(
            partition_index=0, error_code=int(err), leader_id=self.leader_id, leader_epoch=self.epoch)
        self._reply(env, EndQuorumEpochResponse(topics=[
            EndQuorumEpochResponse.TopicData(topic_name=METADATA_TOPIC, partitions=[part])]))

    # -- Fetch (leader side) ----------------------------------------------------------------

    def _fetch_response(self, env: Envelope, err=Errors.NONE, *, records=None, diverging=None,
                        snapshot: SnapshotId | None = None) -> None:
        P = FetchResponse.FetchableTopicResponse.PartitionData
        part = P(partition_index=0, error_code=int(err), high_watermark=self.high_watermark,
                 log_start_offset=self.log.start_offset,
                 current_leader=P.LeaderIdAndEpoch(leader_id=self.leader_id, leader_epoch=self.epoch),
                 records=records)
        if diverging is not None:
            part.diverging_epoch = P.EpochEndOffset(epoch=diverging[0], end_offset=diverging[1])
        if snapshot is not None:
            part.snapshot_id = P.SnapshotId(end_offset=snapshot.end_offset, epoch=snapshot.epoch)
        self._reply(env, FetchResponse(responses=[FetchResponse.FetchableTopicResponse(
            topic=METADATA_TOPIC, partitions=[part])], node_endpoints=self._leader_endpoints()))

    def _leader_endpoints(self) -> list:
        """Where the leader listens, when its VotersRecord says (KIP-853): an observer that
        asked a bootstrap server learns the leader's address from the answer."""
        voter = self._voter_history[-1][1].get(self.leader_id) if self._voter_history else None
        if voter is None or not voter.endpoints:
            return []
        ep = voter.endpoints[0]
        return [FetchResponse.NodeEndpoint(node_id=self.leader_id, host=ep.host, port=ep.port)]

    def _handle_FetchRequest(self, env: Envelope, now_ms: int) -> None:
        req = env.msg
        p = req.topics[0].partitions[0]
        replica = req.replica_state.replica_id if req.replica_state is not None else req.replica_id
        if replica < 0:
            replica = req.replica_id
        if self.role != LEADER:
            self._fetch_response(env, Errors.NOT_LEADER_OR_FOLLOWER)
            return
        if p.current_leader_epoch < self.epoch:
            self._fetch_response(env, Errors.FENCED_LEADER_EPOCH)
            return
        if p.current_leader_epoch > self.epoch:
            self._fetch_response(env, Errors.UNKNOWN_LEADER_EPOCH)
            return
        offset, last_epoch = p.fetch_offset, p.last_fetched_epoch
        prog = self._progress.setdefault(replica, ReplicaProgress())
        prog.last_fetch_ms = now_ms
        if replica in self.voters:
            self._begin_acked.add(replica)
        snap = self._snapshot_needed(offset, last_epoch)
        if snap is not None:
            self._fetch_response(env, snapshot=snap)
            return
        e, end = self.log.end_offset_for_epoch(last_epoch)
        if offset > 0 and (e != last_epoch or end < offset):
            self._fetch_response(env, diverging=(e, end))
            return
        prog.end_offset = offset                # may go back after the replica truncated
        if offset >= self.log.end_offset:
            prog.last_caught_up_ms = now_ms
        hw = self.high_watermark
        self._update_hw(now_ms)
        # a fetch that moved the high watermark is answered at once: its sender cannot know
        # the commit yet, and a broker's new leaderships wait on it (Kafka 4.1, KIP-1166)
        if offset >= self.log.end_offset and req.max_wait_ms > 0 and self.high_watermark == hw:
            self._parked.append((env, now_ms + req.max_wait_ms, self.log.end_offset, self.high_watermark))
            return
        self._fetch_response(env, records=self._read_for(req))

    def _read_for(self, req: FetchRequest) -> bytes:
        """The records a Fetch asked for, within both its byte limits (also when it was parked)."""
        p = req.topics[0].partitions[0]
        return self.log.read(p.fetch_offset, min(req.max_bytes, p.partition_max_bytes or req.max_bytes))

    def _snapshot_needed(self, offset: int, last_epoch: int) -> SnapshotId | None:
        """Kafka's validateOffsetAndEpoch: a replica below our log start gets the latest
        snapshot's id."""
        start = self.log.start_offset
        if start == 0:
            return None
        if offset < start or (offset == start and last_epoch != self.log.start_epoch) \
                or last_epoch < self.log.start_epoch:
            return snaps.latest(self.snapshots)
        return None

    def _complete_parked(self, now_ms: int) -> None:
        keep = []
        for env, deadline, leo, hw in self._parked:
            if now_ms >= deadline or self.log.end_offset != leo or self.high_watermark != hw:
                self._fetch_response(env, records=self._read_for(env.msg))
            else:
                keep.append((env, deadline, leo, hw))
        self._parked = keep

    def _update_hw(self, now_ms: int) -> None:
        if self.role != LEADER:
            return
        ends = []
        for v in self.voters:
            if v == self.node_id:
                ends.append(self.log.flushed_offset)
            else:
                ends.append(self._progress.get(v, ReplicaProgress()).end_offset)
        ends.sort(reverse=True)
        if self.config.unsafe_minority_hw:
            candidate = ends[0]                # deliberately wrong: one voter is enough
        else:
            candidate = ends[len(ends) // 2]   # the largest offset a majority has
        # only entries of our own epoch commit by counting (Raft's rule; the LeaderChange
        # record at _epoch_start makes this come true at once)
        if candidate > self._epoch_start and candidate > self.high_watermark:
            self.high_watermark = candidate

    def _handle_FetchSnapshotRequest(self, env: Envelope, now_ms: int) -> None:
        p = env.msg.topics[0].partitions[0]
        R = FetchSnapshotResponse.TopicSnapshot.PartitionSnapshot
        sid = SnapshotId(p.snapshot_id.end_offset, p.snapshot_id.epoch)
        err, data, pos = Errors.NONE, None, p.position
        size = 0
        if self.role != LEADER:
            err = Errors.NOT_LEADER_OR_FOLLOWER
        elif p.current_leader_epoch != self.epoch:
            err = Errors.FENCED_LEADER_EPOCH if p.current_leader_epoch < self.epoch else Errors.UNKNOWN_LEADER_EPOCH
        elif sid not in self.snapshots.ids():
            err = Errors.SNAPSHOT_NOT_FOUND
        else:
            whole = self.snapshots.read(sid)
            size = len(whole)
            if pos < 0 or pos > size:
                err = Errors.INVALID_REQUEST
            else:
                data = whole[pos:pos + min(env.msg.max_bytes, self.config.snapshot_chunk_bytes)]
            prog = self._progress.setdefault(env.msg.replica_id, ReplicaProgress())
            prog.last_fetch_ms = now_ms
        part = R(index=0, error_code=int(err),
                 snapshot_id=R.SnapshotId(end_offset=sid.end_offset, epoch=sid.epoch),
                 current_leader=R.LeaderIdAndEpoch(leader_id=self.leader_id, leader_epoch=self.epoch),
                 size=size, position=pos, unaligned_records=data)
        self._reply(env, FetchSnapshotResponse(topics=[FetchSnapshotResponse.TopicSnapshot(
            name=METADATA_TOPIC, partitions=[part])]))

    # -- DescribeQuorum, AddRaftVoter, RemoveRaftVoter -----------------------------------------

    def _handle_DescribeQuorumRequest(self, env: Envelope, now_ms: int) -> None:
        self._reply(env, self.describe_quorum(now_ms))

    def describe_quorum(self, now_ms: int) -> DescribeQuorumResponse:
        """Kafka's DescribeQuorum answer (only the leader knows the replicas' progress)."""
        D = DescribeQuorumResponse
        P = D.TopicData.PartitionData
        if self.role != LEADER:
            part = P(partition_index=0, error_code=int(Errors.NOT_LEADER_OR_FOLLOWER),
                     leader_id=self.leader_id, leader_epoch=self.epoch,
                     high_watermark=self.high_watermark, current_voters=[], observers=[])
        else:
            def state(r: int) -> D.ReplicaState:
                if r == self.node_id:
                    return D.ReplicaState(replica_id=r, log_end_offset=self.log.end_offset,
                                          last_fetch_timestamp=now_ms, last_caught_up_timestamp=now_ms)
                pr = self._progress.get(r, ReplicaProgress())
                return D.ReplicaState(replica_id=r, log_end_offset=pr.end_offset,
                                      last_fetch_timestamp=pr.last_fetch_ms,
                                      last_caught_up_timestamp=pr.last_caught_up_ms)
            part = P(partition_index=0, error_code=0, leader_id=self.node_id, leader_epoch=self.epoch,
                     high_watermark=self.high_watermark,
                     current_voters=[state(v) for v in sorted(self.voters)],
                     observers=[state(r) for r in sorted(self._progress) if r not in self.voters])
        nodes = []
        for vid, voter in sorted(self._voter_history[-1][1].items() if self._voter_history else ()):
            eps = [] if voter is None else [D.Node.Listener(name=e.name, host=e.host, port=e.port)
                                            for e in voter.endpoints]
            nodes.append(D.Node(node_id=vid, listeners=eps))
        return D(topics=[D.TopicData(topic_name=METADATA_TOPIC, partitions=[part])], nodes=nodes)

    def _handle_AddRaftVoterRequest(self, env: Envelope, now_ms: int) -> None:
        req = env.msg
        err = self._voter_change_error()
        if err is None and req.voter_id in self.voters:
            err = Errors.DUPLICATE_VOTER
        if err is not None:
            self._reply(env, AddRaftVoterResponse(error_code=int(err)))
            return
        voter = VotersRecord.Voter(
            voter_id=req.voter_id, voter_directory_id=req.voter_directory_id,
            endpoints=[VotersRecord.Voter.Endpoint(name=l.name, host=l.host, port=l.port) for l in req.listeners],
            k_raft_version_feature=VotersRecord.Voter.KRaftVersionFeature(min_supported_version=0, max_supported_version=1))
        new = dict(self._voter_history[-1][1])
        new[req.voter_id] = voter
        self._voter_change = _VoterChange(env.src, env.corr, "add", req.voter_id, _voters_record(new),
                                          deadline=now_ms + (req.timeout_ms or self.config.request_timeout_ms))

    def _handle_RemoveRaftVoterRequest(self, env: Envelope, now_ms: int) -> None:
        req = env.msg
        err = self._voter_change_error()
        if err is None and req.voter_id not in self.voters:
            err = Errors.VOTER_NOT_FOUND
        if err is None and len(self.voters) == 1:
            err = Errors.INVALID_REQUEST
        if err is not None:
            self._reply(env, RemoveRaftVoterResponse(error_code=int(err)))
            return
        new = dict(self._voter_history[-1][1])
        del new[req.voter_id]
        self._voter_change = _VoterChange(env.src, env.corr, "remove", req.voter_id, _voters_record(new),
                                          deadline=now_ms + self.config.request_timeout_ms)

    def _voter_change_error(self):
        if self.role != LEADER:
            return Errors.NOT_LEADER_OR_FOLLOWER
        if self.kraft_version == 0:
            return Errors.UNSUPPORTED_VERSION        # static controller.quorum.voters
        if self._voter_change is not None or self.high_watermark <= self._epoch_start \
                or self._voter_history[-1][0] >= self.high_watermark:
            return Errors.REQUEST_TIMED_OUT          # one change at a time, committed first
        return None

    def _progress_voter_change(self, now_ms: int) -> None:
        ch = self._voter_change
        if ch is None:
            return
        if ch.offset < 0:
            if ch.kind == "add":
                pr = self._progress.get(ch.voter_id)
                # the new voter must be fetching and caught up (Kafka: within the fetch timeout)
                if pr is None or pr.last_caught_up_ms < 0 or now_ms - pr.last_caught_up_ms > self.config.fetch_timeout_ms:
                    return
            ch.offset = self.log.end_offset
            self._append_batch(build_control_batch(
                ch.offset, self.epoch, [(ControlRecordType.KRAFT_VOTERS, ch.record.encode(0))], now_ms))
            self._update_hw(now_ms)
        if self.high_watermark > ch.offset:
            self._answer_voter_change(Errors.NONE)
            if ch.kind == "remove" and ch.voter_id == self.node_id:
                self.resign(now_ms)

    def _answer_voter_change(self, err) -> None:
        ch, self._voter_change = self._voter_change, None
        if ch is None:
            return
        cls = AddRaftVoterResponse if ch.kind == "add" else RemoveRaftVoterResponse
        self._out.append(Envelope(self.node_id, ch.src, ch.corr, cls(error_code=int(err))))

    # ============================================================== responses

    def _on_response(self, env: Envelope, now_ms: int) -> None:
        p = self._pending.pop(env.corr, None)
        if p is None or p.dst != env.src:
            return                      # late, duplicated or unknown
        handler = getattr(self, "_on_" + type(env.msg).__name__, None)
        if handler is not None:
            handler(env, p, now_ms)

    def _on_VoteResponse(self, env: Envelope, p: _Pending, now_ms: int) -> None:
        msg = env.msg
        if msg.error_code or not msg.topics:
            self._rejected.add(env.src)
            return
        part = msg.topics[0].partitions[0]
        if self._observe_epoch(part.leader_epoch, part.leader_id, now_ms):
            return
        expected = PROSPECTIVE if p.kind == "prevote" else CANDIDATE
        if self.role != expected or p.round != self._round or part.leader_epoch > self.epoch:
            return
        (self._granted if part.vote_granted else self._rejected).add(env.src)
        self._maybe_win(now_ms)

    def _on_BeginQuorumEpochResponse(self, env: Envelope, p: _Pending, now_ms: int) -> None:
        part = env.msg.topics[0].partitions[0] if env.msg.topics else None
        if part is None:
            return
        if self._observe_epoch(part.leader_epoch, part.leader_id, now_ms):
            return
        if self.role == LEADER and part.error_code == 0 and part.leader_epoch == self.epoch:
            self._begin_acked.add(env.src)

    def _on_EndQuorumEpochResponse(self, env: Envelope, p: _Pending, now_ms: int) -> None:
        part = env.msg.topics[0].partitions[0] if env.msg.topics else None
        if part is None:
            return
        if self._observe_epoch(part.leader_epoch, part.leader_id, now_ms):
            return
        if self.role == RESIGNED:
            self._end_quorum_acked.add(env.src)

    def _on_FetchResponse(self, env: Envelope, p: _Pending, now_ms: int) -> None:
        if not env.msg.responses:
            self._next_fetch_ms = now_ms + self.config.retry_backoff_ms
            return
        part = env.msg.responses[0].partitions[0]
        cl = part.current_leader
        if cl is not None and self._observe_epoch(cl.leader_epoch, cl.leader_id, now_ms):
            return
        if part.error_code or self.role != FOLLOWER or env.src != self.leader_id:
            self._next_fetch_ms = now_ms + self.config.retry_backoff_ms
            return
        self._fetch_deadline = now_ms + self.config.fetch_timeout_ms
        self._leader_contact_ms = now_ms
        self._resigned_leader_epoch = -1
        self._next_fetch_ms = now_ms
        div = part.diverging_epoch
        if div is not None and (div.epoch >= 0 or div.end_offset >= 0):
            e, mine = self.log.end_offset_for_epoch(div.epoch)
            # Kafka's truncateToEndOffset: to where both logs last agree on that epoch
            target = min(div.end_offset, mine) if e == div.epoch else mine
            self._truncate(max(target, self.log.start_offset))
            return
        sid = part.snapshot_id
        if sid is not None and sid.end_offset >= 0:
            self._snapshot_fetch = (SnapshotId(sid.end_offset, sid.epoch), bytearray())
            return
        if part.records:
            self._append_follower(part.records)
        # what we hold matches the leader's log up to our end: the leader checked our
        # position before sending, and the rest came from it
        self._advance_hw(min(part.high_watermark, self.log.end_offset))

    def _on_FetchSnapshotResponse(self, env: Envelope, p: _Pending, now_ms: int) -> None:
        part = env.msg.topics[0].partitions[0] if env.msg.topics else None
        if part is None or self._snapshot_fetch is None:
            self._next_fetch_ms = now_ms + self.config.retry_backoff_ms
            return
        cl = part.current_leader
        if cl is not None and self._observe_epoch(cl.leader_epoch, cl.leader_id, now_ms):
            return
        if part.error_code or self.role != FOLLOWER:
            self._snapshot_fetch = None if part.error_code == Errors.SNAPSHOT_NOT_FOUND else self._snapshot_fetch
            self._next_fetch_ms = now_ms + self.config.retry_backoff_ms
            return
        self._fetch_deadline = now_ms + self.config.fetch_timeout_ms
        sid, buf = self._snapshot_fetch
        if part.position != len(buf) or part.unaligned_records is None:
            return
        buf += bytes(part.unaligned_records)
        if len(buf) < part.size:
            return
        self._install_snapshot(sid, bytes(buf))
        self._snapshot_fetch = None

    # ============================================================== log changes

    def _append_batch(self, data: bytes) -> None:
        self.log.append(data)
        self._scan_voters(RecordBatch(data).base_offset)

    def _append_follower(self, records) -> None:
        """Appends the fetched batches that continue the log: one slice of ``records``, no copy
        when all of it is new."""
        first = end = self.log.end_offset
        pos, lo, hi = 0, -1, -1
        try:
            for b in iter_batches(records):
                if lo < 0 and b.base_offset < end:
                    pos += b.size       # already have it
                    continue
                if b.base_offset != end:
                    break
                lo = pos if lo < 0 else lo
                pos = hi = pos + b.size
                end = b.next_offset
        except ValueError:
            pass                        # a partial trailing batch (max bytes cut it)
        if lo >= 0:
            self.log.append(records if lo == 0 and hi == len(records) else records[lo:hi])
            self._scan_voters(first)

    def _truncate(self, offset: int) -> None:
        if offset >= self.log.end_offset:
            return
        if offset < self.high_watermark:
            raise AssertionError(f"node {self.node_id}: truncating committed entries "
                                 f"({offset} < hw {self.high_watermark})")
        self.log.truncate_to(offset)
        while self._voter_history and self._voter_history[-1][0] >= self.log.end_offset:
            self._voter_history.pop()

    def _scan_voters(self, from_offset: int) -> None:
        """Pick up VotersRecords / KRaftVersionRecords appended at or after from_offset."""
        for b in self.log.batches(from_offset):
            if not b.is_control or b.base_offset < from_offset:
                continue
            for rec in b.records():
                ctype = control_type(rec.key)
                if ctype == ControlRecordType.KRAFT_VOTERS:
                    self._voter_history.append((rec.offset, _voter_dict(VotersRecord.decode(rec.value, 0))))
                    self.kraft_version = max(self.kraft_version, 1)
                elif ctype == ControlRecordType.KRAFT_VERSION:
                    self.kraft_version = KRaftVersionRecord.decode(rec.value, 0).k_raft_version

    def _advance_hw(self, hw: int) -> None:
        if hw > self.high_watermark:
            self.high_watermark = hw

    def _install_snapshot(self, sid: SnapshotId, data: bytes) -> None:
        content = snaps.parse_snapshot(data)
        self.snapshots.write(sid, data)
        self.log.reset_to(sid.end_offset, sid.epoch)
        if content.voters is not None:
            self._voter_history = [(-1, _voter_dict(content.voters))]
            self.kraft_version = max(1, content.kraft_version)
        self._advance_hw(sid.end_offset)
        snaps.delete_older(self.snapshots, sid)

    # ============================================================== the state machine's API

    def append(self, records: list[bytes], now_ms: int) -> int:
        """Leader only: append one batch of framed records; returns its last offset. It is
        committed once the high watermark passes it."""
        if self.role != LEADER:
            raise NotLeaderError(f"node {self.node_id} is {self.role}, leader is {self.leader_id}")
        if not records:
            return self.log.end_offset - 1
        base = self.log.end_offset
        self._append_batch(build_batch(base, self.epoch, list(records), now_ms))
        self._last_append_ms = now_ms
        return base + len(records) - 1

    def resign(self, now_ms: int) -> None:
        """Leave leadership at once (shutdown, removal, lost quorum): EndQuorumEpoch to the
        other voters, most up to date first, and wait an election timeout before standing."""
        if self.role != LEADER:
            return
        others = [v for v in self.voters if v != self.node_id]
        others.sort(key=lambda v: (-self._progress.get(v, ReplicaProgress()).end_offset, v))
        self._preferred = others
        self._become(RESIGNED, self.epoch, self.node_id, self.voted_id, now_ms)
        self._send_end_quorum(now_ms)
        self._end_quorum_resend_ms = now_ms + self.config.request_timeout_ms
        if self._voter_change is not None:
            self._answer_voter_change(Errors.NOT_LEADER_OR_FOLLOWER)

    def take_committed(self) -> list:
        """What became committed since the last call: a SnapshotLoaded when the state must be
        replaced (start-up with a snapshot, or one fetched from the leader), then batches."""
        out: list = []
        if self._pending_snapshot_load is not None or self._applied < self.log.start_offset:
            sid = self._pending_snapshot_load or snaps.latest(self.snapshots)
            self._pending_snapshot_load = None
            if sid is not None and sid.end_offset >= self._applied:
                out.append(SnapshotLoaded(sid, snaps.parse_snapshot(self.snapshots.read(sid)).records))
                self._applied = sid.end_offset
            self._applied = max(self._applied, self.log.start_offset)
        hw = self.high_watermark
        if self._applied >= hw:
            return out
        for b in self.log.batches(self._applied):
            if b.base_offset >= hw:
                break
            if b.next_offset <= self._applied:
                continue
            recs = [] if b.is_control else [bytes(r.value) for r in b.records()]
            out.append(CommittedBatch(b.base_offset, b.last_offset, b.partition_leader_epoch,
                                      b.max_timestamp, recs, b.is_control))
            self._applied = b.next_offset
        return out

    def create_snapshot(self, end_offset: int, records: list[bytes], now_ms: int,
                        clean: bool = True) -> SnapshotId:
        """The state machine's state below ``end_offset`` (<= high watermark, at a batch
        boundary) becomes a snapshot; with ``clean`` the log below it is deleted."""
        if end_offset > self.high_watermark or end_offset < self.log.start_offset:
            raise ValueError(f"snapshot at {end_offset} outside [{self.log.start_offset}, hw {self.high_watermark}]")
        epoch = self.log.epoch_for_offset(end_offset - 1) if end_offset > self.log.start_offset \
            else self.log.start_epoch
        sid = SnapshotId(end_offset, epoch)
        voters = None
        if self.kraft_version >= 1:
            committed = [vs for off, vs in self._voter_history if off < end_offset]
            voters = _voters_record(committed[-1] if committed else self._voter_history[0][1])
        data = snaps.build_snapshot(records, now_ms, voters=voters, kraft_version=self.kraft_version)
        self.snapshots.write(sid, data)
        if clean:
            self.log.advance_start(end_offset)
            self.log.start_epoch = epoch
            base = [vs for off, vs in self._voter_history if off < end_offset]
            if base:
                self._voter_history = [(-1, base[-1])] + [(o, v) for o, v in self._voter_history if o >= end_offset]
            snaps.delete_older(self.snapshots, sid)
        return sid
