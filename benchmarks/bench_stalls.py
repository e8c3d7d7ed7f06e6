"""Acknowledgement stalls during admin work: kbroker, Apache Kafka 4.0 and Tansu in one run.

    python benchmarks/bench_stalls.py [--only SUBSTRING] [--brokers kbroker,kafka,tansu]
                                      [--out benchmarks/results/stalls.md] [--plot benchmarks/results/stalls.png]

A producer sends one record every 2 ms (acks=1, linger 0) to a 1-partition topic on each
broker, all the time, each from a process of its own (so the operations' clients here do
not hold the GIL its acknowledgements are timed under). Each scenario runs an operation
against one broker at a time (the brokers alternate: kbroker, Kafka, Tansu, then the next
scenario), once the other brokers are quiet (below 0.2 of a core each, at most 20 s), and
reports the longest acknowledgement latency of the records sent while it ran (its "stall":
how long a client saw the broker hold its records) next to the same producer's worst
latency in the idle second before. For kbroker it also reports the longest event-loop lag
its probe logged in the window (kbroker.loop_probe, lowered to log every lag above 10 ms
here).

Scenarios (issue 15): the first consumer group (``__consumer_offsets`` created), a topic of
1,000 partitions created and then deleted, Metadata for 10,000 partitions (10 topics of
1,000, 20 full-metadata requests), a librdkafka consumer of those 10,000 partitions (one
record each, then 5 s of caught-up full fetches), a burst of 1,000 new connections (ApiVersions on each),
hundreds of segments deleted (DeleteRecords to the end of a topic of 300 small segments,
then the retention pass that removes them), a compacted log cleaned (``--compact-mb``; the
issue's 1 GB is the default of a full run, 64 MB with --quick), and 500 classic-protocol
members (raw JoinGroup/SyncGroup/Heartbeat clients, ``RawMember``) joining one group at once
until all hold an assignment of one generation (its time and generation are printed), and
another process creating 9,000 partition-like directories on the filesystem that holds the
brokers' logs, syncing it every 1,000 (the producer's appends then meet busy metadata I/O).

The machine may be shared: the producer's stalls are compared between brokers in the same
run, never against fixed numbers. ``--pin`` runs the brokers on core 0 and this process (the
producers and every operation's clients) on core 1, as when the clients run on other
machines: on a 2-core machine a client of 10,000 partitions otherwise takes the broker's core
from it, and the broker's loop lags for that wait (which the probe reports as core-wait).
"""
from __future__ import annotations

import argparse
import asyncio
import datetime
import multiprocessing
import os
import platform
import re
import shutil
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from append_alloc_wait import metadata_burst  # noqa: E402
from peers import NAMES, cpu_seconds, make_broker, pin, produce_waiting, rss_mb  # noqa: E402

HB_TOPIC = "heartbeat"
HB_INTERVAL = 0.002
IDLE_S = 1.0
SETTLE_S = 0.5
# Before a broker's operation, wait (up to QUIET_TIMEOUT_S) until the other brokers use less
# than QUIET_CORES each on average: what one broker left running (Kafka deletes topics and
# compiles in the background) otherwise takes the cores from the next one's window. (Idle
# with their heartbeat producers, Kafka and Tansu together used 0.2-0.37 of a core.)
QUIET_CORES = 0.2
QUIET_SAMPLE_S = 0.5
QUIET_TIMEOUT_S = 20.0


def others_cpu(brokers: dict, kind: str) -> float:
    """CPU seconds used so far by every broker but ``kind``."""
    return sum(cpu_seconds(b.proc.pid) for k, b in brokers.items() if k != kind)


def wait_quiet(brokers: dict, kind: str) -> float:
    """Until the brokers other than ``kind`` use less than QUIET_CORES each on average over a
    sample (or QUIET_TIMEOUT_S passed); returns the seconds waited."""
    t0 = time.perf_counter()
    limit = QUIET_CORES * (len(brokers) - 1)
    while time.perf_counter() - t0 < QUIET_TIMEOUT_S:
        c0 = others_cpu(brokers, kind)
        time.sleep(QUIET_SAMPLE_S)
        if (others_cpu(brokers, kind) - c0) / QUIET_SAMPLE_S < limit:
            break
    return time.perf_counter() - t0


