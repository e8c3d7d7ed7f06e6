"""Produce (0), versions 0-11 (v0-2 legacy message sets are up-converted first, see
kbroker.broker.legacy_produce): one append per partition through ReplicaManager (producer
state check, log validation of headers + CRC, offsets rewritten in place, one pwrite).

acks=0 gets no response; if such a request fails, the connection is closed so the client
notices (as Kafka does). acks=1 answers after the leader's append; acks=-1 first needs
min.insync.replicas in the ISR (else NOT_ENOUGH_REPLICAS, nothing appended), then waits until
every in-sync replica has the batch (kbroker.replication.delayed_produce). A broker that does
not lead the partition answers NOT_LEADER_OR_FOLLOWER with the current leader (KIP-951, v10+).
"""

from __future__ import annotations

import asyncio
import functools

from kbroker.broker.legacy_produce import is_legacy, up_convert
from kbroker.handlers.deferred import Deferred
from kbroker.log.errors import LogError
from kbroker.net.connection import CloseConnection
from kbroker.replication import leader_hints
from kbroker.replication.delayed_produce import check_before_append
from kbroker.slices import run_in_slices, run_to_end
from kbroker.txn.verification import pending_remote, verify_produce, verify_remotely
from kbroker.wire.errors import Errors
from kbroker.wire.generated.produce_response import ProduceResponse

API_KEY = 0
MIN_VERSION = 0
MAX_VERSION = 11

_Topic = ProduceResponse.TopicProduceResponse
_Part = _Topic.PartitionProduceResponse
_RecordError = _Part.BatchIndexAndErrorMessage
_Leader = _Part.LeaderIdAndEpoch


# A request naming more partitions than this appends in slices (kbroker.slices), a step of
# STEP_PARTITIONS at a time: a request of 1,000 partitions of 10 KiB held the loop ~28 ms.
SLICED_PRODUCE_PARTITIONS = 64
STEP_PARTITIONS = 32

# The produce requests of one connection append in the order they came, as Kafka handles a
# connection's requests one at a time: while one appends in slices (or waits for its
# transaction's remote check), the connection's later ones wait for it (an idempotent
# producer's next batches landing first would be out of sequence). connection -> a future
# done once that request's appends are.
_appending: dict = {}


def handle(ctx, req):
    conn = ctx.conn
    ahead = _appending.get(conn) if conn is not None else None
    if ahead is not None and ahead.done():
        ahead = None
    big = sum(len(td.partition_data) for td in req.topic_data) > SLICED_PRODUCE_PARTITIONS
    if ahead is None and not big:
        # KIP-890: a transaction coordinated by another broker is asked first
        # (AddPartitionsToTxn verify_only), then the request is handled with its answers
        remote = pending_remote(getattr(ctx.broker, "txn_coordinator", None), req.transactional_id,
                                ctx.broker.replicas, req) if req.transactional_id else None
        if remote is None:
            return _handle(ctx, req)
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:        # (in-process tools and tests without a loop: in one go)
        return _in_order(ctx, req, None, None, False)
    done = loop.create_future()
    task = loop.create_task(_in_order(ctx, req, ahead, done, big))

    def release(_task) -> None:   # (also when the task is cancelled before it ever ran)
        if not done.done():
            done.set_result(None)
        if _appending.get(conn) is done:
            del _appending[conn]
    task.add_done_callback(release)
    if conn is not None:
        _appending[conn] = done
    return task


async def _in_order(ctx, req, ahead, done, sliced: bool):
    """After the appends of the connection's previous request (``ahead``): the remote check
    of a transaction (KIP-890) if it needs one, then the appends, in slices if ``sliced``;
    ``done`` is set once they are, then the answer waits for what it waits for."""
    if ahead is not None:
        await asyncio.wait([ahead])        # (not cancelled with this request)
    try:
        runtime = getattr(ctx.broker, "txn_coordinator", None)
        remote = pending_remote(runtime, req.transactional_id, ctx.broker.replicas, req) \
            if req.transactional_id else None
        codes = (await verify_remotely(runtime, req.transactional_id, *remote)) if remote is not None else None
        steps = _handle_steps(ctx, req, codes)
        out = (await run_in_slices(steps)) if sliced else run_to_end(steps)
    finally:
        if done is not None and not done.done():
            done.set_result(None)
    return (await out) if out is not None and not isinstance(out, ProduceResponse) else out


