"""Kafka's small text checkpoint files, written atomically (tmp + fsync + rename + dir fsync).

- ``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``,
  ``cleaner-offset-checkpoint`` (per log dir): ``0`` / count / ``topic partition offset``
- ``leader-epoch-checkpoint`` (per partition): ``0`` / count / ``epoch start_offset``
- ``partition.metadata`` (per partition): ``version: 0`` / ``topic_id: <base64 uuid>``
"""

from __future__ import annotations

import bisect
import os
from typing import Iterable, NamedTuple

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class CheckpointError(Exception):
    pass


def fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:  # pragma: no cover
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def write_atomic(path: str, data: str | bytes, sync: bool = True) -> None:
    """Temp file, fsync, rename, fsync the directory; a crash leaves ``<path>.tmp``, which a
    partition directory's recovery deletes."""
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data.encode("utf-8") if isinstance(data, str) else data)
        f.flush()
        if sync:
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if sync:
        fsync_dir(os.path.dirname(path) or ".")


def versioned_text(lines: Iterable[str]) -> str:
    lines = list(lines)
    return "0\n%d\n%s" % (len(lines), "".join(line + "\n" for line in lines))


def offsets_text(offsets: dict[tuple[str, int], int]) -> str:
    # In the map's order, as Kafka writes it: sorting 10,000 rows is one C call of 2-3 ms that
    # holds the GIL, and these files are formatted on the IO threads while the loop runs.
    return versioned_text(f"{t} {p} {o}" for (t, p), o in offsets.items())


# log dir -> its LogManager's BackgroundIO (registered by start_background_io)
_background_io: dict[str, object] = {}


def write_offsets(directory: str, name: str, offsets: dict[tuple[str, int], int]) -> None:
    """An offsets checkpoint file in a log dir: queued on the dir's IO thread when it has
    one (the event loop never waits for its fsyncs: with thousands of partitions on a busy
    disk the fsyncs held it for 100 ms and more), else written now. Used for checkpoints
    whose lag is harmless, like the high watermarks: an older value is always safe."""
    io = _background_io.get(os.path.abspath(directory))
    if io is not None and not io.closed:
        io.write_file(directory, name, lambda: offsets_text(offsets))   # formatted in the thread
        return
    OffsetCheckpointFile(os.path.join(directory, name)).write(offsets)


def _write_versioned(path: str, lines: Iterable[str], sync: bool = True) -> None:
    write_atomic(path, versioned_text(lines), sync)


def _read_versioned(path: str) -> list[list[str]] | None:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    rows = text.splitlines()
    if len(rows) < 2:
        raise CheckpointError(f"{path}: truncated checkpoint")
    if rows[0].strip() != "0":
        raise CheckpointError(f"{path}: unsupported checkpoint version {rows[0]!r}")
    try:
        n = int(rows[1])
    except ValueError:
        raise CheckpointError(f"{path}: bad entry count {rows[1]!r}") from None
    body = [r.split() for r in rows[2:] if r.strip()]
    if len(body) != n:
        raise CheckpointError(f"{path}: expected {n} entries, found {len(body)}")
    return body