# ----------------------------------------------------------------------------- heartbeat
class Heartbeat:
    """A producer sending one record every 2 ms; keeps (send time, ack time) per record."""

    def __init__(self, bootstrap: str) -> None:
        self.p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 0,
                           "message.timeout.ms": 120000})
        self.sent: list[float] = []
        self.acked: dict[int, float] = {}
        self.errors = 0
        self._stop = threading.Event()
        self._th = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "Heartbeat":
        self.p.list_topics(HB_TOPIC, timeout=20)
        self._th.start()
        return self

    def _run(self) -> None:
        i = 0
        t0 = time.perf_counter()
        while not self._stop.is_set():
            due = t0 + i * HB_INTERVAL
            while (wait := due - time.perf_counter()) > 0:
                self.p.poll(wait)          # deliver callbacks while we wait (returns early on one)
            idx = len(self.sent)
            self.sent.append(time.perf_counter())
            self.p.produce(HB_TOPIC, b"x" * 100, on_delivery=lambda err, _m, idx=idx: self._ack(idx, err))
            self.p.poll(0)
            i += 1
            if time.perf_counter() - due > 0.5:  # we fell behind (machine loaded): resync
                t0, i = time.perf_counter(), 0

    def _ack(self, idx: int, err) -> None:
        if err is not None:
            self.errors += 1
        self.acked[idx] = time.perf_counter()

    def latencies(self, t0: float, t1: float) -> list[float]:
        """Ack latencies (ms) of the records sent in [t0, t1]; unacked ones count up to now."""
        now = time.perf_counter()
        out = []
        for i in range(len(self.sent) - 1, -1, -1):
            s = self.sent[i]
            if s < t0:
                break
            if s <= t1:
                out.append((self.acked.get(i, now) - s) * 1000)
        return out

    def worst(self, t0: float, t1: float) -> float:
        """Longest ack latency (ms) of the records sent in [t0, t1]."""
        return max(self.latencies(t0, t1), default=0.0)

    def wait_acked(self, timeout: float = 60) -> None:
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            if len(self.acked) >= len(self.sent) - 1:
                return
            time.sleep(0.05)

    def stop(self) -> None:
        self._stop.set()
        self._th.join(5)
        self.p.flush(10)


def _heartbeat_child(bootstrap: str, conn) -> None:
    hb = Heartbeat(bootstrap).start()
    conn.send(None)
    while True:
        cmd, args = conn.recv()
        if cmd == "latencies":
            conn.send(hb.latencies(*args))
        elif cmd == "wait_acked":
            hb.wait_acked(*args)
            conn.send(None)
        else:
            hb.stop()
            conn.send(None)
            return


class HeartbeatProcess:
    """A Heartbeat in a process of its own: its delivery reports are taken (and timed) by a
    thread whose GIL the operations' clients in this process (500 group members, a parse of
    10,000 partitions' metadata, 1,000 connections) do not hold. Same interface; the clock
    (perf_counter, CLOCK_MONOTONIC) is the machine's, so times compare across processes."""

    def __init__(self, bootstrap: str) -> None:
        ctx = multiprocessing.get_context("spawn")   # (no fork of librdkafka's threads)
        self._conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_heartbeat_child, args=(bootstrap, child), daemon=True)

    def start(self) -> "HeartbeatProcess":
        self.proc.start()
        if not self._conn.poll(60):
            raise RuntimeError("the heartbeat process did not start")
        self._conn.recv()
        return self

    def _ask(self, cmd: str, *args):
        self._conn.send((cmd, args))
        return self._conn.recv()

    def latencies(self, t0: float, t1: float) -> list[float]:
        return self._ask("latencies", t0, t1)

    worst = Heartbeat.worst

    def wait_acked(self, timeout: float = 60) -> None:
        self._ask("wait_acked", timeout)

    def stop(self) -> None:
        try:
            self._ask("stop")
        finally:
            self.proc.join(15)
            if self.proc.is_alive():
                self.proc.kill()


# ----------------------------------------------------------------------------- kbroker probe
_LAG = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})\].*event loop held for (\d+) ms")
_CPU = re.compile(r"loop thread CPU: (\d+) ms")
_WAIT = re.compile(r"waiting for a core: (\d+) ms")
_OTHERS = re.compile(r"other threads without a core: (\d+) ms")


