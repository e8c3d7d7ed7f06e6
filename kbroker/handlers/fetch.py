"""Fetch (1), versions 4-17, for consumers.

* Long poll: when less than ``min_bytes`` is available the request waits up to
  ``max_wait_ms``, woken as soon as any of its partitions is appended to.
* Limits: ``partition_max_bytes`` per partition, ``max_bytes`` (capped by fetch.max.bytes)
  per response; the first partition with data always gets its first whole batch (KIP-74).
* Records are not read into memory: each partition's records are the log's file regions,
  sent by the connection with sendfile.
* Incremental fetch sessions (KIP-227, ``kbroker.broker.fetch_sessions``); a full response
  lists exactly the partitions asked for, an incremental one only those with news.
* v13+ names topics by id (UNKNOWN_TOPIC_ID for ids we do not know).
"""

from __future__ import annotations

import asyncio
import time

from kbroker.broker.fetch_sessions import CachedPartition
from kbroker.log.errors import LogError, OffsetOutOfRangeError
from kbroker.log.partition_log import ReadResult
from kbroker.net.connection import INLINE_REGION_MAX
from kbroker.replication import leader_hints, replica_selector
from kbroker.replication.replica_fetch import handle_replica_fetch, replica_of
from kbroker import slices
from kbroker.slices import run_in_slices, run_to_end
from kbroker.wire.errors import Errors
from kbroker.wire.generated.fetch_response import FetchResponse
from kbroker.wire.primitives import I32, ZERO_UUID, Writer
from kbroker.wire.stitch import halves, write_count

API_KEY = 1
MIN_VERSION = 4
MAX_VERSION = 17

_Topic = FetchResponse.FetchableTopicResponse
_Part = _Topic.PartitionData
_Aborted = _Part.AbortedTransaction
_EMPTY = b""
# A full fetch naming more partitions than this is handled in slices (_answer_in_slices);
# generators pause every STEP_PARTITIONS partitions (~0.5-1.5 ms of work). (At 1,000, a
# consumer's fetch of a few hundred partitions with records held the loop 13-15 ms whole.)
SLICED_FETCH_PARTITIONS = 128
STEP_PARTITIONS = 128
# A partition with records to read counts this much more than a caught-up one towards a
# step's STEP_PARTITIONS (~17 us against ~2): a step of 128 partitions with records in each
# took 2-2.5 ms, past the whole slice.
READ_WEIGHT = 8
# Reads of a fetch run in one go (up to SLICED_FETCH_PARTITIONS named, or an incremental
# session's ready partitions: a Java consumer of thousands of partitions with records on all
# of them read ~7 us each) stop after this long, as at fetch.max.bytes.
READ_WHOLE_S = slices.READ_WHOLE_S
# The tagged sub-structs every partition entry carries at their defaults, built once: the
# generated constructor would build three new objects per partition (a tenth of a full
# 10,000-partition fetch). Shared, so never mutated: a current leader is a new object.
_NO_DIVERGING = _Part.EpochEndOffset()
_NO_LEADER = _Part.LeaderIdAndEpoch()
_NO_SNAPSHOT = _Part.SnapshotId()


class _Result:
    __slots__ = ("entry", "part", "error", "records", "hw", "lso", "log_start", "aborted", "preferred")


