"""Producer-state snapshot files, byte-compatible with Apache Kafka.

A partition directory holds ``{offset:020d}.snapshot`` files next to its segments. Each one
is Kafka's ``ProducerSnapshot`` message (storage/src/main/resources/message/ProducerSnapshot.json,
validVersions 1, not flexible), written with a version prefix:

    version             int16   (always 1)
    crc                 uint32  CRC32C of every byte after this field
    producer_entries    int32 count, then per entry (46 bytes):
        producer_id             int64
        epoch                   int16
        last_sequence           int32
        last_offset             int64
        offset_delta            int32
        timestamp               int64
        coordinator_epoch       int32
        current_txn_first_offset int64   (-1: no transaction in progress)

All integers are big-endian. The file name's offset is the log offset the snapshot was taken
at (exclusive): the state reflects every batch below it.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import crc32c as _crc32c

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1

_HEADER = struct.Struct(">hIi")  # version, crc, entry count
_ENTRY = struct.Struct(">qhiqiqiq")
_CRC_START = 6  # version (2) + crc (4)

ENTRY_SIZE = _ENTRY.size  # 46


class CorruptSnapshotError(ValueError):
    """A snapshot file that fails the schema or CRC check (Kafka's CorruptSnapshotException)."""


@dataclass(frozen=True, slots=True)
class SnapshotEntry:
    """One row of a snapshot, exactly the fields Kafka stores."""

    producer_id: int
    epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int  # -1 when none


def encode_snapshot(entries: Iterable[SnapshotEntry]) -> bytes:
    rows = list(entries)
    buf = bytearray(_HEADER.size + ENTRY_SIZE * len(rows))
    _HEADER.pack_into(buf, 0, SNAPSHOT_VERSION, 0, len(rows))
    pos = _HEADER.size
    for e in rows:
        _ENTRY.pack_into(
            buf, pos, e.producer_id, e.epoch, e.last_sequence, e.last_offset, e.offset_delta,
            e.timestamp, e.coordinator_epoch, e.current_txn_first_offset,
        )
        pos += ENTRY_SIZE
    crc = _crc32c.crc32c(bytes(memoryview(buf)[_CRC_START:]))
    struct.pack_into(">I", buf, 2, crc)
    return bytes(buf)


def decode_snapshot(data: bytes | bytearray | memoryview) -> list[SnapshotEntry]:
    """Parse and verify a snapshot; raises CorruptSnapshotError on any defect."""
    data = memoryview(data)
    if len(data) < _HEADER.size:
        raise CorruptSnapshotError(f"snapshot too short: {len(data)} bytes")
    version, crc, count = _HEADER.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"snapshot contained an unknown file version {version}")
    if count < 0:
        raise CorruptSnapshotError(f"snapshot has a negative entry count {count}")
    expected = _HEADER.size + count * ENTRY_SIZE
    if len(data) < expected:
        raise CorruptSnapshotError(
            f"snapshot truncated: {count} entries need {expected} bytes, file has {len(data)}")
    computed = _crc32c.crc32c(bytes(data[_CRC_START:]))
    if computed != crc:
        raise CorruptSnapshotError(
            f"snapshot is corrupt (CRC is no longer valid). Stored crc: {crc}. Computed crc: {computed}")
    if len(data) != expected:
        # Kafka ignores trailing bytes that the CRC covers; they cannot come from a Kafka
        # writer, so treat them as corruption too.
        raise CorruptSnapshotError(f"snapshot has {len(data) - expected} trailing bytes")
    return [SnapshotEntry(*_ENTRY.unpack_from(data, _HEADER.size + i * ENTRY_SIZE))
            for i in range(count)]


def snapshot_path(log_dir: str | os.PathLike, offset: int) -> Path:
    return Path(log_dir) / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def snapshot_offset(path: str | os.PathLike) -> int | None:
    """The offset in a snapshot file's name, or None if the name is not a snapshot's."""
    name = Path(path).name
    if not name.endswith(SNAPSHOT_SUFFIX):
        return None
    stem = name[: -len(SNAPSHOT_SUFFIX)]
    if not stem.isdigit():
        return None
    return int(stem)


def list_snapshots(log_dir: str | os.PathLike) -> dict[int, Path]:
    """offset -> path of every snapshot file in log_dir, ascending by offset."""
    try:
        names = os.listdir(log_dir)
    except FileNotFoundError:
        return {}
    found = {}
    for name in names:
        off = snapshot_offset(name)
        if off is not None:
            p = Path(log_dir) / name
            if p.is_file():
                found[off] = p
    return dict(sorted(found.items()))


def write_snapshot_file(path: str | os.PathLike, entries: Iterable[SnapshotEntry], *,
                        sync: bool = True) -> None:
    """Write atomically: temp file, fsync, rename, fsync the directory."""
    path = Path(path)
    data = encode_snapshot(entries)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if sync:
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def read_snapshot_file(path: str | os.PathLike) -> list[SnapshotEntry]:
    with open(path, "rb") as f:
        return decode_snapshot(f.read())
