"""LogManager: every partition log in a set of log dirs (Kafka's LogManager).

- Start-up: lock each dir (``.lock``), note whether ``.kafka_cleanshutdown`` is present
  (then recovery is skipped), read ``recovery-point-offset-checkpoint`` and
  ``log-start-offset-checkpoint``, open each ``topic-N`` directory, finish interrupted
  deletions (``topic-N.<uuid>-delete``), delete the marker.
- Creates partitions in the dir holding the fewest; deletes them by renaming the dir to
  ``topic-N.<uuid>-delete`` and removing it after file.delete.delay.ms.
- ``run_retention(now_ms)``, ``run_cleaner(now_ms)``, ``run_flush(now_ms)``, ``checkpoint()``
  are called by the broker's scheduler; nothing here reads a clock or starts a task.
- ``shutdown()``: flush, checkpoint, close, write ``.kafka_cleanshutdown``.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import fcntl
import heapq
import logging
import os
import shutil
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable, Iterator, Mapping

from . import checkpoint as _checkpoint
from .checkpoint import (
    CLEAN_SHUTDOWN_FILE,
    CLEANER_OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    CheckpointError,
    OffsetCheckpointFile,
    fsync_dir,
    offsets_text,
    write_atomic,
)
from .cleaner import LogCleaner   # (imported here, not at the first pass: ~6 ms on the loop)
from .config import LONG_MAX, LogConfig
from kbroker import gc_policy
from kbroker.slices import each, run_in_slices, run_to_end
from .errors import KafkaStorageError
from .flush_stats import FlushStats
from .partition_log import PartitionLog, RecoveryReport, parse_topic_partition

log = logging.getLogger(__name__)

DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"
STRAY_DIR_SUFFIX = "-stray"
LOCK_FILE = ".lock"


@dataclass
class RetentionStats:
    segments_deleted: int = 0
    files_removed: int = 0
    dirs_removed: int = 0


@dataclass
class LoadReport:
    logs: int = 0
    clean_dirs: list[str] = field(default_factory=list)
    recovered: dict[tuple[str, int], RecoveryReport] = field(default_factory=dict)

    @property
    def damaged(self) -> dict[tuple[str, int], RecoveryReport]:
        return {k: r for k, r in self.recovered.items() if r.damaged}


class LogManager:
    def __init__(self, log_dirs: str | list[str], default_config: LogConfig | None = None, *,
                 now_ms: int = 0,
                 config_for: Callable[[str], LogConfig | None] | None = None,
                 cleaner_dedupe_buffer_size: int = 128 << 20) -> None:
        """Open every partition in ``log_dirs``. ``config_for(topic)`` may give a topic's
        effective LogConfig at start-up (otherwise ``default_config``; the broker can push
        topic configs later with ``set_topic_config`` / ``get_or_create(config=...)``)."""
        if isinstance(log_dirs, str):
            log_dirs = [d for d in log_dirs.split(",") if d]
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        if not self.log_dirs:
            raise ValueError("no log dirs")
        self.default_config = default_config or LogConfig()
        self._config_for = config_for
        self._topic_configs: dict[str, LogConfig] = {}
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self._dir_of: dict[tuple[str, int], str] = {}
        self._locks: dict[str, int] = {}
        self._pending_dir_deletes: list[tuple[str, int]] = []  # (path, delete at ms)
        self.cleaner_dedupe_buffer_size = cleaner_dedupe_buffer_size
        self._cleaner = None
        self.closed = False
        self.io = None  # BackgroundIO once start_background_io() ran
        # Creating and deleting partition directories (mkdir, opening segment files, renames,
        # rmtree) costs milliseconds per partition: a 1,000-partition topic held the event
        # loop for seconds. With start_background_io() they run in this one thread (FIFO, so
        # a delete's rename always runs after the create it undoes, and a re-create after it).
        self._admin: concurrent.futures.ThreadPoolExecutor | None = None
        self._opening: dict[tuple[str, int], asyncio.Future] = {}
        # wait_opening without a callback per partition (gathering 10,000 futures ran 16,000
        # callbacks in one iteration): each creation has a number, in start order; a waiter
        # waits until every number up to the last one started when it came has finished
        self._open_seq = 0
        self._open_seq_of: dict[int, int] = {}      # id(future) -> its number
        self._open_running: list[int] = []          # heap of the numbers still running
        self._open_finished: set[int] = set()       # finished numbers not yet off the heap
        self._open_waiters: list[tuple[int, asyncio.Future]] = []
        # kbroker.gc_policy: no full garbage collection while partitions are being created
        # (the broker process sets it; test processes keep the collector as it is)
        self.hold_gc_while_creating = False
        self._gc_held = False
        self._opening_paths: dict[tuple[str, int], str] = {}
        self._doomed: set[int] = set()   # id() of opening futures whose partition was deleted
        self._create_batch: list = []
        self._to_register: collections.deque = collections.deque()   # groups the thread created
        self.flush_stats = FlushStats()   # every log's fsyncs (metrics: LogFlushStats)
        self.load_report = self._startup(now_ms)

    def start_background_io(self) -> None:
        """From now on fsyncs of rolled segments, new directories and checkpoint files run
        in one worker thread (kbroker.log.background), not on the caller's (event loop)
        thread. ``shutdown`` drains it and finishes synchronously."""
        from .background import BackgroundIO

        if self.io is None and not self.closed:
            self.io = BackgroundIO()
            self._admin = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="log-admin")
            for plog in self._logs.values():
                plog.set_io(self.io)
            for d in self.log_dirs:
                _checkpoint._background_io[d] = self.io

    def _stop_background_io(self, wait: bool = True) -> None:
        admin, self._admin = self._admin, None
        if admin is not None:
            admin.shutdown(wait=wait, cancel_futures=not wait)
        io, self.io = self.io, None
        if io is None:
            return
        for d in self.log_dirs:
            if _checkpoint._background_io.get(d) is io:
                del _checkpoint._background_io[d]
        if wait:
            io.close()
        else:
            io._ex.shutdown(wait=False, cancel_futures=True)
            io.closed = True
        for plog in self._logs.values():
            if wait:
                plog.set_io(None)
            else:
                plog.io = plog.leader_epoch_cache.io = None

    # ------------------------------------------------------------------ start-up
    def _startup(self, now_ms: int) -> LoadReport:
        report = LoadReport()
        for d in self.log_dirs:
            os.makedirs(d, exist_ok=True)
            self._lock(d)
        for d in self.log_dirs:
            marker = os.path.join(d, CLEAN_SHUTDOWN_FILE)
            clean = os.path.exists(marker)
            if clean:
                report.clean_dirs.append(d)
            rp = _read_checkpoint(os.path.join(d, RECOVERY_POINT_CHECKPOINT))
            lso = _read_checkpoint(os.path.join(d, LOG_START_OFFSET_CHECKPOINT))
            cleaner = _read_checkpoint(os.path.join(d, CLEANER_OFFSET_CHECKPOINT))
            for name in sorted(os.listdir(d)):
                path = os.path.join(d, name)
                if not os.path.isdir(path):
                    continue
                if name.endswith(DELETE_DIR_SUFFIX):
                    self._pending_dir_deletes.append((path, now_ms))
                    continue
                if name.endswith(FUTURE_DIR_SUFFIX) or name.endswith(STRAY_DIR_SUFFIX):
                    continue
                try:
                    topic, part = parse_topic_partition(name)
                except ValueError:
                    continue  # metadata dirs of other components, lost+found ...
                key = (topic, part)
                if key in self._logs:
                    raise KafkaStorageError(
                        f"duplicate log directories for {topic}-{part}: "
                        f"{self._dir_of[key]} and {d}")
                cfg = self._effective_config(topic)
                plog = PartitionLog.open(
                    path, cfg, now_ms,
                    recovery_point=rp.get(key, 0),
                    log_start_offset=lso.get(key),
                    had_clean_shutdown=clean,
                    topic=topic, partition=part, flush_stats=self.flush_stats)
                if key in cleaner:
                    plog.first_dirty_offset = max(cleaner[key], plog.log_start_offset)
                self._logs[key] = plog
                self._dir_of[key] = d
                report.logs += 1
                if not clean:
                    report.recovered[key] = plog.recovery
            if clean:
                os.unlink(marker)
                fsync_dir(d)
        self.checkpoint()
        self.run_retention(now_ms, retention=False)
        return report

    def _lock(self, d: str) -> None:
        fd = os.open(os.path.join(d, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise KafkaStorageError(
                f"log dir {d} is locked by another process (another broker running?)") from None
        self._locks[d] = fd

    # ------------------------------------------------------------------ configs
    def _effective_config(self, topic: str) -> LogConfig:
        cfg = self._topic_configs.get(topic)
        if cfg is None and self._config_for is not None:
            cfg = self._config_for(topic)
        return cfg or self.default_config

    def set_topic_config(self, topic: str, config: LogConfig | Mapping[str, str]) -> LogConfig:
        if not isinstance(config, LogConfig):
            config = self.default_config.with_overrides(config)
        self._topic_configs[topic] = config
        for (t, _p), plog in self._logs.items():
            if t == topic:
                plog.update_config(config)
        return config

    # ------------------------------------------------------------------ partitions
    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get((topic, partition))

    def get_or_create(self, topic: str, partition: int, config: LogConfig | None = None, *,
                      now_ms: int = 0, topic_id: str | None = None) -> PartitionLog:
        key = (topic, partition)
        plog = self._logs.get(key)
        if config is not None:
            self._topic_configs[topic] = config
        if plog is not None:
            if config is not None and plog.config != config:
                plog.update_config(config)
            if topic_id is not None and plog.topic_id != topic_id:
                plog.set_topic_id(topic_id)
            return plog
        if self.closed:
            raise KafkaStorageError("log manager is shut down")
        d = self._next_dir()
        path = os.path.join(d, f"{topic}-{partition}")
        plog = PartitionLog.open(path, self._effective_config(topic), now_ms,
                                 had_clean_shutdown=True, topic=topic, partition=partition,
                                 topic_id=topic_id, io=self.io, flush_stats=self.flush_stats)
        if self.io is not None:
            # queued before any recovery-point checkpoint naming the partition (FIFO);
            # partitions created together share one fsync of the log dir
            self.io.fsync_dir(d)
        else:
            fsync_dir(d)
        self._logs[key] = plog
        self._dir_of[key] = d
        log.info("created log for %s-%d in %s", topic, partition, d)
        return plog

    def _next_dir(self) -> str:
        if len(self.log_dirs) == 1:
            return self.log_dirs[0]
        counts = {d: 0 for d in self.log_dirs}
        for d in list(self._dir_of.values()) + [os.path.dirname(p) for p in self._opening_paths.values()]:
            counts[d] = counts.get(d, 0) + 1
        return min(self.log_dirs, key=lambda d: (counts[d], self.log_dirs.index(d)))

    # ------------------------------------------------------------------ off-loop create/delete
    def opening(self, topic: str, partition: int) -> asyncio.Future | None:
        """The future of a partition being created in the admin thread, if any."""
        return self._opening.get((topic, partition))

    async def wait_opening(self) -> None:
        """Until every partition creation started so far has finished (CreateTopics answers
        after its partitions exist, as a client that produces next expects)."""
        upto = self._open_seq
        if not self._open_running or self._open_running[0] > upto:
            return
        fut = asyncio.get_running_loop().create_future()
        self._open_waiters.append((upto, fut))
        await fut

    def _opening_finished(self, fut: asyncio.Future) -> None:
        """A creation's future is resolved: wake the waiters it was the last one for."""
        seq = self._open_seq_of.pop(id(fut), None)
        if seq is None:
            return
        self._open_finished.add(seq)
        running, finished = self._open_running, self._open_finished
        while running and running[0] in finished:
            finished.discard(heapq.heappop(running))
        low = running[0] if running else self._open_seq + 1
        still = []
        for upto, w in self._open_waiters:
            if upto < low:
                if not w.done():
                    w.set_result(None)
            else:
                still.append((upto, w))
        self._open_waiters = still

    def create_in_background(self, topic: str, partition: int, config: LogConfig | None = None, *,
                             now_ms: int = 0, topic_id: str | None = None,
                             prepare: Callable[[PartitionLog], object] | None = None) -> asyncio.Future | None:
        """Create a new partition's log in the admin thread; resolves on the event loop to
        ``(log, prepare(log))`` once the log is registered (``prepare`` runs in the thread
        too: it may read the new log's files, and nothing else can see the log yet).

        None when that is not possible (the log exists, no admin thread, no running loop):
        the caller then uses ``get_or_create``. A ``delete`` meanwhile fails the future."""
        key = (topic, partition)
        if key in self._logs or self._admin is None or self.closed:
            return None
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return None
        if config is not None:
            self._topic_configs[topic] = config
        fut = self._opening.get(key)
        if fut is not None:
            return fut
        d = self._next_dir()
        path = os.path.join(d, f"{topic}-{partition}")
        fut = loop.create_future()
        self._opening[key] = fut
        self._opening_paths[key] = path
        self._open_seq += 1
        self._open_seq_of[id(fut)] = self._open_seq
        heapq.heappush(self._open_running, self._open_seq)
        self._update_gc_hold()
        # Requests made in one loop iteration (the records of one CreateTopics) go to the
        # thread as one job: one submit, and completions come back in groups, not one
        # cross-thread wake-up per partition.
        if not self._create_batch:
            loop.call_soon(self._submit_create_batch, loop)
        self._create_batch.append((key, d, path, self._effective_config(topic), now_ms, topic_id, prepare, fut))
        return fut

    def _update_gc_hold(self) -> None:
        """Hold full collections while creations are in flight (``kbroker.gc_policy``)."""
        want = self.hold_gc_while_creating and bool(self._opening) and not self.closed
        if want and not self._gc_held:
            gc_policy.hold_full_collections()
            self._gc_held = True
        elif not want and self._gc_held:
            self._gc_held = False
            gc_policy.release_full_collections()

    def _submit_create_batch(self, loop) -> None:
        batch, self._create_batch = self._create_batch, []
        if not batch:
            return
        if self._admin is None:   # shut down meanwhile
            for item in batch:
                self._created(item, None, KafkaStorageError("log manager is shut down"))
            return
        io = self.io

        def work():
            done, last = [], time.monotonic()
            for item in batch:
                key, _d, path, cfg, now_ms, topic_id, prepare, _fut = item
                try:
                    plog = PartitionLog.open(path, cfg, now_ms, had_clean_shutdown=True, topic=key[0],
                                             partition=key[1], topic_id=topic_id, io=io,
                                             flush_stats=self.flush_stats, new=True)
                    try:
                        done.append((item, (plog, prepare(plog) if prepare is not None else None), None))
                    except BaseException:
                        plog.close()
                        raise
                except Exception as e:  # noqa: BLE001 - reported through the partition's future
                    done.append((item, None, e))
                # Hand the GIL over between partitions: the loop thread gives it up at each
                # system call and otherwise waits up to the switch interval to get it back
                # from this thread's Python (a log's open: ~0.2 ms of it)
                time.sleep(0)
                if time.monotonic() - last > 0.005 or len(done) >= 64:
                    loop.call_soon_threadsafe(self._created_many, done)
                    done, last = [], time.monotonic()
            if done:
                loop.call_soon_threadsafe(self._created_many, done)

        self._admin.submit(work)

    # Partitions registered per loop iteration: each resolved future runs its owner's
    # install (replica manager: producer state, role, epoch checkpoint) in the next one, so a
    # group of 64 resolved at once held the loop for 50-130 ms. Groups from the admin thread
    # queue up here and one drain hands them out a few per iteration.
    CREATED_PER_ITERATION = 8

    def _created_many(self, done) -> None:
        self._to_register.append((done, set()))
        if len(self._to_register) == 1:   # (a drain step may already have run this iteration)
            asyncio.get_running_loop().call_soon(self._register_some)

    def _register_some(self) -> None:
        done, dirs = self._to_register[0]
        n = self.CREATED_PER_ITERATION
        for item, result, exc in done[:n]:
            if self._created(item, result, exc):
                dirs.add(item[1])
        del done[:n]
        if not done:
            self._to_register.popleft()
            if self.io is not None:
                for d in dirs:
                    self.io.fsync_dir(d)   # the new partition dirs, one fsync per group
        if self._to_register:
            asyncio.get_running_loop().call_soon(self._register_some)

    def _created(self, item, result, exc) -> bool:
        """On the loop: register a log the admin thread created, resolve its future."""
        key, d, _path, _cfg, _now, _tid, _prep, fut = item
        doomed = id(fut) in self._doomed
        self._doomed.discard(id(fut))
        if self._opening.get(key) is fut:
            del self._opening[key]
            self._opening_paths.pop(key, None)
            self._update_gc_hold()
        if exc is None and (doomed or self.closed):
            result[0].close()
            exc = KafkaStorageError(f"{key[0]}-{key[1]} was deleted while being created")
        if exc is not None:
            if not fut.done():
                fut.set_exception(exc)
                fut.exception()   # retrieved: a caller that stopped caring logs nothing
            self._opening_finished(fut)
            if not doomed:
                log.error("creating the log of %s-%d failed: %s", key[0], key[1], exc)
            return False
        self._logs[key] = result[0]
        self._dir_of[key] = d
        if not fut.done():
            fut.set_result(result)
        self._opening_finished(fut)
        return True

    def delete(self, topic: str, partition: int, now_ms: int = 0) -> bool:
        """Close the log and rename its dir ``topic-N.<uuid>-delete``; the files go after
        file.delete.delay.ms (in ``run_retention``). Returns False if there was no log."""
        return self.delete_many([(topic, partition)], now_ms) > 0

    def delete_many(self, keys, now_ms: int = 0, *, stray: bool = False, checkpoint: bool = True) -> int:
        """``delete`` for many partitions with one checkpoint; with the admin thread the
        renames (and dir fsyncs) run there. Returns how many logs there were.

        ``checkpoint=False``: a caller deleting in several calls checkpoints with the last
        (at 10,000 partitions, a checkpoint's walk of every log costs ~2 ms of the loop).

        ``stray=True``: rename to ``topic-N.<uuid>-stray`` and keep the files (Kafka moves a
        stray replica aside rather than deleting it; start-up skips such dirs)."""
        suffix = STRAY_DIR_SUFFIX if stray else DELETE_DIR_SUFFIX
        # one id for the call: each name is unique by its topic-partition prefix already
        # (uuid4 per partition read the kernel's random source 10,000 times for 10,000)
        tag = uuid.uuid4().hex
        renames: list[tuple[str, str, str]] = []   # (dir, old path, new path)
        closes: list[PartitionLog] = []
        if self._create_batch:   # creations not handed to the thread yet go first (FIFO)
            self._submit_create_batch(asyncio.get_running_loop())
        for topic, partition in keys:
            key = (topic, partition)
            new_name = f"{topic}-{partition}.{tag}{suffix}"
            fut = self._opening.pop(key, None)
            if fut is not None:   # still being created: its creation runs first (FIFO)
                self._update_gc_hold()
                self._doomed.add(id(fut))
                path = self._opening_paths.pop(key)
                d = os.path.dirname(path)
                new = os.path.join(d, new_name)
                renames.append((d, path, new))
                self._pending_dir_deletes.append((new, now_ms + self._effective_config(topic).file_delete_delay_ms))
                continue
            plog = self._logs.pop(key, None)
            d = self._dir_of.pop(key, None)
            if plog is None or d is None:
                continue
            new = os.path.join(d, new_name)
            renames.append((d, plog.dir, new))
            plog.detach_descriptors()
            closes.append(plog)
            if not stray:
                self._pending_dir_deletes.append((new, now_ms + plog.config.file_delete_delay_ms))
        if not renames:
            return 0
        # Closing (index trims, unmaps) and renaming cost ~0.1 ms per partition: in the admin
        # thread. The logs are out of every map already, so nothing new reaches them.
        if self._admin is not None:
            self._admin.submit(_close_and_rename, closes, renames)
        else:
            _close_and_rename(closes, renames)
        self._remove_deleted_dirs(now_ms)
        if checkpoint:
            self.checkpoint_after_deletes()
        log.info("%s %d logs (%s)", "moved aside as stray" if stray else "deleted", len(renames),
                 ", ".join(os.path.basename(n) for _d, _o, n in renames[:3]) + (" ..." if len(renames) > 3 else ""))
        return len(renames)

    def logs(self) -> dict[tuple[str, int], PartitionLog]:
        return dict(self._logs)

    def __iter__(self) -> Iterator[PartitionLog]:
        return iter(list(self._logs.values()))

    def __len__(self) -> int:
        return len(self._logs)

    def dir_of(self, topic: str, partition: int) -> str | None:
        return self._dir_of.get((topic, partition))

    # ------------------------------------------------------------------ background work
    def run_retention(self, now_ms: int, *, retention: bool = True) -> RetentionStats:
        """One retention pass over every log (Kafka's log.retention.check.interval.ms
        task) plus removal of ``.deleted`` files and ``-delete`` dirs that are due."""
        return run_to_end(self.retention_steps(now_ms, retention=retention))

    async def run_retention_async(self, now_ms: int) -> RetentionStats:
        """``run_retention`` in slices that yield to the event loop (with 10,000 partitions
        the pass held the loop for tens of milliseconds every check interval)."""
        return await run_in_slices(self.retention_steps(now_ms))

    RETENTION_STEP_SEGMENTS = 32

    def retention_steps(self, now_ms: int, *, retention: bool = True):
        """Generator: the retention pass, a log (or RETENTION_STEP_SEGMENTS of its segments)
        per step; returns the RetentionStats."""
        stats = RetentionStats()
        for plog in list(self._logs.values()):
            yield
            if plog.closed:      # deleted or closed while the pass was paused
                continue
            if retention:
                try:
                    # a few segments a step: 300 at once held the loop ~10 ms
                    while (n := plog.delete_old_segments(now_ms, self.RETENTION_STEP_SEGMENTS)) > 0:
                        stats.segments_deleted += n
                        yield
                        if plog.closed:
                            break
                except OSError as e:  # pragma: no cover - disk trouble: keep going
                    log.error("retention of %r failed: %s", plog, e)
                if plog.closed:
                    continue
            stats.files_removed += plog.delete_pending(now_ms)
        stats.dirs_removed = self._remove_deleted_dirs(now_ms)
        return stats

    def _remove_deleted_dirs(self, now_ms: int) -> int:
        due = [(p, t) for p, t in self._pending_dir_deletes if t <= now_ms]
        if not due:
            return 0
        due_set = set(due)
        self._pending_dir_deletes = [x for x in self._pending_dir_deletes if x not in due_set]
        paths = [p for p, _t in due]
        if self._admin is not None:
            self._admin.submit(_remove_trees, paths)   # after the renames that made them (FIFO)
        else:
            _remove_trees(paths)
        return len(due)

    def _log_cleaner(self):
        if self._cleaner is None:
            self._cleaner = LogCleaner(dedupe_buffer_size=self.cleaner_dedupe_buffer_size)
        return self._cleaner

    def run_cleaner(self, now_ms: int, max_logs: int | None = None):
        """Compact the dirtiest compacted logs (see ``cleaner.LogCleaner``)."""
        stats = self._log_cleaner().clean_logs(list(self._logs.values()), now_ms, max_logs=max_logs)
        self._write_cleaner_checkpoints()
        return stats

    async def run_cleaner_async(self, now_ms: int, max_logs: int | None = None):
        """``run_cleaner`` in slices that yield to the event loop (``LogCleaner.clean_async``)."""
        stats = await self._log_cleaner().clean_logs_async(list(self._logs.values()), now_ms,
                                                           max_logs=max_logs)
        if not self.closed:
            self._write_cleaner_checkpoints(await run_in_slices(self._cleaner_offsets_steps()))
        return stats

    def run_flush(self, now_ms: int) -> int:
        """flush.ms / flush.messages policy and the fsync of rolled segments; writes the
        recovery-point checkpoint when something was flushed. Returns logs flushed."""
        n = 0
        for plog in list(self._logs.values()):
            did = plog.flush_rolled() > 0
            did = plog.maybe_flush(now_ms) or did
            n += did
        if n:
            self.checkpoint_recovery_points()
        return n

    async def run_flush_async(self, now_ms: int) -> int:
        """``run_flush`` with the fsyncs of rolled segments in the IO thread (when started):
        each log's recovery point moves only after its fsync completed, then the
        recovery-point checkpoint is written by the IO thread too."""
        if self.io is None:
            return self.run_flush(now_ms)
        # Every tick walks every log: with 10,000 partitions the calls alone held the loop
        # for tens of milliseconds, so only logs with rolled segments waiting are called.
        started = []

        def start(plog: PartitionLog) -> None:
            if not plog._roll_flush_pending or plog.closed:
                return
            try:
                job = plog.start_flush_rolled()
            except OSError as e:  # pragma: no cover - disk trouble
                log.error("flushing %r failed: %s", plog, e)
                return
            if job is not None:
                started.append((plog, job))
        await run_in_slices(each(list(self._logs.values()), start))
        n = 0
        for plog, (segs, fut) in started:
            ok, took = True, None
            try:
                took = await asyncio.wrap_future(fut)
            except OSError as e:  # pragma: no cover - disk trouble
                ok = False
                log.error("fsync of rolled segments of %r failed: %s", plog, e)
            plog.finish_flush_rolled(segs, ok, took)
            n += ok
        if self.closed:
            return n
        flushed = []

        def maybe_flush(plog: PartitionLog) -> None:
            cfg = plog.config
            if (cfg.flush_ms != LONG_MAX or cfg.flush_messages != LONG_MAX) and not plog.closed:
                flushed.append(plog.maybe_flush(now_ms))  # flush.ms / flush.messages (off by default)
        await run_in_slices(each(list(self._logs.values()), maybe_flush))
        n += sum(flushed)
        if n:
            self.checkpoint_recovery_points()
        return n

    # ------------------------------------------------------------------ checkpoints
    def _write_offsets(self, d: str, name: str, offsets: Callable[[], dict], sync: bool) -> None:
        """Write one offsets checkpoint. With the IO thread running, the (fsynced, atomic)
        write happens there, one writer per file at a time, and ``offsets()`` is called
        there too."""
        if sync and self.io is not None:
            self.io.write_file(d, name, lambda: offsets_text(offsets()))   # taken and formatted in the thread
        else:
            write_atomic(os.path.join(d, name), offsets_text(offsets()), sync)

    def _offsets_of(self, d: str, attr: str) -> Callable[[], dict]:
        """A function taking one offset of every log in dir ``d`` when it is called: in the
        IO thread, where a checkpoint is written, since reading 10,000 logs held the loop
        ~3-5 ms for each topic a deletion removed. The values it reads are current, so
        never ahead of what they claim (a recovery point moves only after its flush), and
        a log deleted before it runs is out of the map already. (``logs()`` copies the map
        in one C call, which another thread's changes cannot interleave.)"""
        def snapshot() -> dict:
            logs = self.logs().items()
            if len(self.log_dirs) > 1:
                logs = [(k, p) for k, p in logs if self._dir_of.get(k) == d]
            return {k: getattr(p, attr) for k, p in logs}
        return snapshot

    def checkpoint_recovery_points(self, sync: bool = True) -> None:
        for d in self.log_dirs:
            self._write_offsets(d, RECOVERY_POINT_CHECKPOINT, self._offsets_of(d, "recovery_point"), sync)

    def checkpoint_log_start_offsets(self, sync: bool = True) -> None:
        for d in self.log_dirs:
            self._write_offsets(d, LOG_START_OFFSET_CHECKPOINT, self._offsets_of(d, "log_start_offset"), sync)

    def _cleaner_offsets_steps(self):
        """Generator: every dir's cleaner offsets (first dirty offset per compacted log),
        one log per step."""
        out: dict[str, dict] = {d: {} for d in self.log_dirs}
        for key, plog in list(self._logs.items()):
            yield
            if plog.first_dirty_offset is not None and not plog.closed:
                out[self._dir_of[key]][key] = plog.first_dirty_offset
        return out

    def _write_cleaner_checkpoints(self, by_dir: dict[str, dict] | None = None) -> None:
        if by_dir is None:
            by_dir = run_to_end(self._cleaner_offsets_steps())
        for d, offs in by_dir.items():
            path = os.path.join(d, CLEANER_OFFSET_CHECKPOINT)
            if offs or os.path.exists(path):
                self._write_offsets(d, CLEANER_OFFSET_CHECKPOINT, lambda offs=offs: offs, True)

    def checkpoint_after_deletes(self) -> None:
        """The checkpoints without the deleted logs (with the IO thread: written there)."""
        self.checkpoint(sync=self.io is not None)

    def checkpoint(self, sync: bool = True) -> None:
        """Write the recovery-point and log-start-offset checkpoints of every dir."""
        self.checkpoint_recovery_points(sync)
        self.checkpoint_log_start_offsets(sync)

    # ------------------------------------------------------------------ shutdown
    def shutdown(self) -> None:
        """Clean shutdown: flush every log, checkpoint, close, write .kafka_cleanshutdown."""
        if self.closed:
            return
        if self._gc_held:
            self._gc_held = False
            gc_policy.release_full_collections(freeze=False)
        self._stop_background_io()  # run what is queued; the rest is synchronous
        failed = False
        for plog in list(self._logs.values()):
            try:
                plog.flush()
            except OSError as e:  # pragma: no cover
                failed = True
                log.error("flushing %r at shutdown failed: %s", plog, e)
        self.checkpoint()
        self._write_cleaner_checkpoints()
        for plog in list(self._logs.values()):
            plog.close()
        for d in self.log_dirs:
            if not failed:
                with open(os.path.join(d, CLEAN_SHUTDOWN_FILE), "w"):
                    pass
                fsync_dir(d)
        self._unlock()
        self.closed = True

    close = shutdown

    def abandon(self) -> None:
        """Stop without a clean shutdown (tests: as if the process died)."""
        self._stop_background_io(wait=False)
        for plog in list(self._logs.values()):
            plog.close_without_trim()
        self._unlock()
        self.closed = True

    def _unlock(self) -> None:
        for fd in self._locks.values():
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)
        self._locks = {}


def _close_and_rename(closes: list[PartitionLog], renames: list[tuple[str, str, str]]) -> None:
    for plog in closes:
        try:
            plog.close()
        except OSError as e:  # pragma: no cover - disk trouble
            log.error("closing %r for deletion failed: %s", plog, e)
    dirs = set()
    for d, old, new in renames:
        try:
            os.replace(old, new)
            dirs.add(d)
        except FileNotFoundError:  # pragma: no cover - never created (disk trouble)
            pass
        except OSError as e:  # pragma: no cover
            log.error("renaming %s for deletion failed: %s", old, e)
    for d in dirs:
        fsync_dir(d)


def _remove_trees(paths: list[str]) -> None:
    for p in paths:
        shutil.rmtree(p, ignore_errors=True)


def _read_checkpoint(path: str) -> dict[tuple[str, int], int]:
    try:
        return OffsetCheckpointFile(path).read()
    except CheckpointError as e:
        log.warning("ignoring unreadable checkpoint %s: %s (full recovery)", path, e)
        return {}
