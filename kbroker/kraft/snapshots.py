"""Snapshots of the metadata state (KIP-630), in Kafka's format.

A snapshot ``(end_offset, epoch)`` holds the state of every record below ``end_offset``; the
record at ``end_offset - 1`` was written in ``epoch``. On disk it is
``<end_offset:020d>-<epoch:010d>.checkpoint`` in the metadata partition directory: record
batches, the first a control batch with a SnapshotHeaderRecord (followed, with dynamic voters,
by KRaftVersionRecord and VotersRecord), then data batches (framed records, as in the log),
then a control batch with a SnapshotFooterRecord.

``SnapshotStore`` keeps whole snapshots as bytes (metadata snapshots are small next to memory):
``MemorySnapshotStore`` for tests, ``DirSnapshotStore`` for the files (``write_atomic``: a
temp file, fsynced, renamed; the partition directory's recovery deletes a crash's leftover). ``SnapshotPolicy`` says when the state machine above Raft
should take one (``metadata.log.max.record.bytes.between.snapshots``,
``metadata.log.max.snapshot.interval.ms``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from kbroker.log.checkpoint import write_atomic
from kbroker.kraft.raft_log import build_batch, build_control_batch, control_type
from kbroker.wire.generated.k_raft_version_record import KRaftVersionRecord
from kbroker.wire.generated.snapshot_footer_record import SnapshotFooterRecord
from kbroker.wire.generated.snapshot_header_record import SnapshotHeaderRecord
from kbroker.wire.generated.voters_record import VotersRecord
from kbroker.wire.records import ControlRecordType, iter_batches

SUFFIX = ".checkpoint"
_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")
RECORDS_PER_BATCH = 1000


class SnapshotId(NamedTuple):
    end_offset: int
    epoch: int

    def file_name(self) -> str:
        return f"{self.end_offset:020d}-{self.epoch:010d}{SUFFIX}"


BOOTSTRAP_ID = SnapshotId(0, 0)


def parse_file_name(name: str) -> SnapshotId | None:
    m = _NAME.match(name)
    return SnapshotId(int(m.group(1)), int(m.group(2))) if m else None


@dataclass
class SnapshotContent:
    records: list[bytes]                  # framed metadata records, in order
    voters: VotersRecord | None           # KIP-853 voter set, when kraft.version >= 1
    kraft_version: int
    last_contained_log_time: int


def build_snapshot(records: list[bytes], now_ms: int, *, voters: VotersRecord | None = None,
                   kraft_version: int = 0, last_contained_log_time: int = -1) -> bytes:
    """Header control batch (+ KRaftVersion/Voters), data batches, footer control batch.
    Offsets inside a snapshot start at 0, as Kafka's RecordsSnapshotWriter numbers them."""
    out = bytearray()
    head = [(ControlRecordType.SNAPSHOT_HEADER,
             SnapshotHeaderRecord(version=0, last_contained_log_timestamp=last_contained_log_time).encode(0))]
    if voters is not None:
        head.append((ControlRecordType.KRAFT_VERSION,
                     KRaftVersionRecord(version=0, k_raft_version=kraft_version).encode(0)))
        head.append((ControlRecordType.KRAFT_VOTERS, voters.encode(0)))
    offset = 0
    out += build_control_batch(offset, 0, head, now_ms)
    offset += len(head)
    for i in range(0, len(records), RECORDS_PER_BATCH):
        chunk = records[i:i + RECORDS_PER_BATCH]
        out += build_batch(offset, 0, chunk, now_ms)
        offset += len(chunk)
    out += build_control_batch(offset, 0, [(ControlRecordType.SNAPSHOT_FOOTER,
                                            SnapshotFooterRecord(version=0).encode(0))], now_ms)
    return bytes(out)