def probe_lags(log_path: Path, wall0: float, wall1: float, with_cpu: bool = False):
    """Largest loop lag kbroker logged between two wall-clock times (0 if none); with_cpu:
    (lag, CPU ms the loop's thread used in it, ms it waited for a core; None if not logged)."""
    worst, cpu, wait = 0.0, None, None
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        return (0.0, None, None) if with_cpu else 0.0
    for line in text.splitlines():
        m = _LAG.match(line)
        if not m:
            continue
        ts = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").timestamp() + int(m.group(2)) / 1000
        # the line is logged when the lag ends: it covers [ts - lag, ts]
        if wall0 <= ts <= wall1 + 1 and float(m.group(3)) > worst:
            worst = float(m.group(3))
            c = _CPU.search(line)
            cpu = float(c.group(1)) if c else None
            w = _WAIT.search(line)
            wait = float(w.group(1)) if w else None
    return (worst, cpu, wait) if with_cpu else worst


def probe_held(log_path: Path, wall0: float, wall1: float) -> float:
    """The longest of kbroker's logged loop lags between two wall-clock times less the time
    its loop thread waited for a core in it (the machine's load, not the broker's work): how
    long the broker itself held its loop, by CPU, the GIL or a blocking call. 0 if none."""
    return held_lags(log_path, wall0, wall1)[0]


def held_lags(log_path: Path, wall0: float, wall1: float) -> tuple[float, float | None, int, float, int]:
    """``probe_held`` with when the longest ended (wall clock; None if no lag), how many lags
    held the loop over 10 ms, and the same two less the time kbroker's other threads waited
    for a core in each lag (an upper bound of the loop's waits for a GIL whose holder had
    no core): the longest such remainder and how many were over 10 ms, a lower bound of
    what the broker itself held."""
    worst, at, over, own_worst, own_over = 0.0, None, 0, 0.0, 0
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        return 0.0, None, 0, 0.0, 0
    for line in text.splitlines():
        m = _LAG.match(line)
        if not m:
            continue
        ts = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").timestamp() + int(m.group(2)) / 1000
        if wall0 <= ts <= wall1 + 1:
            w = _WAIT.search(line)
            held = float(m.group(3)) - (float(w.group(1)) if w else 0.0)
            over += held > 10
            if held > worst:
                worst, at = held, ts
            o = _OTHERS.search(line)
            own = max(0.0, held - (float(o.group(1)) if o else 0.0))
            own_over += own > 10
            own_worst = max(own_worst, own)
    return worst, at, over, own_worst, own_over


# ----------------------------------------------------------------------------- operations
def admin(bootstrap):
    return AdminClient({"bootstrap.servers": bootstrap})


def wait_topic(bootstrap, topic, partitions, timeout=180):
    a = admin(bootstrap)
    deadline = time.time() + timeout
    while time.time() < deadline:
        md = a.list_topics(topic, timeout=10).topics.get(topic)
        if md is not None and not md.error and len(md.partitions) == partitions:
            return
        time.sleep(0.1)
    raise RuntimeError(f"{topic} did not appear with {partitions} partitions")


