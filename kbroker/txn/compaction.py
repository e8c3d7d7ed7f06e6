"""What the log cleaner must know about transactions (Kafka's CleanedTransactionMetadata).

The cleaner walks batches in offset order and asks, per batch:

* ``on_data(batch)``: True if the batch belongs to an aborted transaction (its records can
  all go, and it must not feed the offset map: an aborted value must never shadow the
  committed one of the same key);
* ``on_control(batch)``: True if the COMMIT/ABORT marker may be discarded, i.e. no batch of
  its transaction was seen in this pass (everything of it is gone). The cleaner still keeps a
  discardable marker until its delete horizon (delete.retention.ms after the pass that first
  found it discardable) has passed, so a read_committed consumer that is behind still sees
  it; an ABORT marker that is kept because its transaction still has batches is recorded in
  ``retained_aborts`` for the cleaned segment's transaction index.

Aborted transactions come from the partition's ``.txnindex`` (``add_aborted``), fed per
segment as the cleaner reaches it.
"""

from __future__ import annotations

import heapq

from kbroker.txn.txn_index import AbortedTxn

ABORT = 0
COMMIT = 1


class CleanedTxnTracker:
    def __init__(self) -> None:
        self._aborted: list[tuple[int, int, AbortedTxn]] = []  # heap by first offset
        self._seen: set[tuple[int, int]] = set()
        self._ongoing_aborted: dict[int, list] = {}  # pid -> [AbortedTxn, saw_batch]
        self._ongoing_committed: set[int] = set()
        self.retained_aborts: list[AbortedTxn] = []

    def add_aborted(self, txns) -> None:
        for t in txns:
            key = (t.producer_id, t.first_offset)
            if key not in self._seen:
                self._seen.add(key)
                heapq.heappush(self._aborted, (t.first_offset, t.producer_id, t))

    def _consume_up_to(self, offset: int) -> None:
        while self._aborted and self._aborted[0][0] <= offset:
            _, pid, t = heapq.heappop(self._aborted)
            self._ongoing_aborted[pid] = [t, False]

    def on_data(self, batch) -> bool:
        self._consume_up_to(batch.last_offset)
        if not batch.is_transactional:
            return False
        st = self._ongoing_aborted.get(batch.producer_id)
        if st is not None:
            st[1] = True
            return True
        self._ongoing_committed.add(batch.producer_id)
        return False

    def on_control(self, batch) -> bool:
        self._consume_up_to(batch.last_offset)
        kind = marker_type(batch)
        pid = batch.producer_id
        if kind is None:  # emptied by an earlier pass: its transaction is gone
            return True
        if kind == ABORT:
            st = self._ongoing_aborted.pop(pid, None)
            if st is not None and st[1]:
                self.retained_aborts.append(st[0])
                return False
            return True
        if kind == COMMIT:
            if pid in self._ongoing_committed:
                self._ongoing_committed.discard(pid)
                return False
            return True
        return False  # other control records are kept


def marker_type(batch) -> int | None:
    """ABORT / COMMIT of a control batch, other types as their number, None when empty."""
    from kbroker.wire.records import control_record_type

    record = next(iter(batch.records()), None)
    if record is None:
        return None
    return int(control_record_type(record.key))