def _handle(ctx, req, remote_verdicts=None):
    return run_to_end(_handle_steps(ctx, req, remote_verdicts))


def _handle_steps(ctx, req, remote_verdicts=None):
    """Generator (kbroker.slices) pausing every STEP_PARTITIONS partitions; returns the
    response, None (acks=0) or the Deferred answer that waits for an fsync or replication."""
    replicas = ctx.broker.replicas
    now = ctx.now_ms
    acks = req.acks
    bad_acks = acks not in (0, 1, -1)
    responses = []
    waits = []   # acks=all: (partition, last offset, its response) not yet replicated
    syncs = []   # flush.messages reached: (partition, its response) until the fsync is done
    moved = []   # leaders named in NOT_LEADER_OR_FOLLOWER answers (KIP-951)
    failed = False
    txn_rt = getattr(ctx.broker, "txn_coordinator", None)
    metrics = getattr(ctx.broker, "request_metrics", None)
    n = 0
    for td in req.topic_data:
        appended = 0   # records, as the log validation counted them (MessagesInPerSec)
        parts = replicas.topics.get(td.name)
        out = []
        for pd in td.partition_data:
            n += 1
            if not n % STEP_PARTITIONS:
                yield
                parts = replicas.topics.get(td.name)   # (deleted meanwhile: not served here)
            part = parts.get(pd.index) if parts is not None else None
            if bad_acks:
                out.append(_Part(index=pd.index, error_code=Errors.INVALID_REQUIRED_ACKS, base_offset=-1))
                failed = True
                continue
            if part is None or part.leader_state is None:
                code = leader_hints.not_served_here(ctx.broker.image, td.name, pd.index)
                r = _Part(index=pd.index, error_code=code, base_offset=-1, error_message=None)
                if code == Errors.NOT_LEADER_OR_FOLLOWER and ctx.api_version >= 10:
                    lid, lep = leader_hints.current_leader(ctx.broker.image, td.name, pd.index)
                    r.current_leader = _Leader(leader_id=lid, leader_epoch=lep)
                    moved.append(lid)
                out.append(r)
                failed = True
                continue
            if acks == -1:
                code = check_before_append(acks, len(part.leader_state.isr),
                                           replicas.min_insync_replicas(part))
                if code:
                    out.append(_Part(index=pd.index, error_code=code, base_offset=-1,
                                     log_start_offset=part.log.log_start_offset))
                    failed = True
                    continue
            records = pd.records
            if not records:
                out.append(_Part(index=pd.index, error_code=Errors.INVALID_RECORD, base_offset=-1,
                                 log_start_offset=part.log.log_start_offset,
                                 error_message="produce request has no record batch"))
                failed = True
                continue
            # Produce v0-2 carry legacy message sets (magic 0/1): up-convert to one v2 batch
            if is_legacy(records):
                try:
                    records = up_convert(records, part.config, now, ctx.api_version)
                except LogError as e:
                    failed = True
                    out.append(_Part(index=pd.index, error_code=e.error_code, base_offset=-1,
                                     log_start_offset=part.log.log_start_offset, error_message=str(e)))
                    continue
            # KIP-890: a transaction's first batch here must be in a partition it added
            txn_err = verify_produce(txn_rt, req.transactional_id, part, records, remote_verdicts)
            if txn_err:
                failed = True
                out.append(_Part(index=pd.index, error_code=txn_err, base_offset=-1,
                                 log_start_offset=part.log.log_start_offset))
                continue
            # The log rewrites base offsets (and, for LogAppendTime, timestamps + CRC) in place
            # before its single pwrite. The connection receives frames into buffers it never
            # reuses, so the records are already writable: no copy. (A read-only buffer, e.g.
            # a test's bytes, is copied once.)
            if not isinstance(records, bytearray) and (type(records) is not memoryview or records.readonly):
                records = bytearray(records)
            r = replicas.append(part, records, now)
            if r.error:
                failed = True
                out.append(_Part(index=pd.index, error_code=r.error, base_offset=-1,
                                 log_start_offset=r.log_start_offset, error_message=r.message,
                                 record_errors=[_RecordError(batch_index=i, batch_index_error_message=m)
                                                for i, m in r.record_errors or ()]))
            else:
                out.append(_Part(index=pd.index, error_code=0, base_offset=r.base_offset,
                                 log_append_time_ms=r.log_append_time, log_start_offset=r.log_start_offset))
                appended += r.records_count
                if part.log.awaits_sync(r.last_offset + 1):
                    syncs.append((part.log, r.last_offset + 1, out[-1]))
                if acks == -1 and r.last_offset >= part.high_watermark:
                    waits.append((part, r.last_offset, out[-1]))
        if appended and metrics is not None:
            metrics.records_in(td.name, appended)
        responses.append(_Topic(name=td.name, partition_responses=out))
    if acks == 0:
        # (a flush.messages fsync, if any, runs anyway: sync_soon started it)
        if failed:
            raise CloseConnection("acks=0 produce request failed; closing so the producer notices")
        return None
    resp = ProduceResponse(responses=responses, throttle_time_ms=0)
    if moved and ctx.api_version >= 10:
        resp.node_endpoints = leader_hints.node_endpoints(ctx.broker.image, moved, ctx.listener_name,
                                                          ProduceResponse.NodeEndpoint)
    if syncs or waits:
        _release_records(req)
        try:
            asyncio.get_running_loop()
        except RuntimeError:    # (in-process tools and tests without a loop: waits once awaited)
            return _answer_when_awaited(syncs, replicas, waits, req.timeout_ms, resp)
        return _answer_later(syncs, replicas, waits, req.timeout_ms, resp)
    return resp


