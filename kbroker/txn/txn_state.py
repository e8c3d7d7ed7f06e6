"""Transaction metadata of one transactional id and its legal transitions.

Mirrors Kafka's TransactionMetadata: a change is *prepared* (the metadata remembers the
pending state, so concurrent requests see CONCURRENT_TRANSACTIONS), the runtime persists the
prepared ``TxnTransit`` to __transaction_state, and only then is it *completed* into the
metadata. A failed append just clears the pending state.

Only transaction protocol version 1 (KIP-98 semantics, no epoch bump per transaction) is
implemented, so the client transaction version is always 0 and ``next_producer_id`` stays -1.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
INT16_MAX = 32767

TopicPartition = tuple[str, int]


class TxnState(IntEnum):
    """Ids as persisted in TransactionLogValue.TransactionStatus."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def display_name(self) -> str:
        """The name Kafka's admin APIs use (DescribeTransactions, ListTransactions filters)."""
        return _NAMES[self]

    @classmethod
    def from_name(cls, name: str) -> "TxnState | None":
        return _BY_NAME.get(name)

    @property
    def expiration_allowed(self) -> bool:
        return self in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


_NAMES = {
    TxnState.EMPTY: "Empty", TxnState.ONGOING: "Ongoing",
    TxnState.PREPARE_COMMIT: "PrepareCommit", TxnState.PREPARE_ABORT: "PrepareAbort",
    TxnState.COMPLETE_COMMIT: "CompleteCommit", TxnState.COMPLETE_ABORT: "CompleteAbort",
    TxnState.DEAD: "Dead", TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_NAME = {v: k for k, v in _NAMES.items()}

_S = TxnState
VALID_PREVIOUS_STATES: dict[TxnState, frozenset[TxnState]] = {
    _S.EMPTY: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.ONGOING: frozenset({_S.ONGOING, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_COMMIT: frozenset({_S.ONGOING}),
    _S.PREPARE_ABORT: frozenset({_S.ONGOING, _S.PREPARE_EPOCH_FENCE}),
    _S.COMPLETE_COMMIT: frozenset({_S.PREPARE_COMMIT}),
    _S.COMPLETE_ABORT: frozenset({_S.PREPARE_ABORT}),
    _S.DEAD: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_EPOCH_FENCE: frozenset({_S.ONGOING}),
}


def is_epoch_exhausted(epoch: int) -> bool:
    # One epoch is kept in reserve so a fence can still bump it once.
    return epoch >= INT16_MAX - 1


class IllegalTransitionError(RuntimeError):
    """A transition the state machine must never attempt (a bug, not a client error)."""


@dataclass(frozen=True, slots=True)
class TxnTransit:
    """The target of a prepared transition: exactly what gets written to the log."""

    producer_id: int
    prev_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition]
    txn_start_ms: int
    txn_last_update_ms: int
    next_producer_id: int = NO_PRODUCER_ID


@dataclass(slots=True, eq=False)
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    txn_timeout_ms: int = 60_000
    state: TxnState = TxnState.EMPTY
    partitions: set[TopicPartition] = field(default_factory=set)
    txn_start_ms: int = -1
    txn_last_update_ms: int = -1
    prev_producer_id: int = NO_PRODUCER_ID
    pending_state: TxnState | None = None
    # A fence bumped the epoch in memory but its PrepareAbort never reached the log: the next
    # fence reuses that epoch rather than burning another (it was never given to a client).
    has_failed_epoch_fence: bool = False

    @classmethod
    def from_transit(cls, transactional_id: str, t: TxnTransit) -> "TxnMetadata":
        """Metadata as loaded from the log (Kafka does not persist the last epoch)."""
        return cls(transactional_id, t.producer_id, t.producer_epoch, NO_PRODUCER_EPOCH,
                   t.txn_timeout_ms, t.state,
                   set(t.partitions) if t.state != TxnState.EMPTY else set(),
                   t.txn_start_ms, t.txn_last_update_ms, t.prev_producer_id)

    @property
    def pending_transition_in_progress(self) -> bool:
        return self.pending_state is not None

    @property
    def epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    @property
    def has_pending_transaction(self) -> bool:
        return self.state in (TxnState.ONGOING, TxnState.PREPARE_ABORT, TxnState.PREPARE_COMMIT)

    # ---- prepare ------------------------------------------------------------------------

    def _prepare(self, state: TxnState, producer_id: int, epoch: int, last_epoch: int,
                 timeout_ms: int, partitions, start_ms: int, now_ms: int) -> TxnTransit:
        if self.pending_state is not None:
            raise IllegalTransitionError(
                f"{self.transactional_id}: preparing {state.display_name} while "
                f"{self.pending_state.display_name} is pending")
        if producer_id < 0:
            raise IllegalTransitionError(f"illegal producer id {producer_id}")
        if state != TxnState.DEAD and epoch < 0:
            raise IllegalTransitionError(f"illegal producer epoch {epoch}")
        if self.state not in VALID_PREVIOUS_STATES[state]:
            raise IllegalTransitionError(
                f"{self.transactional_id}: {self.state.display_name} -> {state.display_name}")
        self.pending_state = state
        return TxnTransit(producer_id, self.producer_id, epoch, last_epoch, timeout_ms, state,
                          frozenset(partitions), start_ms, now_ms)

    def prepare_fence_epoch(self, now_ms: int) -> TxnTransit:
        """PrepareEpochFence: bump the epoch of an Ongoing transaction about to be aborted."""
        if self.producer_epoch >= INT16_MAX:
            raise IllegalTransitionError("cannot fence a producer at epoch Short.MaxValue")
        epoch = self.producer_epoch if self.has_failed_epoch_fence else self.producer_epoch + 1
        return self._prepare(TxnState.PREPARE_EPOCH_FENCE, self.producer_id, epoch,
                             NO_PRODUCER_EPOCH, self.txn_timeout_ms, self.partitions,
                             self.txn_start_ms, self.txn_last_update_ms)

    def prepare_increment_epoch(self, timeout_ms: int, expected_epoch: int | None,
                                now_ms: int) -> TxnTransit | None:
        """InitProducerId on an idle id. None means the caller's expected epoch is stale
        (PRODUCER_FENCED)."""
        if self.epoch_exhausted:
            raise IllegalTransitionError(f"no epochs left for producer id {self.producer_id}")
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            epoch, last = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            epoch, last = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            # A retry of a bump that already succeeded: hand out the current epoch again.
            epoch, last = self.producer_epoch, self.last_producer_epoch
        else:
            return None
        return self._prepare(TxnState.EMPTY, self.producer_id, epoch, last, timeout_ms, (),
                             -1, now_ms)

    def prepare_producer_id_rotation(self, new_producer_id: int, timeout_ms: int, now_ms: int,
                                     record_last_epoch: bool) -> TxnTransit:
        if self.has_pending_transaction:
            raise IllegalTransitionError("cannot rotate the producer id during a transaction")
        last = self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH
        return self._prepare(TxnState.EMPTY, new_producer_id, 0, last, timeout_ms, (), -1,
                             now_ms)

    def prepare_add_partitions(self, added, now_ms: int) -> TxnTransit:
        starts_txn = self.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT,
                                    TxnState.COMPLETE_ABORT)
        return self._prepare(TxnState.ONGOING, self.producer_id, self.producer_epoch,
                             self.last_producer_epoch, self.txn_timeout_ms,
                             self.partitions | set(added),
                             now_ms if starts_txn else self.txn_start_ms, now_ms)

    def prepare_abort_or_commit(self, state: TxnState, now_ms: int) -> TxnTransit:
        return self._prepare(state, self.producer_id, self.producer_epoch,
                             self.last_producer_epoch, self.txn_timeout_ms, self.partitions,
                             self.txn_start_ms, now_ms)

    def prepare_complete(self, now_ms: int) -> TxnTransit:
        state = (TxnState.COMPLETE_COMMIT if self.state == TxnState.PREPARE_COMMIT
                 else TxnState.COMPLETE_ABORT)
        # The prepare record made it to the log, so any earlier failed fence is moot.
        self.has_failed_epoch_fence = False
        return self._prepare(state, self.producer_id, self.producer_epoch, self.producer_epoch,
                             self.txn_timeout_ms, (), self.txn_start_ms, now_ms)

    def prepare_dead(self) -> TxnTransit:
        return self._prepare(TxnState.DEAD, self.producer_id, self.producer_epoch,
                             self.last_producer_epoch, self.txn_timeout_ms, (),
                             self.txn_start_ms, self.txn_last_update_ms)

    # ---- complete -----------------------------------------------------------------------

    def complete_transition(self, t: TxnTransit) -> None:
        """Apply a prepared transit after its record was appended."""
        to = self.pending_state
        if to is None or to != t.state:
            raise IllegalTransitionError(
                f"{self.transactional_id}: completing {t.state.display_name} but pending is "
                f"{to.display_name if to is not None else None}")
        same_producer = t.producer_epoch == self.producer_epoch and t.producer_id == self.producer_id
        if to == TxnState.EMPTY:
            bump_ok = (t.producer_epoch == self.producer_epoch + 1
                       or (t.producer_epoch == 0 and t.producer_id != self.producer_id))
            if ((t.producer_epoch != self.producer_epoch and not bump_ok)
                    or t.partitions or t.txn_start_ms != -1):
                self._fail(t)
            self.txn_timeout_ms = t.txn_timeout_ms
            self.producer_epoch = t.producer_epoch
            self.last_producer_epoch = t.last_producer_epoch
            self.producer_id = t.producer_id
            self.prev_producer_id = t.prev_producer_id
            self.partitions = set()
        elif to == TxnState.ONGOING:
            if (not same_producer or not self.partitions <= t.partitions
                    or self.txn_timeout_ms != t.txn_timeout_ms):
                self._fail(t)
            self.txn_start_ms = t.txn_start_ms
            self.partitions |= t.partitions
        elif to in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            if (not same_producer or self.partitions != t.partitions
                    or self.txn_timeout_ms != t.txn_timeout_ms
                    or self.txn_start_ms != t.txn_start_ms):
                self._fail(t)
        elif to in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            if (not same_producer or self.txn_timeout_ms != t.txn_timeout_ms
                    or t.txn_start_ms == -1):
                self._fail(t)
            self.txn_start_ms = t.txn_start_ms
            self.partitions = set()
        else:  # PrepareEpochFence is never persisted; Dead is removed, never applied
            self._fail(t)
        self.txn_last_update_ms = t.txn_last_update_ms
        self.pending_state = None
        self.state = to

    def _fail(self, t: TxnTransit) -> None:
        raise IllegalTransitionError(f"{self!r}: unexpected transition to {t!r}")
