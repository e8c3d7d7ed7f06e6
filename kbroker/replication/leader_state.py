"""A partition leader's view of its followers: their log ends, the ISR, the high watermark.

Pure: every method takes ``now_ms``; nothing reads a clock or does I/O. Kafka's rules:

* A follower's fetch offset is its log end offset (it asks for the next offset it lacks).
  It is *caught up* at a fetch whose offset reaches the leader's log end; a fetch that
  reaches the leader's log end as of the follower's previous fetch proves it was caught up
  then (Kafka's ``lastCaughtUpTimeMs`` rule), so a busy partition does not shrink a follower
  that keeps pace.
* Shrink: an ISR follower not caught up for ``replica.lag.time.max.ms`` leaves the ISR.
  Expand: a follower whose log end reaches the high watermark and the start of the current
  leader epoch joins it. Either is *proposed* to the controller (AlterPartition, with the
  partition epoch the leader knows); only one proposal is in flight at a time, and the ISR
  changes when the controller commits it.
* While an expansion is in flight the high watermark already counts the joining replica
  (the *maximal* ISR), so it never moves past an offset that replica lacks once committed.
* High watermark = the lowest log end of the maximal ISR (the leader's own log end
  included); it never moves back.
"""

from __future__ import annotations

from dataclasses import dataclass, field

REPLICA_LAG_TIME_MAX_MS = 30_000


def diverging_epoch(end_offset_for, log_end_offset: int, fetch_offset: int,
                    last_fetched_epoch: int) -> tuple[int, int] | None:
    """The leader's check of a follower fetch (KIP-320): ``(epoch, end_offset)`` when the
    follower's last fetched epoch ends earlier on the leader than the fetch offset, or the
    leader never had that epoch; None when the follower's log is a prefix of the leader's.
    ``end_offset_for(epoch, log_end_offset) -> (largest epoch <= it, its end offset)``."""
    if last_fetched_epoch < 0:
        return None
    epoch, end = end_offset_for(last_fetched_epoch, log_end_offset)
    if epoch < 0 or end < 0:
        return None
    if end < fetch_offset or epoch < last_fetched_epoch:
        return epoch, end
    return None


@dataclass(slots=True)
class FollowerProgress:
    replica_id: int
    log_end_offset: int = -1        # -1: no fetch seen since this node became leader
    last_caught_up_ms: int = 0
    last_fetch_ms: int = -1
    last_fetch_leader_leo: int = -1  # the leader's log end at the previous fetch
    broker_epoch: int = -1          # from the fetch's ReplicaState (KIP-903)


@dataclass(frozen=True, slots=True)
class IsrProposal:
    """An AlterPartition this leader wants committed."""
    new_isr: tuple[int, ...]
    leader_epoch: int
    partition_epoch: int            # the epoch the proposal is based on
    broker_epochs: tuple[int, ...]  # per new_isr member (-1: unknown)
    expand: bool


