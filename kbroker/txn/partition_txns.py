"""Transaction bookkeeping of one data partition, beside its log and producer state.

* last stable offset: the first offset of the oldest transaction that is undecided (no marker
  yet) or decided but whose marker is not yet below the high watermark (Kafka's
  ``unreplicatedTxns``: a reader must not pass a transaction before its marker is committed);
* the aborted-transaction indexes (``.txnindex``) and the Fetch-side lookup;
* COMMIT/ABORT markers: validated against producer state (producer epoch, coordinator epoch),
  appended as control batches, applied to producer state, and indexed when aborted;
* recovery: replaying the log after the producer snapshot rebuilds producer state and the
  aborted index entries of the replayed range.

The log is any object with PartitionLog's ``append(buf, now_ms, leader_epoch=, origin=)``,
``batches(start_offset=)``, ``segments`` (with ``base_offset``), ``active_segment``,
``log_start_offset``, ``log_end_offset`` and ``high_watermark``.
"""

from __future__ import annotations

import bisect
import logging
from dataclasses import dataclass

from kbroker.txn.errors import TxnErrors as E
from kbroker.txn.producer_state import CompletedTxn, ProducerStateManager
from kbroker.txn.txn_index import AbortedTxn, TxnIndexes

log = logging.getLogger(__name__)

ORIGIN_COORDINATOR = "coordinator"


@dataclass(frozen=True, slots=True)
class MarkerResult:
    error: int
    offset: int = -1