def _read_steps(entries, replicas, budget: int, read_committed: bool, follower_reads: bool = False,
                closer=None, whole: bool = False, leave_out: bool = False):
    """Generator (kbroker.slices), pausing every STEP_PARTITIONS entries (fewer when they
    read records, READ_WEIGHT). ``closer(part, fetch_offset) -> replica id or -1``: KIP-392's
    preferred read replica (a partition with one gets no records, the client goes there).
    ``whole``: run in one go, so reading stops after READ_WHOLE_S as it does at the byte
    budget: the rest answer their offsets without records, or (``leave_out``: an
    incremental fetch, whose answer names only partitions with news) are left out of this
    answer and stay ready for the client's next fetch."""
    stop_at = time.perf_counter() + READ_WHOLE_S if whole else None
    results = []
    total = 0
    errors = False
    by_topic = replicas.topics
    topic = parts = None      # entries come grouped by topic: one topic lookup per group
    work = 0                  # since the last pause, in caught-up partitions (READ_WEIGHT)
    for e in entries:
        if work >= STEP_PARTITIONS:
            yield
            work = 0
        work += 1
        if leave_out and total and stop_at is not None and time.perf_counter() >= stop_at:
            break
        r = _Result()
        r.entry = e
        r.records = _EMPTY
        r.hw = r.lso = r.log_start = -1
        r.aborted = None
        r.preferred = -1
        if e.topic != topic or parts is None:
            topic = e.topic
            parts = by_topic.get(topic) if topic is not None else None
        part = parts.get(e.partition) if parts is not None else None
        r.part = part
        if part is None:
            r.error = Errors.UNKNOWN_TOPIC_ID if e.topic is None else \
                leader_hints.not_served_here(replicas.image, e.topic, e.partition)
            errors = True
            results.append(r)
            continue
        if part.leader_state is None and not (follower_reads and part.leader_id >= 0):
            r.error = Errors.NOT_LEADER_OR_FOLLOWER   # (v11+ may read from a follower: KIP-392)
            errors = True
            results.append(r)
            continue
        plog = part.log
        r.error = 0
        r.hw = plog.high_watermark
        r.lso = part.last_stable_offset
        r.log_start = plog.log_start_offset
        limit = r.lso if read_committed else r.hw
        if e.current_leader_epoch >= 0 and e.current_leader_epoch != part.leader_epoch:
            r.error = Errors.FENCED_LEADER_EPOCH if e.current_leader_epoch < part.leader_epoch else Errors.UNKNOWN_LEADER_EPOCH
            errors = True
        elif closer is not None and (pref := closer(part, e.fetch_offset)) >= 0:
            r.preferred = pref
            errors = True          # (answer at once, as for an error: the client moves on)
        elif e.fetch_offset == limit and r.log_start <= limit:
            pass   # caught up: nothing to read (most partitions of a large session, most fetches)
        elif total == 0 or (budget - total > 0 and (stop_at is None or time.perf_counter() < stop_at)):
            try:
                work += READ_WEIGHT
                rr = plog.read(e.fetch_offset, min(e.max_bytes, budget - total), max_offset=limit,
                               min_one_message=total == 0)
            except OffsetOutOfRangeError:
                r.error = Errors.OFFSET_OUT_OF_RANGE
                errors = True
            except LogError as ex:
                r.error = ex.error_code
                errors = True
            else:
                if rr.size:
                    r.records = rr
                    total += rr.size
                    if read_committed and part.txns is not None:
                        # up to the LSO: a superset of the returned range, which clients accept
                        r.aborted = part.txns.aborted_transactions(e.fetch_offset, limit)
        elif not (r.log_start <= e.fetch_offset <= plog.log_end_offset):
            r.error = Errors.OFFSET_OUT_OF_RANGE
            errors = True
        results.append(r)
    return results, total, errors


def _error_response(code: int) -> FetchResponse:
    return FetchResponse(throttle_time_ms=0, error_code=code, session_id=0, responses=[])


def handle(ctx, req):
    if replica_of(req, ctx.api_version)[0] >= 0:   # a follower: the leader's side of replication
        return handle_replica_fetch(ctx, req)
    steps = _handle_steps(ctx, req)
    if sum(len(t.partitions) for t in req.topics) <= SLICED_FETCH_PARTITIONS:
        return run_to_end(steps)
    return _answer_in_slices(steps)


async def _answer_in_slices(steps):
    """A full fetch of many partitions: read and answered in slices (kbroker.slices), its
    long poll too. (librdkafka sends only full fetches: every 500 ms, 10,000 partitions cost
    40 ms of handling caught up and 130 ms with data, all of it holding the loop.)"""
    out = await run_in_slices(steps)
    return (await out) if asyncio.iscoroutine(out) else out


async def _run(steps, sliced: bool):
    return (await run_in_slices(steps)) if sliced else run_to_end(steps)