def parse_snapshot(data: bytes) -> SnapshotContent:
    """A snapshot's records and voter set; raises ValueError when header or footer is missing."""
    records: list[bytes] = []
    voters = None
    kraft_version = 0
    header = footer = None
    for b in iter_batches(data):
        for rec in b.records():
            if b.is_control:
                ctype = control_type(rec.key)
                if ctype == ControlRecordType.SNAPSHOT_HEADER:
                    header = SnapshotHeaderRecord.decode(rec.value, 0)
                elif ctype == ControlRecordType.SNAPSHOT_FOOTER:
                    footer = True
                elif ctype == ControlRecordType.KRAFT_VOTERS:
                    voters = VotersRecord.decode(rec.value, 0)
                elif ctype == ControlRecordType.KRAFT_VERSION:
                    kraft_version = KRaftVersionRecord.decode(rec.value, 0).k_raft_version
            else:
                records.append(bytes(rec.value))
    if header is None or footer is None:
        raise ValueError("snapshot without header or footer")
    return SnapshotContent(records, voters, kraft_version, header.last_contained_log_timestamp)


class SnapshotStore(Protocol):
    def ids(self) -> list[SnapshotId]: ...
    def read(self, sid: SnapshotId) -> bytes: ...
    def write(self, sid: SnapshotId, data: bytes) -> None: ...
    def delete(self, sid: SnapshotId) -> None: ...


def latest(store: SnapshotStore) -> SnapshotId | None:
    ids = store.ids()
    return max(ids) if ids else None


def delete_older(store: SnapshotStore, keep: SnapshotId) -> None:
    """Snapshots older than ``keep`` are no longer needed once the log starts at it."""
    for sid in store.ids():
        if sid < keep:
            store.delete(sid)


class MemorySnapshotStore:
    def __init__(self) -> None:
        self.snapshots: dict[SnapshotId, bytes] = {}

    def ids(self) -> list[SnapshotId]:
        return sorted(self.snapshots)

    def read(self, sid: SnapshotId) -> bytes:
        return self.snapshots[sid]

    def write(self, sid: SnapshotId, data: bytes) -> None:
        self.snapshots[SnapshotId(*sid)] = bytes(data)

    def delete(self, sid: SnapshotId) -> None:
        self.snapshots.pop(sid, None)


class DirSnapshotStore:
    """``<offset>-<epoch>.checkpoint`` files in the metadata partition directory."""

    def __init__(self, directory: str) -> None:
        self.dir = directory
        os.makedirs(directory, exist_ok=True)

    def ids(self) -> list[SnapshotId]:
        out = []
        for name in os.listdir(self.dir):
            sid = parse_file_name(name)
            if sid is not None:
                out.append(sid)
        return sorted(out)

    def path(self, sid: SnapshotId) -> str:
        return os.path.join(self.dir, SnapshotId(*sid).file_name())

    def read(self, sid: SnapshotId) -> bytes:
        with open(self.path(sid), "rb") as f:
            return f.read()

    def write(self, sid: SnapshotId, data: bytes) -> None:
        write_atomic(self.path(sid), data)

    def delete(self, sid: SnapshotId) -> None:
        try:
            os.unlink(self.path(sid))
        except FileNotFoundError:
            pass


def write_bootstrap_checkpoint(store: SnapshotStore, voters: VotersRecord, now_ms: int = 0) -> SnapshotId:
    """``format --standalone`` / ``--initial-controllers``: the voter set a new quorum starts
    with, as Kafka's 00000000000000000000-0000000000.checkpoint (kraft.version 1)."""
    store.write(BOOTSTRAP_ID, build_snapshot([], now_ms, voters=voters, kraft_version=1))
    return BOOTSTRAP_ID


@dataclass
class SnapshotPolicy:
    """When to snapshot: after ``max_bytes`` of committed records since the last one, or
    ``interval_ms`` after it if anything was committed since (0 disables the timer)."""
    max_bytes: int = 20 * 1024 * 1024
    interval_ms: int = 3600 * 1000

    def due(self, bytes_since: int, last_snapshot_ms: int, now_ms: int) -> bool:
        if bytes_since <= 0:
            return False
        if bytes_since >= self.max_bytes:
            return True
        return self.interval_ms > 0 and now_ms - last_snapshot_ms >= self.interval_ms