class PartitionTxns:
    def __init__(self, directory: str, producer_state: ProducerStateManager, scan: bool = True):
        self.psm = producer_state
        self.indexes = TxnIndexes(directory, scan)   # scan=False: a new directory, nothing in it
        # decided transactions whose marker is at or above the high watermark, by marker offset
        self._unreplicated: list[CompletedTxn] = []

    # ---- last stable offset -------------------------------------------------------------

    def first_unstable_offset(self) -> int | None:
        first = self.psm.first_undecided_offset()
        if self._unreplicated:
            u = min(t.first_offset for t in self._unreplicated)
            first = u if first is None else min(first, u)
        return first

    def last_stable_offset(self, high_watermark: int) -> int:
        if not self._unreplicated and not self.psm.ongoing_txns:
            return high_watermark   # nothing undecided: asked per partition of every fetch
        self.on_high_watermark(high_watermark)
        first = self.first_unstable_offset()
        return high_watermark if first is None else min(first, high_watermark)

    def on_high_watermark(self, high_watermark: int) -> None:
        if self._unreplicated and self._unreplicated[0].last_offset < high_watermark:
            self._unreplicated = [t for t in self._unreplicated
                                  if t.last_offset >= high_watermark]

    def _stable_offset_after(self, completed: CompletedTxn) -> int:
        """LSO right after ``completed``'s marker (Kafka's lastStableOffset(completedTxn)),
        once the producer state no longer counts it as ongoing."""
        first = self.psm.first_undecided_offset()
        return completed.last_offset + 1 if first is None else first

    # ---- fetch --------------------------------------------------------------------------

    def aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions a read_committed fetch of [fetch_offset, upper_bound) must
        be told about (upper_bound: the offset after the last returned batch)."""
        if upper_bound <= fetch_offset:
            return []
        return self.indexes.collect(fetch_offset, upper_bound)

    # ---- markers ------------------------------------------------------------------------

    def check_marker(self, producer_id: int, producer_epoch: int,
                     coordinator_epoch: int) -> int:
        entry = self.psm.last_entry(producer_id)
        if entry is None:
            return E.NONE
        if producer_epoch < entry.producer_epoch:
            return E.INVALID_PRODUCER_EPOCH
        if coordinator_epoch < entry.coordinator_epoch:
            return E.TRANSACTION_COORDINATOR_FENCED
        return E.NONE

    def append_marker(self, plog, producer_id: int, producer_epoch: int,
                      coordinator_epoch: int, commit: bool, now_ms: int, *,
                      leader_epoch: int | None = None) -> MarkerResult:
        """Write one COMMIT/ABORT marker (WriteTxnMarkers, or the local coordinator)."""
        from kbroker.wire.records import ControlRecordType, control_batch

        err = self.check_marker(producer_id, producer_epoch, coordinator_epoch)
        if err:
            return MarkerResult(err)
        marker = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
        buf = bytearray(control_batch(marker, producer_id, producer_epoch, coordinator_epoch,
                                      timestamp=now_ms))
        info = plog.append(buf, now_ms, leader_epoch=leader_epoch, origin=ORIGIN_COORDINATOR)
        if getattr(info, "rolled", False) and self.psm.log_dir is not None:
            self.psm.take_snapshot(info.first_offset)  # as the produce path does at a roll
        completed = self.psm.apply_end_txn_marker(producer_id, producer_epoch,
                                                  coordinator_epoch, not commit,
                                                  info.first_offset, now_ms)
        self.psm.map_end_offset = max(self.psm.map_end_offset, info.last_offset + 1)
        if completed is not None:
            self._record_completed(completed, plog.active_segment.base_offset)
        return MarkerResult(E.NONE, info.first_offset)

    def _record_completed(self, completed: CompletedTxn, segment_base: int) -> None:
        if completed.is_aborted:
            lso = self._stable_offset_after(completed)
            self.indexes.append(segment_base,
                                AbortedTxn(completed.producer_id, completed.first_offset,
                                           completed.last_offset, lso))
        self._unreplicated.append(completed)

    # ---- recovery -----------------------------------------------------------------------

    def replay(self, plog, start_offset: int) -> int:
        """Apply the log's batches from ``start_offset`` (the producer snapshot's offset) to
        producer state, rebuilding the aborted index entries of that range. Returns the
        number of batches replayed."""
        self.indexes.truncate_to(start_offset)
        self.indexes.retain_segments(s.base_offset for s in plog.segments)
        n = self.apply_batches(plog, plog.batches(start_offset=max(start_offset, plog.log_start_offset)))
        self.on_high_watermark(plog.high_watermark)
        return n

    def apply_batches(self, plog, batches) -> int:
        """Apply batches already in ``plog`` (replayed, or appended as a follower) to producer
        state, indexing the transactions their markers abort. Returns the batch count."""
        bases = [s.base_offset for s in plog.segments]
        n = 0
        pending = []
        for batch in batches:
            n += 1
            if not batch.is_control:
                pending.append(batch)
                continue
            if pending:
                self.psm.load_from_batches(pending)
                pending = []
            for completed in self.psm.load_from_batches([batch]):
                seg = bases[bisect.bisect_right(bases, completed.last_offset) - 1]
                self._record_completed(completed, seg)
        if pending:
            self.psm.load_from_batches(pending)
        return n

    def attach(self, plog) -> None:
        """Registers this object as ``plog.txns``, which the log cleaner consults (first
        unstable offset, aborted transactions, the cleaned segments' indexes): all a new
        log needs (``plog.fresh``), which has nothing to recover."""
        plog.txns = self

    def recover(self, plog, now_ms: int) -> int:
        """Open: reload the latest producer snapshot and replay the rest of the log; attaches
        this object to ``plog`` too."""
        self.attach(plog)
        start = self.psm.truncate_and_reload(plog.log_start_offset, plog.log_end_offset, now_ms)
        if start < plog.log_end_offset:
            return self.replay(plog, start)
        self.indexes.retain_segments(s.base_offset for s in plog.segments)
        return 0

    def truncate_to(self, offset: int) -> None:
        """The log was truncated to ``offset`` (the caller reloads producer state)."""
        self.indexes.truncate_to(offset)
        self._unreplicated = [t for t in self._unreplicated if t.last_offset < offset]

    def flush(self) -> None:
        self.indexes.flush()

    def close(self) -> None:
        self.indexes.close()