@dataclass(slots=True)
class LeaderState:
    local_id: int
    replicas: tuple[int, ...]
    isr: frozenset[int]
    leader_epoch: int
    partition_epoch: int
    leader_epoch_start_offset: int   # the log end when this node became leader
    high_watermark_floor: int = 0    # the HW never goes below what was already published
    followers: dict[int, FollowerProgress] = field(default_factory=dict)
    pending: IsrProposal | None = None

    @classmethod
    def become_leader(cls, local_id: int, replicas, isr, leader_epoch: int,
                      partition_epoch: int, log_end_offset: int, high_watermark: int,
                      now_ms: int) -> "LeaderState":
        """Followers start as caught up now (Kafka resets lastCaughtUpTime on election), so
        none is shrunk before it had ``replica.lag.time.max.ms`` to fetch."""
        st = cls(local_id, tuple(replicas), frozenset(isr), leader_epoch, partition_epoch,
                 log_end_offset, high_watermark)
        for r in replicas:
            if r != local_id:
                st.followers[r] = FollowerProgress(r, last_caught_up_ms=now_ms)
        return st

    # -- follower progress ---------------------------------------------------------------

    def on_follower_fetch(self, replica_id: int, fetch_offset: int, broker_epoch: int,
                          leader_log_end: int, now_ms: int) -> bool:
        """Record a follower's fetch. Returns False for a replica not in the assignment."""
        f = self.followers.get(replica_id)
        if f is None:
            return False
        if fetch_offset >= leader_log_end:
            f.last_caught_up_ms = max(f.last_caught_up_ms, now_ms)
        elif f.last_fetch_leader_leo >= 0 and fetch_offset >= f.last_fetch_leader_leo:
            f.last_caught_up_ms = max(f.last_caught_up_ms, f.last_fetch_ms)
        f.log_end_offset = fetch_offset
        f.last_fetch_ms = now_ms
        f.last_fetch_leader_leo = leader_log_end
        f.broker_epoch = broker_epoch
        return True

    # -- the high watermark --------------------------------------------------------------

    @property
    def maximal_isr(self) -> frozenset[int]:
        if self.pending is not None and self.pending.expand:
            return self.isr | frozenset(self.pending.new_isr)
        return self.isr

    def high_watermark(self, leader_log_end: int) -> int:
        """The lowest log end of the maximal ISR; never below the last value returned."""
        hw = leader_log_end
        for r in self.maximal_isr:
            if r == self.local_id:
                continue
            f = self.followers.get(r)
            leo = f.log_end_offset if f is not None else -1
            if leo < 0:
                hw = self.high_watermark_floor  # unknown progress: no advance
                break
            hw = min(hw, leo)
        if hw > self.high_watermark_floor:
            self.high_watermark_floor = hw
        return self.high_watermark_floor

    # -- ISR changes ---------------------------------------------------------------------

    def propose_isr_change(self, now_ms: int, leader_log_end: int,
                           lag_time_max_ms: int = REPLICA_LAG_TIME_MAX_MS,
                           eligible=None) -> IsrProposal | None:
        """The AlterPartition to send now, if any (one in flight at a time). ``eligible(id)``:
        whether the metadata shows that broker fit to join (registered, not fenced, not
        shutting down): the controller refuses the others (INELIGIBLE_REPLICA), so proposing
        them only repeats the refusal every check, as long as such a broker still fetches."""
        if self.pending is not None:
            return None
        hw = self.high_watermark(leader_log_end)
        out = {r for r in self.isr if r != self.local_id and r in self.followers
               and now_ms - self.followers[r].last_caught_up_ms > lag_time_max_ms}
        if out:
            return self._propose(self.isr - out, expand=False)
        joining = {r for r, f in self.followers.items()
                   if r not in self.isr and f.log_end_offset >= 0
                   and f.log_end_offset >= hw
                   and f.log_end_offset >= self.leader_epoch_start_offset
                   and (eligible is None or eligible(r))}
        if joining:
            return self._propose(self.isr | joining, expand=True)
        return None

    def _propose(self, new_isr, expand: bool) -> IsrProposal:
        members = tuple(sorted(new_isr))
        epochs = tuple(self.followers[r].broker_epoch if r in self.followers else -1
                       for r in members)
        self.pending = IsrProposal(members, self.leader_epoch, self.partition_epoch, epochs, expand)
        return self.pending

    def on_alter_partition_response(self, proposal: IsrProposal, error: int, isr=(),
                                    partition_epoch: int = -1) -> None:
        """The controller's answer to ``proposal`` (possibly an earlier or repeated one):
        success carries the committed state; a refusal only ends the proposal it refused."""
        if error == 0:
            self.on_partition_state(isr, partition_epoch)
        elif proposal is self.pending:
            self.pending = None

    def on_partition_state(self, isr, partition_epoch: int) -> None:
        """The controller committed a new ISR (AlterPartition answer or PartitionChangeRecord)
        with ``partition_epoch``; the same or an older epoch changes nothing."""
        if partition_epoch <= self.partition_epoch:
            return
        self.isr = frozenset(isr)
        self.partition_epoch = partition_epoch
        self.pending = None


@dataclass(frozen=True, slots=True)
class ReplicaFetchAnswer:
    error: int
    diverging: tuple[int, int] | None = None   # (epoch, end offset): truncate, no records
    read_offset: int = -1                      # read records from here (-1: none)
    high_watermark: int = -1


def answer_replica_fetch(state: LeaderState | None, replica, replica_id: int,
                         current_leader_epoch: int, fetch_offset: int,
                         last_fetched_epoch: int, broker_epoch: int,
                         now_ms: int) -> ReplicaFetchAnswer:
    """The leader's side of a follower Fetch for one partition: fencing, divergence, range,
    then the follower's progress is recorded and the high watermark advanced.
    ``replica``: the local partition (``log_end_offset``, ``log_start_offset``,
    ``end_offset_for(epoch)``, ``high_watermark``, ``advance_high_watermark``)."""
    from kbroker.wire.errors import Errors

    if state is None:
        return ReplicaFetchAnswer(Errors.NOT_LEADER_OR_FOLLOWER)
    if current_leader_epoch >= 0 and current_leader_epoch != state.leader_epoch:
        code = (Errors.FENCED_LEADER_EPOCH if current_leader_epoch < state.leader_epoch
                else Errors.UNKNOWN_LEADER_EPOCH)
        return ReplicaFetchAnswer(code)
    if replica_id not in state.followers:
        return ReplicaFetchAnswer(Errors.NOT_LEADER_OR_FOLLOWER)
    leo = replica.log_end_offset
    div = diverging_epoch(lambda e, _end: replica.end_offset_for(e), leo, fetch_offset,
                          last_fetched_epoch)
    if div is not None:
        return ReplicaFetchAnswer(Errors.NONE, diverging=div, high_watermark=replica.high_watermark)
    if fetch_offset > leo or fetch_offset < replica.log_start_offset:
        return ReplicaFetchAnswer(Errors.OFFSET_OUT_OF_RANGE, high_watermark=replica.high_watermark)
    state.on_follower_fetch(replica_id, fetch_offset, broker_epoch, leo, now_ms)
    replica.advance_high_watermark(state.high_watermark(leo))
    return ReplicaFetchAnswer(Errors.NONE, read_offset=fetch_offset,
                              high_watermark=replica.high_watermark)