class _AppendedRecords:
    """Stands in for a partition's records once they are in the log while the answer waits
    (fsync, replication): the dispatcher keeps the request for its metrics, which read only
    the size. Holding the receive buffers of every request in flight instead made each new
    request's buffer fresh memory (page faults: a third of the broker's CPU at one
    producer's rate with flush.messages=1)."""

    __slots__ = ("nbytes",)

    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes

    def __len__(self) -> int:
        return self.nbytes


def _release_records(req) -> None:
    for td in req.topic_data:
        for pd in td.partition_data:
            if pd.records is not None:
                pd.records = _AppendedRecords(len(pd.records))


def _answer_later(syncs, replicas, waits, timeout_ms: int, resp) -> Deferred:
    """The answer, once the group-commit fsyncs cover the appends (flush.messages; Kafka
    fsyncs inside the append, here appends that arrive meanwhile share the next fsync), then
    once the in-sync replicas have every batch (acks=all). Completed by those events' own
    callbacks (kbroker.handlers.deferred): no task per request."""
    answer = Deferred()
    left = len(syncs)

    def replicated(errors) -> None:
        for part, _, out in waits:
            err = errors.get(part, Errors.NONE)
            if err:
                out.error_code = err
                out.base_offset = -1
        answer.resolve(resp)

    def after_syncs() -> None:
        try:
            if waits:
                replicas.await_replication([(p, last) for p, last, _ in waits], timeout_ms, on_done=replicated)
            else:
                answer.resolve(resp)
        except Exception as e:  # noqa: BLE001 - (from a log's callback: answered, never left waiting)
            answer.resolve(None, e)

    def synced(out, error) -> None:
        nonlocal left
        if error is not None:
            if not isinstance(error, LogError):
                answer.resolve(None, error)
                return
            out.error_code = error.error_code
            out.base_offset = -1
        left -= 1
        if left == 0:
            after_syncs()

    try:
        if syncs:
            for plog, end, out in syncs:
                try:
                    plog.when_durable(end, functools.partial(synced, out))
                except LogError as e:     # (closed meanwhile: that partition's error)
                    synced(out, e)
        else:
            after_syncs()
    except Exception as e:  # noqa: BLE001 - reaches the connection through the answer
        answer.resolve(None, e)
    return answer


async def _answer_when_awaited(*args):
    return await _answer_later(*args)