class OffsetCheckpointFile:
    """topic partition offset, one line each (Kafka's OffsetCheckpointFile, version 0)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def write(self, offsets: dict[tuple[str, int], int], sync: bool = True) -> None:
        write_atomic(self.path, offsets_text(offsets), sync)

    def read(self) -> dict[tuple[str, int], int]:
        body = _read_versioned(self.path)
        if body is None:
            return {}
        out: dict[tuple[str, int], int] = {}
        for row in body:
            if len(row) != 3:
                raise CheckpointError(f"{self.path}: malformed line {' '.join(row)!r}")
            try:
                out[(row[0], int(row[1]))] = int(row[2])
            except ValueError:
                raise CheckpointError(f"{self.path}: malformed line {' '.join(row)!r}") from None
        return out


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class LeaderEpochCheckpointFile:
    def __init__(self, path: str) -> None:
        self.path = path

    def write(self, entries: Iterable[EpochEntry], sync: bool = True) -> None:
        _write_versioned(self.path, (f"{e.epoch} {e.start_offset}" for e in entries), sync)

    def read(self) -> list[EpochEntry]:
        body = _read_versioned(self.path)
        if body is None:
            return []
        try:
            return [EpochEntry(int(a), int(b)) for a, b in body]
        except ValueError:
            raise CheckpointError(f"{self.path}: malformed entry") from None


class PartitionMetadataFile:
    """``version: 0`` / ``topic_id: <id>`` (the id as Kafka prints a Uuid: base64url)."""

    def __init__(self, path: str) -> None:
        self.path = path

    @staticmethod
    def text(topic_id: str) -> str:
        return f"version: 0\ntopic_id: {topic_id}\n"

    def write(self, topic_id: str, sync: bool = True) -> None:
        write_atomic(self.path, self.text(topic_id), sync)

    def read(self) -> str | None:
        try:
            with open(self.path, encoding="utf-8") as f:
                rows = f.read().splitlines()
        except FileNotFoundError:
            return None
        fields = {}
        for r in rows:
            if ":" in r:
                k, v = r.split(":", 1)
                fields[k.strip()] = v.strip()
        if fields.get("version") != "0" or "topic_id" not in fields:
            raise CheckpointError(f"{self.path}: malformed partition metadata")
        return fields["topic_id"]


class LeaderEpochCache:
    """Leader epoch -> first offset written in it (Kafka's LeaderEpochFileCache), persisted
    to ``leader-epoch-checkpoint`` on every change. Epochs change rarely."""

    def __init__(self, path: str | None, entries: Iterable[EpochEntry] = ()) -> None:
        self._file = LeaderEpochCheckpointFile(path) if path else None
        self._entries: list[EpochEntry] = list(entries)
        # kbroker.log.background.BackgroundIO: when set, the checkpoint is written (with
        # fsync) by its thread; ``pending`` is the last queued write
        self.io = None
        self.pending = None

    @classmethod
    def load(cls, path: str) -> "LeaderEpochCache":
        try:
            entries = LeaderEpochCheckpointFile(path).read()
        except CheckpointError:
            entries = []  # Kafka rebuilds on demand; the leader re-sends epochs
        return cls(path, entries)

    def _flush(self) -> None:
        if self._file is None:
            return
        if self.io is not None:
            text = versioned_text(f"{e.epoch} {e.start_offset}" for e in self._entries)
            path = self._file.path
            self.pending = self.io.write_file(os.path.dirname(path), os.path.basename(path), text)
        else:
            self._file.write(self._entries)

    def wait_flushed(self) -> None:
        """Block until the last checkpoint write queued on ``io`` is on disk (before a
        recovery point moves past the entries)."""
        fut, self.pending = self.pending, None
        if fut is not None:
            fut.result()

    @property
    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        return self._entries[-1].epoch if self._entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> None:
        if epoch < 0:
            return
        if self._entries:
            last = self._entries[-1]
            if last.epoch == epoch and last.start_offset <= start_offset:
                return
        # drop entries that would break monotonicity (Kafka: maybeTruncateNonMonotonicEntries)
        self._entries = [e for e in self._entries
                         if e.epoch < epoch and e.start_offset < start_offset]
        self._entries.append(EpochEntry(epoch, start_offset))
        self._flush()

    def epoch_for_offset(self, offset: int) -> int:
        """Epoch of the entry whose range covers ``offset`` (-1 if none)."""
        starts = [e.start_offset for e in self._entries]
        i = bisect.bisect_right(starts, offset) - 1
        return self._entries[i].epoch if i >= 0 else UNDEFINED_EPOCH

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetsForLeaderEpoch, as Kafka computes it."""
        if requested_epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self.latest_epoch:
            return requested_epoch, log_end_offset
        higher = next((e for e in self._entries if e.epoch > requested_epoch), None)
        if higher is None:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        floor = None
        for e in self._entries:
            if e.epoch <= requested_epoch:
                floor = e
        if floor is None:
            return requested_epoch, higher.start_offset
        return floor.epoch, higher.start_offset

    def truncate_from_end(self, end_offset: int, flush: bool = True) -> None:
        """Remove entries starting at or after ``end_offset`` (log truncated to it).
        ``flush=False`` leaves the file as it is: for the load-time trim to the log end, which
        every load repeats, so a stale file is harmless and the next change rewrites it."""
        if end_offset >= 0 and self._entries and self._entries[-1].start_offset >= end_offset:
            self._entries = [e for e in self._entries if e.start_offset < end_offset]
            if flush:
                self._flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """Log start moved to ``start_offset``: the epoch covering it now starts there."""
        keep: list[EpochEntry] = []
        covering: EpochEntry | None = None
        for e in self._entries:
            if e.start_offset <= start_offset:
                covering = e
            else:
                keep.append(e)
        if covering is None or covering.start_offset == start_offset and not any(
                e.start_offset < start_offset for e in self._entries):
            return
        self._entries = [EpochEntry(covering.epoch, start_offset)] + keep
        self._flush()

    def clear(self) -> None:
        if self._entries:
            self._entries = []
            self._flush()
