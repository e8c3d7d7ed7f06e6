"""Log compaction (cleanup.policy=compact / compact,delete), after Kafka's LogCleaner.

One pass over a log:

1. Cleanable range: from the first dirty offset (``cleaner-offset-checkpoint``, else the log
   start) to the first uncleanable offset = min(active segment base, high watermark, the
   first unstable offset the transaction layer may set, the first segment newer than
   min.compaction.lag.ms). Whole segments only.
2. The log is cleaned when dirty bytes / (clean + dirty bytes) >= min.cleanable.dirty.ratio,
   or when the oldest dirty record is older than max.compaction.lag.ms.
3. Offset map: MD5(key) -> latest offset over the dirty segments, bounded by the dedupe
   buffer (when it fills, only the segments that fit are cleaned this pass).
4. Every segment below the end of the map is rewritten, in groups that fit one segment
   (``.cleaned`` -> ``.swap`` -> replaces the group; old files renamed ``.deleted``), keeping:
   the latest record of each key; tombstones until their batch's delete horizon (KIP-534:
   the first pass stamps now + delete.retention.ms into the batch, a later pass past the
   horizon drops them); control batches; the last batch of each producer id (as an empty
   batch if all its records went, like Kafka, so producer state survives). Offsets are
   preserved; batches whose records all survive are copied byte for byte; each batch keeps
   its lastOffsetDelta. Keyless records are dropped, as Kafka does.

Memory: the offset map (bounded), one batch, and an output buffer of ~1 MiB.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import os
from dataclasses import dataclass

from kbroker.slices import run_in_slices, run_to_end
from kbroker.txn.compaction import CleanedTxnTracker
from kbroker.wire.records import BatchBuilder, RecordBatch, iter_batches

from . import segment as _seg
from .config import INT_MAX
from .segment import LogSegment

log = logging.getLogger(__name__)

_OUT_CHUNK = 1 << 20
_ENTRY_COST = 100  # rough bytes per map entry in a Python dict (16-byte digest -> int)


@dataclass
class CleanerStats:
    logs_cleaned: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_removed: int = 0
    tombstones_removed: int = 0
    batches_emptied: int = 0  # batches kept without records (producer state)
    segments_before: int = 0
    segments_after: int = 0

    def add(self, o: "CleanerStats") -> None:
        for k in self.__dataclass_fields__:
            setattr(self, k, getattr(self, k) + getattr(o, k))


@dataclass
class Cleanable:
    log: object
    first_dirty: int
    first_uncleanable: int
    clean_bytes: int
    dirty_bytes: int
    must_clean: bool

    @property
    def ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


def _still_consecutive(segs: list, group: list) -> bool:
    try:
        i = segs.index(group[0])
    except ValueError:
        return False
    return segs[i:i + len(group)] == group


# A step of a pass decodes, filters or re-encodes at most this many records (~0.4 ms): a
# 1 MiB batch of 1 KiB records took 2-4 ms in one step, on top of the slice it ended.
RECORDS_PER_STEP = 200


def _chunks(items):
    """``items`` (records, decoded lazily) in lists of up to RECORDS_PER_STEP: a pass takes
    one step per chunk."""
    it = iter(items)
    while chunk := list(itertools.islice(it, RECORDS_PER_STEP)):
        yield chunk


def _key_hash(key: bytes) -> bytes:
    return hashlib.md5(key).digest()


class LogCleaner:
    def __init__(self, dedupe_buffer_size: int = 128 << 20, max_map_entries: int | None = None) -> None:
        self.max_map_entries = max_map_entries or max(dedupe_buffer_size // _ENTRY_COST, 1000)
        self._horizon: int | None = None

    # ------------------------------------------------------------------ selection
    def cleanable(self, plog, now_ms: int) -> Cleanable | None:
        cfg = plog.config
        if not cfg.compact:
            return None
        segs = plog.segments
        bases = [s.base_offset for s in segs]
        lso = plog.log_start_offset
        first_dirty = plog.first_dirty_offset
        if first_dirty is None or first_dirty < lso or first_dirty > plog.log_end_offset:
            first_dirty = lso
        uncleanable = min(segs[-1].base_offset, plog.high_watermark)
        fuo = getattr(plog, "first_unstable_offset", None)
        if fuo is not None:
            uncleanable = min(uncleanable, fuo)
        txns = getattr(plog, "txns", None)  # kbroker.txn PartitionTxns: never past the LSO
        if txns is not None:
            uncleanable = min(uncleanable, txns.last_stable_offset(plog.high_watermark))
        if cfg.min_compaction_lag_ms > 0:
            for s in segs:
                if now_ms - s.largest_timestamp() < cfg.min_compaction_lag_ms:
                    uncleanable = min(uncleanable, s.base_offset)
                    break
        clean_bytes = dirty_bytes = 0
        must = False
        for i, s in enumerate(segs):
            upper = bases[i + 1] if i + 1 < len(bases) else plog.log_end_offset
            if upper <= lso and i + 1 < len(segs):
                continue
            if upper > uncleanable or s is segs[-1]:
                break
            if upper <= first_dirty:
                clean_bytes += s.size
            else:
                dirty_bytes += s.size
                if not must and cfg.max_compaction_lag_ms < (1 << 62):
                    ts = s.rolling_based_timestamp()
                    if ts is not None and now_ms - ts > cfg.max_compaction_lag_ms:
                        must = True
        return Cleanable(plog, first_dirty, uncleanable, clean_bytes, dirty_bytes, must)

    def clean_logs(self, logs, now_ms: int, max_logs: int | None = None) -> CleanerStats:
        """Clean every compacted log that is due (dirtiest first)."""
        total = CleanerStats()
        for c in self._due(logs, now_ms, max_logs):
            total.add(self.clean(c.log, now_ms, c))
        return total

    async def clean_logs_async(self, logs, now_ms: int, max_logs: int | None = None) -> CleanerStats:
        """``clean_logs`` in slices (``clean_async``); a log deleted meanwhile is skipped.
        The choice of the logs due is sliced too (it looks at every log)."""
        total = CleanerStats()
        for c in await run_in_slices(self._due_steps(logs, now_ms, max_logs)):
            try:
                total.add(await self.clean_async(c.log, now_ms, c))
            except Exception:
                if not getattr(c.log, "closed", False):
                    raise
        return total

    def _due(self, logs, now_ms: int, max_logs: int | None) -> list:
        return run_to_end(self._due_steps(logs, now_ms, max_logs))

    def _due_steps(self, logs, now_ms: int, max_logs: int | None):
        """Generator: the logs due for cleaning, dirtiest first, one log looked at per step."""
        cands = []
        for plog in logs:
            yield
            if getattr(plog, "closed", False):
                continue
            c = self.cleanable(plog, now_ms)
            if c is None:
                continue
            due = getattr(plog, "tombstone_horizon_ms", None)
            tombstones_due = due is not None and due <= now_ms and c.clean_bytes > 0
            if c.dirty_bytes == 0 and not tombstones_due:
                continue
            if c.must_clean or tombstones_due or c.ratio >= plog.config.min_cleanable_dirty_ratio:
                cands.append(c)
        cands.sort(key=lambda c: (not c.must_clean, -c.ratio))
        return cands[: max_logs if max_logs is not None else len(cands)]

    # ------------------------------------------------------------------ cleaning
    def clean(self, plog, now_ms: int, c: Cleanable | None = None) -> CleanerStats:
        """One compaction pass over ``plog`` (whether or not the ratio says it is due)."""
        return run_to_end(self.clean_steps(plog, now_ms, c))

    async def clean_async(self, plog, now_ms: int, c: Cleanable | None = None,
                          slice_s: float | None = None) -> CleanerStats:
        """``clean`` in slices of about ``slice_s`` of work, yielding to the event loop in
        between (compacting a large log in one go held every client for seconds). Appends
        go on meanwhile (the active segment is never cleaned); if retention, a truncation
        or a delete changed the segments under a group, the pass stops there."""
        return await run_in_slices(self.clean_steps(plog, now_ms, c), slice_s)

    def clean_steps(self, plog, now_ms: int, c: Cleanable | None = None):
        """Generator: one pass, yielding after each batch; returns the CleanerStats."""
        stats = CleanerStats(logs_cleaned=1, segments_before=plog.num_segments)
        c = c or self.cleanable(plog, now_ms)
        if c is None:
            return CleanerStats()
        segs = plog.segments
        bases = [s.base_offset for s in segs]

        def upper(i: int) -> int:
            return bases[i + 1] if i + 1 < len(bases) else plog.log_end_offset

        # 1. offset map over whole dirty segments
        offset_map: dict[bytes, int] = {}
        end_offset = None
        txns = getattr(plog, "txns", None)
        map_txns = CleanedTxnTracker()
        for i, s in enumerate(segs[:-1]):
            u = upper(i)
            if u <= c.first_dirty:
                continue
            if u > c.first_uncleanable:
                break
            if txns is not None:
                map_txns.add_aborted(txns.aborted_transactions(s.base_offset, u))
            seg_map: dict[bytes, int] = {}
            for _p, b in s.iter_batches():
                yield
                stats.bytes_read += b.size
                if b.is_control:
                    map_txns.on_control(b)
                    continue
                if map_txns.on_data(b):
                    continue  # aborted: must not shadow committed values of its keys
                for chunk in _chunks(b.records()):
                    for r in chunk:
                        if r.key is not None:
                            seg_map[_key_hash(r.key)] = r.offset
                    yield
            if end_offset is not None:
                new_keys = sum(1 for k in seg_map if k not in offset_map)
                if len(offset_map) + new_keys > self.max_map_entries:
                    break  # does not fit: clean up to the previous segment this time
            offset_map.update(seg_map)
            end_offset = u
        if end_offset is None:
            if c.clean_bytes == 0:
                return CleanerStats()
            end_offset = c.first_dirty  # no dirty data: a pass to drop expired tombstones
        # 2. producers' last batches in the whole log (their state must survive)
        # (the batch holding its last data offset: sequence; else its last marker: epoch)
        last_data: dict[int, int] = {}
        last_marker: dict[int, int] = {}
        for s in segs:
            for _p, b in s.iter_batches():
                yield
                if b.producer_id >= 0:
                    (last_marker if b.is_control else last_data)[b.producer_id] = b.base_offset
        last_batch_of_pid = {**last_marker, **last_data}
        # 3. rewrite groups of segments below end_offset
        group: list[LogSegment] = []
        group_size = 0
        groups: list[list[LogSegment]] = []
        for i, s in enumerate(segs[:-1]):
            u = upper(i)
            if u > end_offset:
                break
            if group and (group_size + s.size > plog.config.segment_bytes
                          or u - 1 - group[0].base_offset > INT_MAX):
                groups.append((group, s.base_offset))
                group, group_size = [], 0
            group.append(s)
            group_size += s.size
            group_upper = u
        if group:
            groups.append((group, group_upper))
        self._horizon: int | None = None
        tracker = CleanedTxnTracker()  # one per pass: a transaction may span groups
        for g, g_upper in groups:
            ok = yield from self._clean_group(plog, g, g_upper, offset_map, c.first_dirty,
                                              last_batch_of_pid, now_ms, stats, tracker)
            if not ok:
                log.info("%s-%d: segments changed during compaction; next pass continues",
                         plog.topic, plog.partition)
                return stats
        plog.first_dirty_offset = end_offset
        # when the earliest kept tombstone may go (a pass then runs even with nothing dirty)
        plog.tombstone_horizon_ms = self._horizon
        stats.segments_after = plog.num_segments
        log.info("%s-%d: compacted up to offset %d: %d -> %d bytes, %d records removed "
                 "(%d tombstones), %d -> %d segments", plog.topic, plog.partition, end_offset,
                 stats.bytes_read, stats.bytes_written, stats.records_removed,
                 stats.tombstones_removed, stats.segments_before, stats.segments_after)
        return stats

    def _clean_group(self, plog, group: list[LogSegment], group_upper: int,
                     offset_map: dict[bytes, int], first_dirty: int,
                     last_batch_of_pid: dict[int, int], now_ms: int,
                     stats: CleanerStats, tracker: CleanedTxnTracker) -> None:
        cfg = plog.config
        base = group[0].base_offset
        txns = getattr(plog, "txns", None)
        retained_before = len(tracker.retained_aborts)
        for fn in (_seg.log_file, _seg.index_file, _seg.time_index_file):
            for suffix in (_seg.CLEANED_SUFFIX, _seg.SWAP_SUFFIX):
                try:
                    os.unlink(fn(plog.dir, base, suffix))
                except FileNotFoundError:
                    pass
        cleaned = LogSegment(plog.dir, base, cfg, now_ms, suffix=_seg.CLEANED_SUFFIX,
                             create=True, active=True)
        cleaned.contiguous = False
        out = bytearray()

        def flush_out() -> None:
            if not out:
                return
            views = list(iter_batches(out))
            cleaned.append(out, views, views[-1].last_offset)
            stats.bytes_written += len(out)
            out.clear()

        last_seg = group[-1]
        try:
            for i, s in enumerate(group):
                if txns is not None:
                    s_upper = group[i + 1].base_offset if i + 1 < len(group) else group_upper
                    tracker.add_aborted(txns.aborted_transactions(s.base_offset, s_upper))
                for pos, b in s.iter_batches():
                    yield
                    is_group_tail = s is last_seg and pos + b.size == s.size
                    kept = yield from self._filter_batch(b, offset_map, first_dirty,
                                                         last_batch_of_pid, now_ms,
                                                         cfg.delete_retention_ms, is_group_tail,
                                                         stats, tracker)
                    if kept is not None:
                        out += kept
                        if len(out) >= _OUT_CHUNK:
                            flush_out()
            flush_out()
            cleaned.on_become_inactive()
            io = getattr(plog, "io", None)
            if io is not None:
                # fsynced in the log's IO thread: an fsync on the loop waits for the disk
                # (seconds when the journal commits a gigabyte of fresh appends with it)
                synced = io.fsync_and_close(cleaned.dup_fds(with_indexes=True))
                yield synced
                synced.result()
            else:
                cleaned.flush()
            cleaned.change_suffix(_seg.SWAP_SUFFIX)
        except BaseException:
            cleaned.delete_files()
            raise
        if plog.closed or not _still_consecutive(plog.segments, group):
            cleaned.delete_files()   # retention/truncation/deletion ran between slices
            return False
        plog._replace_segments(group, cleaned, now_ms)
        if txns is not None:  # the cleaned segment's .txnindex: aborts whose marker stayed
            txns.indexes.replace_range(base, group_upper, base,
                                       tracker.retained_aborts[retained_before:])
        return True

    def _filter_marker(self, b: RecordBatch, last_batch_of_pid, now_ms: int,
                       delete_retention_ms: int, keep_empty: bool,
                       tracker: CleanedTxnTracker):
        """Kafka's rule for COMMIT/ABORT markers: kept while any batch of the transaction
        remains; then stamped with a delete horizon (now + delete.retention.ms) and dropped by
        a pass after it. A producer's last marker (when it has no data batch left) and the
        group's tail batch stay as empty batches."""
        discardable = tracker.on_control(b)
        horizon = b.delete_horizon_ms
        if not discardable:
            if horizon is not None:
                self._note_horizon(horizon)
            return b.buffer()
        if horizon is not None and horizon <= now_ms:
            if last_batch_of_pid.get(b.producer_id) == b.base_offset or keep_empty:
                if b.records_count == 0:
                    return b.buffer()
                return self._rebuild_control(b, None, keep_record=False)
            return None
        if horizon is None:
            horizon = now_ms + delete_retention_ms
            self._note_horizon(horizon)
            return self._rebuild_control(b, horizon, keep_record=True)
        self._note_horizon(horizon)
        return b.buffer()

    @staticmethod
    def _rebuild_control(b: RecordBatch, horizon: int | None, keep_record: bool) -> bytes:
        bb = BatchBuilder(producer_id=b.producer_id, producer_epoch=b.producer_epoch,
                          base_sequence=b.base_sequence, is_transactional=True, is_control=True,
                          base_offset=b.base_offset,
                          partition_leader_epoch=b.partition_leader_epoch,
                          delete_horizon_ms=horizon)
        if keep_record:
            for r in b.records():
                bb.append(key=r.key, value=r.value, headers=r.headers, timestamp=r.timestamp,
                          offset=r.offset)
        return bb.build(last_offset_delta=b.last_offset_delta)

    def _note_horizon(self, h: int) -> None:
        if self._horizon is None or h < self._horizon:
            self._horizon = h

    def _filter_batch(self, b: RecordBatch, offset_map, first_dirty: int, last_batch_of_pid,
                      now_ms: int, delete_retention_ms: int, keep_empty: bool,
                      stats: CleanerStats, tracker: CleanedTxnTracker):
        """Steps; returns the bytes to keep for batch ``b``: the batch itself, a rebuilt one,
        or None."""
        if b.is_control:
            return self._filter_marker(b, last_batch_of_pid, now_ms, delete_retention_ms,
                                       keep_empty, tracker)
        aborted = tracker.on_data(b)
        horizon = b.delete_horizon_ms
        can_drop_tombstones = horizon is not None and horizon <= now_ms
        n_read = 0
        kept = []
        tombstones = False
        for chunk in _chunks(b.records()):
            n_read += len(chunk)
            for r in chunk if not aborted else ():
                if r.key is None:
                    continue
                latest = offset_map.get(_key_hash(r.key))
                if latest is not None and latest > r.offset:
                    continue
                if r.value is None:
                    if can_drop_tombstones:
                        stats.tombstones_removed += 1
                        continue
                    tombstones = True
                kept.append(r)
            yield
        stats.records_read += n_read
        stats.records_removed += n_read - len(kept)
        set_horizon = tombstones and horizon is None
        if len(kept) == n_read and not set_horizon and (n_read or not aborted):
            if tombstones and horizon is not None:
                self._note_horizon(horizon)
            return b.buffer()
        is_last_of_producer = b.producer_id >= 0 and last_batch_of_pid.get(b.producer_id) == b.base_offset
        if not kept and not (is_last_of_producer or keep_empty):
            return None
        if not kept:
            stats.batches_emptied += 1
            if not is_last_of_producer and b.producer_id >= 0:
                # only the group's tail: an empty placeholder without producer or transaction
                # (a transactional one would start a transaction on replay)
                return BatchBuilder(base_offset=b.base_offset,
                                    partition_leader_epoch=b.partition_leader_epoch
                                    ).build(last_offset_delta=b.last_offset_delta)
        new_horizon = (now_ms + delete_retention_ms) if set_horizon else (
            horizon if tombstones else None)
        if new_horizon is not None:
            self._note_horizon(new_horizon)
        lat = b.max_timestamp if b.timestamp_type == 1 else None
        bb = BatchBuilder(
            compression=b.compression,
            producer_id=b.producer_id,
            producer_epoch=b.producer_epoch,
            base_sequence=b.base_sequence,
            is_transactional=b.is_transactional,
            base_offset=b.base_offset,
            partition_leader_epoch=b.partition_leader_epoch,
            log_append_time=lat,
            delete_horizon_ms=new_horizon,
        )
        for chunk in _chunks(kept):
            for r in chunk:
                bb.append(key=r.key, value=r.value, headers=r.headers, timestamp=r.timestamp,
                          offset=r.offset)
            yield
        return (yield from bb.build_steps(b.last_offset_delta, RECORDS_PER_STEP))