def op_first_group(b, st):
    c = Consumer({"bootstrap.servers": b, "group.id": "first-group", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    c.subscribe([HB_TOPIC])
    deadline = time.time() + 60
    while time.time() < deadline and not c.assignment():
        c.poll(0.1)
    c.commit(offsets=[TopicPartition(HB_TOPIC, 0, 1)], asynchronous=False)
    c.close()


def op_create_1000(b, st):
    a = admin(b)
    a.create_topics([NewTopic("big", 1000, 1)])["big"].result(120)
    wait_topic(b, "big", 1000)


def op_create_9x1000(b, st):
    """Nine topics of 1,000 partitions in one CreateTopics (Kafka refuses a request of more
    than 10,000 partitions or records: ten would be refused)."""
    names = [f"many{i}" for i in range(9)]
    a = admin(b)   # (kept: a collected client fails its futures)
    for f in a.create_topics([NewTopic(n, 1000, 1) for n in names], operation_timeout=300).values():
        f.result(600)
    for n in names:
        wait_topic(b, n, 1000, timeout=600)


def delete_quietly(b, names, timeout=300):
    """Delete ``names`` and wait, whatever each answers (a teardown)."""
    a = admin(b)
    for f in a.delete_topics(names).values():
        try:
            f.result(timeout)
        except Exception:
            pass


def teardown_9x1000(b, st):
    delete_quietly(b, [f"many{i}" for i in range(9)], 600)


def op_delete_1000(b, st):
    a = admin(b)
    a.delete_topics(["big"])["big"].result(120)


def setup_metadata_10k(b, st):
    a = admin(b)
    for i in range(10):   # one request each: Kafka refuses more than 10,000 partitions in one
        a.create_topics([NewTopic(f"meta{i}", 1000, 1)])[f"meta{i}"].result(300)


def op_metadata_10k(b, st):
    a = admin(b)
    for _ in range(20):
        md = a.list_topics(timeout=60)
        n = sum(len(t.partitions) for t in md.topics.values())
    st["metadata_partitions"] = n


def teardown_metadata_10k(b, st):
    delete_quietly(b, [f"meta{i}" for i in range(10)])


def setup_consumer_10k(b, st):
    setup_metadata_10k(b, st)
    p = Producer({"bootstrap.servers": b, "linger.ms": 5, "queue.buffering.max.messages": 100_000})
    for i in range(10):
        for part in range(1000):
            p.produce(f"meta{i}", b"x" * 100, partition=part)
        p.poll(0)
    if p.flush(120):
        raise RuntimeError("records for the 10,000-partition consumer not acknowledged")


def op_consumer_10k(b, st, caught_up_s=5.0):
    """A librdkafka consumer assigned all 10,000 partitions at offset 0 (no ListOffsets): it
    reads one record from each, then keeps fetching caught up. librdkafka sends every fetch
    in full, naming every partition (no KIP-227 sessions)."""
    c = Consumer({"bootstrap.servers": b, "group.id": "wide-consumer", "enable.auto.commit": False})
    c.assign([TopicPartition(f"meta{i}", part, 0) for i in range(10) for part in range(1000)])
    got = 0
    deadline = time.time() + 120
    while got < 10_000 and time.time() < deadline:
        got += sum(1 for m in c.consume(10_000, timeout=1) if not m.error())
    end = time.time() + caught_up_s
    while time.time() < end:
        c.consume(10_000, timeout=0.5)
    c.close()
    st["consumer_10k_records"] = got


def op_connections_1000(b, st, n=1000):
    host, port = b.split(":")
    port = int(port)
    body = struct.pack(">hhih", 18, 0, 7, 5) + b"burst"
    req = struct.pack(">i", len(body)) + body

    async def one():
        r, w = await asyncio.open_connection(host, port)
        w.write(req)
        head = await r.readexactly(4)
        await r.readexactly(struct.unpack(">i", head)[0])
        return w

    async def burst():
        ws = await asyncio.gather(*(one() for _ in range(n)))
        for w in ws:
            w.close()

    asyncio.run(burst())


def setup_segments(b, st, segments=300):
    # 300 segments of 16 KiB-ish each; Kafka needs segment.bytes >= 14 bytes at topic level
    a = admin(b)
    a.create_topics([NewTopic("segs", 1, 1, config={"segment.bytes": "16384"})])["segs"].result(60)
    wait_topic(b, "segs", 1)
    p = Producer({"bootstrap.servers": b, "acks": "1", "linger.ms": 0, "batch.size": 4000})
    for i in range(segments * 4):
        p.produce("segs", os.urandom(4000))
        if i % 100 == 0:
            p.poll(0)
    p.flush(60)


def op_delete_segments(b, st):
    from confluent_kafka import TopicPartition as TP
    a = admin(b)
    c = Consumer({"bootstrap.servers": b, "group.id": "segs-probe"})
    _lo, hi = c.get_watermark_offsets(TP("segs", 0), timeout=10)
    c.close()
    res = a.delete_records([TP("segs", 0, hi)])
    for f in res.values():
        f.result(60)
    time.sleep(3)   # the retention pass (interval 1 s on every broker here) removes the files


def setup_compaction(b, st):
    mb = st["compact_mb"]
    a = admin(b)
    a.create_topics([NewTopic("compact", 1, 1, config={"cleanup.policy": "compact", "segment.bytes": str(8 << 20),
                                                        "min.cleanable.dirty.ratio": "0.01",
                                                        "min.compaction.lag.ms": "0"})])["compact"].result(60)
    wait_topic(b, "compact", 1)
    p = Producer({"bootstrap.servers": b, "acks": "1", "linger.ms": 20, "batch.size": 1 << 20,
                  "queue.buffering.max.kbytes": 1 << 20})
    value = os.urandom(1024)
    for i in range(mb * 1024):
        produce_waiting(p, "compact", value, key=b"k%06d" % (i % 5000))
        if i % 1000 == 0:
            p.poll(0)
    p.flush(120)


def op_compaction(b, st):
    time.sleep(st.get("compact_wait", 8))   # the cleaner runs (backoff 1 s on every broker here)


# ----------------------------------------------------------------------------- 500-member rebalance
REBALANCE_MEMBERS = 500
REBALANCE_TOPIC = "rb"


class RawMember:
    """A classic-protocol group member on the raw protocol (kbroker.net.client): JoinGroup
    (with the KIP-394 member-id round trip), SyncGroup (as leader: partitions round-robin
    over the members), Heartbeat every ``hb_s``, and a new join whenever the coordinator
    answers REBALANCE_IN_PROGRESS. ``synced`` is the generation it last got an assignment in."""

    def __init__(self, host: str, port: int, group: str, topic: str, partitions: int, hb_s: float = 0.5):
        from kbroker.net.client import KafkaClient
        self.c = KafkaClient(host, port, client_id="rb-member", request_timeout_ms=120_000)
        self.group, self.topic, self.partitions, self.hb_s = group, topic, partitions, hb_s
        self.member_id = ""
        self.generation = -1
        self.synced = -1
        self.stop = False
        self.last_error = 0

    async def _join(self) -> None:
        from kbroker.groups.consumer_protocol_bytes import encode_assignment, encode_subscription
        from kbroker.wire.generated.join_group_request import JoinGroupRequest
        from kbroker.wire.generated.sync_group_request import SyncGroupRequest
        from kbroker.wire.errors import Errors
        while not self.stop:
            r = await self.c.send(JoinGroupRequest(
                group_id=self.group, session_timeout_ms=45_000, rebalance_timeout_ms=60_000,
                member_id=self.member_id, protocol_type="consumer",
                protocols=[JoinGroupRequest.JoinGroupRequestProtocol(
                    name="range", metadata=encode_subscription([self.topic]))]))
            if r.error_code == Errors.MEMBER_ID_REQUIRED:
                self.member_id = r.member_id
                continue
            if r.error_code == Errors.UNKNOWN_MEMBER_ID:
                self.member_id = ""
                continue
            if r.error_code:
                self.last_error = r.error_code
                await asyncio.sleep(0.1)
                continue
            self.generation = r.generation_id
            assignments = []
            if r.leader == self.member_id:
                ids = sorted(m.member_id for m in r.members)
                per = {m: [] for m in ids}
                for p in range(self.partitions):
                    per[ids[p % len(ids)]].append(p)
                assignments = [SyncGroupRequest.SyncGroupRequestAssignment(
                    member_id=m, assignment=encode_assignment({self.topic: ps})) for m, ps in per.items()]
            s = await self.c.send(SyncGroupRequest(
                group_id=self.group, generation_id=r.generation_id, member_id=self.member_id,
                protocol_type="consumer", protocol_name="range", assignments=assignments))
            if s.error_code == 0:
                self.synced = r.generation_id
                return
            await asyncio.sleep(0.05)   # REBALANCE_IN_PROGRESS: join again

    async def run(self) -> None:
        from kbroker.wire.generated.heartbeat_request import HeartbeatRequest
        await self._join()
        while not self.stop:
            await asyncio.sleep(self.hb_s)
            if self.stop:
                break
            r = await self.c.send(HeartbeatRequest(group_id=self.group, generation_id=self.generation,
                                                   member_id=self.member_id))
            if r.error_code:
                self.synced = -1
                await self._join()

    async def leave(self) -> None:
        from kbroker.wire.generated.leave_group_request import LeaveGroupRequest
        self.stop = True
        try:
            await asyncio.wait_for(self.c.send(LeaveGroupRequest(
                group_id=self.group, members=[LeaveGroupRequest.MemberIdentity(member_id=self.member_id)])), 10)
        except Exception:
            pass
        await self.c.close()


def setup_rebalance(b, st):
    a = admin(b)
    a.create_topics([NewTopic(REBALANCE_TOPIC, 100, 1)])[REBALANCE_TOPIC].result(60)
    wait_topic(b, REBALANCE_TOPIC, 100)
    # the raw members skip FindCoordinator: ask once here, until the group's coordinator
    # (and __consumer_offsets) exists
    from kbroker.net.client import KafkaClient
    from kbroker.wire.generated.find_coordinator_request import FindCoordinatorRequest
    host, port = b.split(":")

    async def find():
        c = KafkaClient(host, int(port))
        try:
            for _ in range(600):
                r = await c.send(FindCoordinatorRequest(key_type=0, coordinator_keys=["rb-group"]))
                errs = [r.error_code] + [x.error_code for x in (r.coordinators or [])]
                if not any(errs):
                    return
                await asyncio.sleep(0.1)
            raise RuntimeError(f"no coordinator for rb-group: {errs}")
        finally:
            await c.close()
    asyncio.run(find())


def op_rebalance_500(b, st, n=REBALANCE_MEMBERS):
    """``n`` members join one group at once; returns when every one holds an assignment of
    the same generation (st["rebalance_s"], st["generations"])."""
    host, port = b.split(":")

    async def main():
        members = [RawMember(host, int(port), "rb-group", REBALANCE_TOPIC, 100) for _ in range(n)]
        t0 = time.perf_counter()
        tasks = [asyncio.ensure_future(m.run()) for m in members]
        deadline = t0 + 180
        while time.perf_counter() < deadline:
            gens = {m.synced for m in members}
            if len(gens) == 1 and -1 not in gens:
                break
            for t in tasks:
                if t.done() and t.exception() is not None:
                    raise t.exception()
            await asyncio.sleep(0.05)
        else:
            raise RuntimeError(f"no common generation after 180 s: {sorted({m.synced for m in members})[:5]}, "
                               f"last join errors {sorted({m.last_error for m in members})}")
        st["rebalance_s"] = time.perf_counter() - t0
        st["generation"] = members[0].synced
        for m in members:
            m.stop = True
        await asyncio.gather(*(m.leave() for m in members))
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(main())


FS_BURST_DIRS = 9000


def op_fs_burst(b, st):
    """Another process creates --burst-dirs directories on the brokers' filesystem while the
    producer writes: an append into a hole of its file waits on the inode's block-map lock
    while write-back allocates blocks and waits for the disk (benchmarks/append_alloc_wait.py)."""
    root = tempfile.mkdtemp(prefix="fs-burst-", dir=st["scratch"])
    st["burst_root"] = root
    child = multiprocessing.get_context("spawn").Process(target=metadata_burst, args=(root, st["burst_dirs"]))
    child.start()
    child.join(300)
    if child.is_alive():
        child.terminate()
        child.join()


def teardown_fs_burst(b, st):
    shutil.rmtree(st.pop("burst_root"), ignore_errors=True)
    os.sync()


SCENARIOS = [
    # name, setup, operation, teardown
    ("first consumer group (__consumer_offsets created)", None, op_first_group, None),
    ("create a topic of 1,000 partitions", None, op_create_1000, None),
    ("delete the topic of 1,000 partitions", None, op_delete_1000, None),
    ("create 9 topics of 1,000 partitions in one request", None, op_create_9x1000, teardown_9x1000),
    ("Metadata for 10,000 partitions (20 requests)", setup_metadata_10k, op_metadata_10k, teardown_metadata_10k),
    ("a consumer of 10,000 partitions (full fetches, 5 s caught up)", setup_consumer_10k, op_consumer_10k,
     teardown_metadata_10k),
    ("burst of 1,000 new connections", None, op_connections_1000, None),
    ("delete 300 segments (DeleteRecords + retention)", setup_segments, op_delete_segments, None),
    ("compact a log (--compact-mb)", setup_compaction, op_compaction, None),
    (f"{REBALANCE_MEMBERS} classic members join one group", setup_rebalance, op_rebalance_500, None),
    ("another process creates directories on the logs' filesystem (--burst-dirs)", None, op_fs_burst,
     teardown_fs_burst),
]


# ----------------------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--brokers", default="kbroker,kafka,tansu")
    ap.add_argument("--only", default="", help="run the scenarios naming one of these ('|'-separated)")
    ap.add_argument("--compact-mb", type=int, default=1024)
    ap.add_argument("--burst-dirs", type=int, default=FS_BURST_DIRS,
                    help="directories another process creates in the filesystem scenario")
    ap.add_argument("--quick", action="store_true", help="64 MB compaction")
    ap.add_argument("--out", default="")
    ap.add_argument("--plot", default="")
    ap.add_argument("--keep", action="store_true", help="keep the brokers' data and logs (path printed)")
    ap.add_argument("--pin", action="store_true",
                    help="brokers on core 0, this process and its clients on core 1 (as when clients run elsewhere)")
    args = ap.parse_args()
    if args.pin and len(os.sched_getaffinity(0)) < 2:
        ap.error("--pin needs two cores")
    kinds = args.brokers.split(",")
    tmp = Path(tempfile.mkdtemp(prefix="bench-stalls-"))
    st_base = {"compact_mb": 64 if args.quick else args.compact_mb, "scratch": str(tmp),
               "burst_dirs": args.burst_dirs}
    common = {"log.retention.check.interval.ms": "1000", "log.cleaner.backoff.ms": "1000",
              "group.initial.rebalance.delay.ms": "0"}
    os.environ["KBROKER_LOOP_LOG_MS"] = "10"
    brokers = {}
    beats = {}
    whole: dict = {}
    results: dict[str, dict[str, dict]] = {}
    try:
        for k in kinds:
            b = make_broker(k, tmp, kbroker_overrides=common, kafka_overrides=common)
            brokers[k] = b.start()
            if args.pin:
                pin(b.proc.pid, {0})
            a = admin(b.bootstrap)
            a.create_topics([NewTopic(HB_TOPIC, 1, 1)])[HB_TOPIC].result(60)
            wait_topic(b.bootstrap, HB_TOPIC, 1)
            beats[k] = HeartbeatProcess(b.bootstrap).start()
        if args.pin:
            for tid in os.listdir("/proc/self/task"):   # this process's threads; later ones
                os.sched_setaffinity(int(tid), {1})     # inherit it
            for hb in beats.values():                   # the heartbeat producers' processes
                pin(hb.proc.pid, {1})
        time.sleep(2)
        run_w0 = time.time()
        for name, setup, op, teardown in SCENARIOS:
            if args.only and not any(o in name for o in args.only.split("|")):
                continue
            results[name] = {}
            for k in kinds:
                b, hb = brokers[k], beats[k]
                st = dict(st_base)
                try:
                    if setup:
                        setup(b.bootstrap, st)
                    hb.wait_acked(60)
                    quiet_s = wait_quiet(brokers, k)
                    time.sleep(IDLE_S)
                    idle = hb.worst(time.perf_counter() - IDLE_S, time.perf_counter())
                    w0, t0, c0 = time.time(), time.perf_counter(), others_cpu(brokers, k)
                    op(b.bootstrap, st)
                    t1, w1 = time.perf_counter(), time.time()
                    time.sleep(SETTLE_S)
                    others = (others_cpu(brokers, k) - c0) / (time.perf_counter() - t0)
                    hb.wait_acked(60)
                    row = {"stall_ms": hb.worst(t0, t1 + SETTLE_S), "idle_ms": idle, "op_s": t1 - t0,
                           "quiet_s": quiet_s, "others_cores": others,
                           **{k2: v for k2, v in st.items() if k2 in ("rebalance_s", "generation")}}
                    if args.keep:   # to find the operation in the kept logs
                        row["window"] = "%s-%s" % (time.strftime("%H:%M:%S", time.localtime(w0)),
                                                   time.strftime("%H:%M:%S", time.localtime(w1 + SETTLE_S)))
                    if k.startswith("kbroker"):   # (and an A/B variant, kbroker+NAME=VALUE)
                        row["probe_ms"], row["probe_cpu_ms"], row["probe_wait_ms"] = probe_lags(b.log_path, w0, w1 + SETTLE_S, with_cpu=True)
                        row["held_ms"] = probe_held(b.log_path, w0, w1 + SETTLE_S)
                    if teardown:
                        teardown(b.bootstrap, st)
                except Exception as e:   # a peer may not support an operation (Tansu)
                    row = {"error": f"{type(e).__name__}: {e}"[:120]}
                results[name][k] = row
                print(f"{name:55s} {NAMES[k]:8s} {row}", flush=True)
        mem = {k: rss_mb(brokers[k].proc.pid) for k in kinds}
        # kbroker's loop over the whole run: its rows cover its own operations only, and work
        # it does later (segments deleted file.delete.delay.ms after a compaction), in the
        # setups and teardowns, or during the other brokers' operations falls outside them
        whole = {k: held_lags(brokers[k].log_path, run_w0, time.time()) for k in kinds if k.startswith("kbroker")}
    finally:
        for hb in beats.values():
            try:
                hb.stop()
            except Exception:
                pass
        for b in brokers.values():
            b.stop()
        if args.keep:
            print(f"data and logs kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    report(results, kinds, mem, args, whole)


def report(results, kinds, mem, args, whole=None) -> None:
    lines = [f"# Acknowledgement stalls during admin work ({datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC)", "",
             f"Machine: {platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}; "
             "shared with other jobs while it ran (load noise: compare columns, not runs)"
             + ("; brokers pinned to core 0, the clients to core 1." if args.pin else "."),
             "Producer: one 100 B record every 2 ms, acks=1, in a process of its own. 'stall' = longest acknowledgement latency "
             "of the records sent during the operation (ms); 'idle' = the same over the second before; "
             "'loop' = kbroker's longest event-loop lag logged by its probe in the window, with the CPU "
             "time its loop thread used in it and the time the thread was runnable but waited for a core "
             "(the scheduler's run-queue delay): a lag that is mostly waiting for a core is the machine's "
             "load, not work held on the loop; what is neither CPU nor core-wait is the GIL or a "
             "blocking call. 'held' = the longest lag less its core-wait: how long kbroker itself held "
             "its loop. Each operation starts once the other brokers use less than "
             f"{QUIET_CORES} of a core each (or after {QUIET_TIMEOUT_S:.0f} s); 'others' = the cores they "
             "used together during kbroker's operation.", "",
             "| operation | " + " | ".join(f"{NAMES[k]} stall (idle) ms" for k in kinds)
             + (" | kbroker loop ms (CPU ms, core-wait ms) | kbroker held ms" if "kbroker" in kinds else "")
             + (" | kbroker / Kafka stall" if "kbroker" in kinds and "kafka" in kinds else "")
             + (" | others (cores)" if "kbroker" in kinds and len(kinds) > 1 else "") + " |",
             "|---|" + "---:|" * (len(kinds) + 2 * ("kbroker" in kinds) + ("kbroker" in kinds and "kafka" in kinds)
                                  + ("kbroker" in kinds and len(kinds) > 1))]
    for name, row in results.items():
        cells = []
        for k in kinds:
            r = row.get(k, {})
            cells.append(f"{r['stall_ms']:.0f} ({r['idle_ms']:.0f})" if "stall_ms" in r else "n/a")
        if "kbroker" in kinds:
            r = row.get("kbroker", {})
            cpu, wait = r.get("probe_cpu_ms"), r.get("probe_wait_ms")
            detail = ", ".join(f"{v:.0f}" if v is not None else "?" for v in (cpu, wait))
            cells.append((f"{r.get('probe_ms', 0):.0f}" + (f" ({detail})" if cpu is not None else ""))
                         if "stall_ms" in r else "n/a")
            cells.append(f"{r.get('held_ms', 0):.0f}" if "stall_ms" in r else "n/a")
        if "kbroker" in kinds and "kafka" in kinds:
            a, b = row.get("kbroker", {}), row.get("kafka", {})
            cells.append(f"{a['stall_ms'] / max(b['stall_ms'], 1):.2f}" if "stall_ms" in a and "stall_ms" in b else "n/a")
        if "kbroker" in kinds and len(kinds) > 1:
            r = row.get("kbroker", {})
            cells.append(f"{r['others_cores']:.2f}" if "others_cores" in r else "n/a")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "Errors (operation not supported by a peer, or failed):", ""]
    for name, row in results.items():
        for k, r in row.items():
            if "error" in r:
                lines.append(f"- {name}, {NAMES[k]}: {r['error']}")
    for k, (held, at, over, own, own_over) in (whole or {}).items():
        when = time.strftime("%H:%M:%S", time.localtime(at)) if at else "-"
        lines += ["", f"{NAMES[k]}'s loop over the whole run (its operations, the setups and teardowns, "
                      f"work due later such as deletions, the other brokers' operations): longest held "
                      f"{held:.0f} ms (ending {when}); {over} lags held it over 10 ms. Less the time "
                      f"{NAMES[k]}'s other threads waited for a core in each (the most its loop can have "
                      f"waited for a GIL whose holder had no core): longest {own:.0f} ms, {own_over} over 10 ms."]
    lines += ["", "Resident memory at the end: " + ", ".join(f"{NAMES[k]} {v:.0f} MB" for k, v in mem.items())]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        names = list(results)
        fig, ax = plt.subplots(figsize=(10, 5))
        w = 0.8 / len(kinds)
        for j, k in enumerate(kinds):
            vals = [results[n].get(k, {}).get("stall_ms", 0) for n in names]
            ax.barh([i + j * w for i in range(len(names))], vals, height=w, label=NAMES[k])
        ax.set_yticks([i + w for i in range(len(names))])
        ax.set_yticklabels([n[:45] for n in names], fontsize=8)
        ax.set_xscale("log")
        ax.set_xlabel("longest acknowledgement stall (ms, log scale)")
        ax.axvline(10, color="grey", linestyle=":")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=100)


if __name__ == "__main__":
    main()
