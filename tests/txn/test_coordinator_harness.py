"""A fake runtime around the pure TransactionCoordinator: an in-memory __transaction_state,
a fake clock and a marker sink. Drives writes the way the real runtime does."""

from __future__ import annotations

from dataclasses import dataclass, field

from kbroker.txn.coordinator import (
    MarkerJob,
    Reply,
    TransactionCoordinator,
    TxnConfig,
    TxnWrite,
    WriteOutcome,
)

TXN_PARTITIONS = 4


class FakeClock:
    def __init__(self, now_ms: int = 1_000_000):
        self.now_ms = now_ms

    def advance(self, ms: int) -> int:
        self.now_ms += ms
        return self.now_ms


class Allocator:
    def __init__(self, start: int = 1000):
        self.next = start

    def __call__(self) -> int:
        pid = self.next
        self.next += 1
        return pid


@dataclass
class Harness:
    config: TxnConfig = field(default_factory=lambda: TxnConfig(num_partitions=TXN_PARTITIONS))
    clock: FakeClock = field(default_factory=FakeClock)
    allocator: Allocator = field(default_factory=Allocator)
    coordinator_epoch: int = 0
    # __transaction_state: partition -> [(key, value)]
    txn_log: dict[int, list] = field(default_factory=dict)
    markers: list[tuple[MarkerJob, tuple]] = field(default_factory=list)  # (job, partition)
    pending_jobs: list[MarkerJob] = field(default_factory=list)
    auto_markers: bool = True

    def __post_init__(self):
        self.coord = self.new_coordinator()
        self.load_all()

    def new_coordinator(self) -> TransactionCoordinator:
        return TransactionCoordinator(self.config, self.allocator)

    def load_all(self) -> list[MarkerJob]:
        jobs = []
        for p in range(self.config.num_partitions):
            self.coord.begin_loading(p, self.coordinator_epoch)
            jobs += self.coord.load_partition(p, self.coordinator_epoch,
                                              list(self.txn_log.get(p, [])), self.clock.now_ms)
        for job in jobs:
            self._handle_job(job)
        return jobs

    def restart(self) -> list[MarkerJob]:
        """A crash: in-memory state is gone; replay the log under a new coordinator epoch."""
        self.coordinator_epoch += 1
        self.pending_jobs.clear()
        self.coord = self.new_coordinator()
        return self.load_all()

    # ---- driving writes --------------------------------------------------------------

    def append(self, write: TxnWrite) -> None:
        self.txn_log.setdefault(write.txn_partition, []).append((write.key, write.value))

    def finish(self, reply: Reply) -> WriteOutcome | Reply:
        """Append the reply's write (if any) and return the client's final answer."""
        if reply.write is None:
            return reply
        self.append(reply.write)
        outcome = self.coord.write_succeeded(reply.write, self.clock.now_ms)
        if outcome.markers is not None:
            self._handle_job(outcome.markers)
        return outcome

    def _handle_job(self, job: MarkerJob) -> None:
        if self.auto_markers:
            self.write_markers(job)
        else:
            self.pending_jobs.append(job)

    def write_markers(self, job: MarkerJob) -> WriteOutcome | None:
        for tp in sorted(job.partitions):
            self.markers.append((job, tp))
        write = self.coord.markers_written(job)
        if write is None:
            return None
        self.append(write)
        return self.coord.write_succeeded(write, self.clock.now_ms)

    def flush_jobs(self) -> None:
        jobs, self.pending_jobs = self.pending_jobs, []
        for job in jobs:
            self.write_markers(job)

    # ---- client calls ----------------------------------------------------------------

    def init(self, txn_id: str, timeout_ms: int = 60_000, pid: int = -1, epoch: int = -1):
        return self.finish(self.coord.init_producer_id(txn_id, timeout_ms, self.clock.now_ms,
                                                       pid, epoch))

    def add(self, txn_id: str, pid: int, epoch: int, *tps):
        return self.finish(self.coord.add_partitions(txn_id, pid, epoch, tps,
                                                     self.clock.now_ms))

    def end(self, txn_id: str, pid: int, epoch: int, commit: bool):
        return self.finish(self.coord.end_txn(txn_id, pid, epoch, commit, self.clock.now_ms))

    def tick(self, ms: int) -> list[WriteOutcome]:
        """Advance the clock and run the timeout scan."""
        self.clock.advance(ms)
        return [self.finish(Reply(write=w))
                for w in self.coord.abort_timed_out(self.clock.now_ms)]

    def state(self, txn_id: str):
        return self.coord.get(txn_id)