def _handle_steps(ctx, req):
    """Generator (kbroker.slices) pausing every STEP_PARTITIONS partitions; returns the
    response, or the long poll's coroutine."""
    broker = ctx.broker
    v = ctx.api_version
    image = broker.image
    now = ctx.now_ms
    use_ids = v >= 13
    sessions = broker.fetch_sessions
    sid, epoch = (req.session_id, req.session_epoch) if v >= 7 else (0, -1)

    def resolve(t):
        if use_ids:
            ti = image.topics_by_id.get(t.topic_id)
            return (ti.name if ti is not None else None), t.topic_id
        ti = image.topics_by_name.get(t.topic)
        return t.topic, (ti.topic_id if ti is not None else ZERO_UUID)

    session = None
    incremental = False
    if epoch == -1:
        if sid:
            sessions.remove(sid)
    elif epoch == 0:
        if sid:
            sessions.remove(sid)
        session = sessions.create(now)
    else:
        session = sessions.get(sid)
        if session is None:
            return _error_response(Errors.FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch:
            return _error_response(Errors.INVALID_FETCH_SESSION_EPOCH)
        incremental = True

    # The partitions this fetch covers, in order: the request's (full), or the session's
    # ready ones after applying the request's changes and forgotten partitions (incremental:
    # partitions parked with nothing new are not visited, see FetchSession).
    if session is not None:
        if incremental:
            for t in req.forgotten_topics_data:
                key = t.topic_id if use_ids else t.topic
                for p in t.partitions:
                    session.forget((key, p))
        else:
            session.clear()
    entries = []
    for t in req.topics:
        name, tid = resolve(t)
        key = t.topic_id if use_ids else t.topic
        for p in t.partitions:
            if len(entries) % STEP_PARTITIONS == STEP_PARTITIONS - 1:
                yield
            e = session.partitions.get((key, p.partition)) if incremental else None
            if e is None:
                e = CachedPartition(name, tid, p.partition, p.fetch_offset, p.partition_max_bytes,
                                    p.log_start_offset, p.current_leader_epoch, key=(key, p.partition))
            else:
                e.topic = name
                e.fetch_offset = p.fetch_offset
                e.max_bytes = p.partition_max_bytes
                e.log_start_offset = p.log_start_offset
                e.current_leader_epoch = p.current_leader_epoch
            if session is not None:
                session.add(e)
            entries.append(e)
    if incremental:
        entries = list(session.ready.values())

    if session is not None:
        session.last_used_ms = now
        session.epoch = (epoch + 1) if incremental else 1

    budget = min(req.max_bytes, broker.config["fetch.max.bytes"])
    read_committed = req.isolation_level == 1
    replicas = broker.replicas
    follower_reads = v >= 11
    closer = _closer_replica(broker, req.rack_id, now) if follower_reads and req.rack_id else None
    sliced = not incremental and len(entries) > SLICED_FETCH_PARTITIONS
    watch = parts = None
    if sliced:
        # the reads below span loop iterations: watched before any is read, so an append
        # to a partition already read still wakes the long poll
        parts = yield from _partitions_of(replicas, entries)
        watch = yield from replicas.watch_steps(parts, STEP_PARTITIONS)
    results, total, errors = yield from _read_steps(entries, replicas, budget, read_committed,
                                                    follower_reads, closer, whole=not sliced,
                                                    leave_out=incremental)
    hints = (image, ctx.listener_name) if v >= 16 else None   # KIP-951: where the leader is
    if total >= req.min_bytes or errors or req.max_wait_ms <= 0 or not entries and not (
            incremental and session.partitions):   # (parked partitions may wake: wait for them)
        if watch is not None:
            yield from replicas.unwatch_steps(parts, watch, STEP_PARTITIONS)
        return (yield from _answer_steps(results, session, incremental, use_ids, read_committed, hints,
                                         v if sliced else None, entries))
    # watched from now, not from when the task first runs (an append in between must wake
    # it): an incremental session parks its quiet partitions now (FetchSession.settle),
    # other fetches take a ReplicaManager.watch_appends
    if incremental:
        session.settle(results, read_committed)
        entries = list(session.ready.values())
    if watch is None:
        parts = run_to_end(_partitions_of(replicas, entries))
        watch = replicas.watch_appends(parts)
    if sliced:
        yield from slices.emptied(results)
    return _long_poll(broker, req, entries, budget, read_committed, session, incremental, use_ids,
                      follower_reads, closer, hints, parts, watch, v if sliced else None)


def _partitions_of(replicas, entries):
    """Generator: the local partitions the fetch entries name (the ones a long poll watches)."""
    parts = []
    for i, e in enumerate(entries):
        if i and not i % STEP_PARTITIONS:
            yield
        p = replicas.get(e.topic, e.partition)
        if p is not None:
            parts.append(p)
    return parts


def _closer_replica(broker, client_rack: str, now_ms: int):
    """KIP-392 with ``replica.selector.class`` = the rack-aware selector, else None."""
    if not replica_selector.rack_aware(broker.config["replica.selector.class"]):
        return None
    image, local = broker.image, broker.node_id

    def rack_of(b):
        reg = image.brokers.get(b)
        return reg.rack if reg is not None and not reg.fenced else None
    return lambda part, offset: replica_selector.preferred_read_replica(
        part.leader_state, local, rack_of, client_rack, offset, now_ms)


async def _long_poll(broker, req, entries, budget, read_committed, session, incremental, use_ids,
                     follower_reads=False, closer=None, hints=None, parts=None, watch=None,
                     sliced_version=None):
    """Until ``min_bytes`` is there, an error, or ``max_wait_ms``. An incremental session
    waits for a parked partition to wake (or one still ready to grow), then reads the ready.
    ``sliced_version``: reads, the answer and its encoding (at this version) run in slices."""
    sliced = sliced_version is not None
    clock = broker.clock
    replicas = broker.replicas
    deadline = clock.monotonic_ms() + req.max_wait_ms
    while True:
        left = deadline - clock.monotonic_ms()
        if watch is None:       # (the first round: the partitions the handler watched)
            parts = (await _run(_partitions_of(replicas, entries), sliced)) if left > 0 else []
            if sliced and parts:
                watch = await _run(replicas.watch_steps(parts, STEP_PARTITIONS), True)
        if incremental:
            await session.wait_for_news(replicas, parts, left / 1000, watch)
            entries = list(session.ready.values())
            waited = left > 0
        else:
            if parts:
                # sliced: the watch is taken back in slices too, not in one go after the wait
                try:
                    await replicas.wait_for_append(parts, left / 1000, watch, take_back=not sliced)
                    if sliced:
                        await _run(replicas.unwatch_steps(parts, watch, STEP_PARTITIONS), True)
                except BaseException:   # cancelled (the client left): not left on idle partitions
                    if sliced:
                        run_to_end(replicas.unwatch_steps(parts, watch))
                    raise
            waited = bool(parts)
        watch = None
        results, total, errors = await _run(_read_steps(entries, replicas, budget, read_committed,
                                                        follower_reads, closer, whole=not sliced,
                                                    leave_out=incremental), sliced)
        if total >= req.min_bytes or errors or clock.monotonic_ms() >= deadline or not waited:
            return await _run(_answer_steps(results, session, incremental, use_ids, read_committed, hints,
                                            sliced_version, entries), sliced)
        if incremental:
            session.settle(results, read_committed)
            entries = list(session.ready.values())


_MOVED = (Errors.NOT_LEADER_OR_FOLLOWER, Errors.FENCED_LEADER_EPOCH)


def _answer_steps(results, session, incremental, use_ids, read_committed, hints, version, entries):
    """Generator: the response; with ``version``, already encoded (in slices) at it, and the
    fetch's ``results`` and ``entries`` lists let go of in slices (both are emptied)."""
    resp = yield from _respond_steps(results, session, incremental, use_ids, read_committed, hints)
    if version is None:
        return resp
    resp = yield from _encode_steps(resp, version)
    yield from slices.emptied(results, entries)
    return resp


def _respond_steps(results, session, incremental, use_ids, read_committed, hints=None):
    """Generator (kbroker.slices) of the FetchResponse. ``hints``: (image, listener) when the
    version carries the current leader (v16+)."""
    moved = []
    topics = []
    cur = None
    cur_key = None
    for i, r in enumerate(results):
        if i and not i % STEP_PARTITIONS:
            yield
        e = r.entry
        if incremental and not r.error and r.records is _EMPTY and r.preferred < 0 and r.hw == e.sent_hw \
                and r.lso == e.sent_lso and r.log_start == e.sent_log_start:
            continue
        e.sent_hw, e.sent_lso, e.sent_log_start = r.hw, r.lso, r.log_start
        key = e.topic_id if use_ids else e.topic
        if cur is None or key != cur_key:
            cur = _Topic(topic=e.topic or "", topic_id=e.topic_id or ZERO_UUID, partitions=[])
            cur_key = key
            topics.append(cur)
        cur.partitions.append(_Part(
            partition_index=e.partition, error_code=r.error, high_watermark=r.hw,
            last_stable_offset=r.lso, log_start_offset=r.log_start,
            aborted_transactions=([_Aborted(producer_id=a.producer_id, first_offset=a.first_offset)
                                   for a in r.aborted or ()] if read_committed else None),
            preferred_read_replica=r.preferred, records=r.records, diverging_epoch=_NO_DIVERGING,
            current_leader=_NO_LEADER, snapshot_id=_NO_SNAPSHOT))
        if hints is not None and r.error in _MOVED and e.topic is not None:
            lid, lep = leader_hints.current_leader(hints[0], e.topic, e.partition)
            cur.partitions[-1].current_leader = _Part.LeaderIdAndEpoch(leader_id=lid, leader_epoch=lep)
            moved.append(lid)
    if session is not None:
        session.settle(results, read_committed)
    resp = FetchResponse(throttle_time_ms=0, error_code=0,
                         session_id=session.id if session is not None else 0, responses=topics)
    if moved:
        resp.node_endpoints = leader_hints.node_endpoints(hints[0], moved, hints[1], FetchResponse.NodeEndpoint)
    return resp


class _EncodedFetchResponse(FetchResponse):
    """A large fetch's answer, encoded ahead in slices (``_encode_steps``: encoding 10,000
    partitions took 5 ms caught up, 15 ms with records). Kept as the chunks that follow
    throttle_time_ms (bytes, and large records as file regions), handed to the frame's writer
    as they are: no copy of the whole body in one step. The throttle time is written when the
    frame is, since a quota may set it after the handler."""

    __slots__ = ("_chunks", "_version")

    def encode_into(self, w, version: int) -> None:
        if version != self._version:
            return super().encode_into(w, version)
        w += I32.pack(self.throttle_time_ms)
        at = len(w)
        w.regions.extend((at, c) for c in self._chunks)


def _encode_steps(resp: FetchResponse, version: int):
    """Generator: ``resp`` as an _EncodedFetchResponse, STEP_PARTITIONS partitions a step
    (fewer with records to read), each step's bytes cut into chunks at once. Stitched from
    the response encoded without topics (its topics array sits after throttle_time_ms, and
    error_code and session_id from v7) and each topic encoded around its partitions (whose
    array is followed only by the topic's tagged fields, v12+)."""
    flexible = version >= 12
    head, tail = halves(resp, "responses", version, flexible, head_len=10 if version >= 7 else 4)
    topics = resp.responses
    chunks: list = []
    w = Writer()
    w += head[4:]           # (throttle_time_ms: written with the frame, see above)
    write_count(w, len(topics), flexible)
    work = 0                # since the last pause, in caught-up partitions (READ_WEIGHT)
    for t in topics:
        t_head, t_tail = halves(t, "partitions", version, flexible, tail_len=1 if flexible else 0)
        parts = t.partitions
        w += t_head
        write_count(w, len(parts), flexible)
        for p in parts:
            if work >= STEP_PARTITIONS:
                chunks += w.chunks()
                w = Writer()
                yield
                work = 0
            work += 1
            rec = p.records
            if type(rec) is ReadResult and rec.size <= INLINE_REGION_MAX:
                # the connection would pread it to send it inline: done here, in slices (a
                # fetch with records in thousands of partitions was thousands of preads in
                # one go)
                p.records = rec.to_bytes()
                work += READ_WEIGHT
            p.encode_into(w, version)
        w += t_tail
    w += tail
    chunks += w.chunks()
    out = _EncodedFetchResponse(throttle_time_ms=resp.throttle_time_ms, error_code=resp.error_code,
                                session_id=resp.session_id, responses=topics,
                                node_endpoints=resp.node_endpoints)
    out._chunks, out._version = chunks, version
    return out
