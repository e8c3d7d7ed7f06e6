"""TxnOffsetCommit (28), versions 0-4: offsets committed inside a transaction.

The group coordinator validates the group (generation / member, as for OffsetCommit) and
builds the offset records; they are appended to the group's __consumer_offsets partition as
one *transactional* batch of the producer (so the transaction's COMMIT/ABORT marker decides
them) and stay pending in the group's offset store until that marker is written
(OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT meanwhile)."""

from __future__ import annotations

from kbroker.groups import errors
from kbroker.groups.handler_support import coordinator, known_partitions
from kbroker.groups.offsets import CommitPartition
from kbroker.groups.result import Result
from kbroker.groups.runtime import CoordinatorError
from kbroker.groups.shard import OffsetCommitRequest
from kbroker.txn.offsets_append import append_transactional_offsets
from kbroker.wire.generated.txn_offset_commit_response import TxnOffsetCommitResponse

API_KEY = 28
MIN_VERSION = 0
MAX_VERSION = 4

_Topic = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
_Part = _Topic.TxnOffsetCommitResponsePartition


async def _handle(ctx, req):
    v = ctx.api_version
    answers: dict[str, dict[int, int]] = {}
    valid = []
    for t in req.topics:
        known = known_partitions(ctx, t.name)
        rows = []
        for p in t.partitions:
            if known is None or p.partition_index not in known:
                answers.setdefault(t.name, {})[p.partition_index] = errors.UNKNOWN_TOPIC_OR_PARTITION
            else:
                rows.append(CommitPartition(p.partition_index, p.committed_offset,
                                            p.committed_leader_epoch if v >= 2 else -1,
                                            p.committed_metadata))
        if rows:
            valid.append((t.name, rows))

    def fail_all(code):
        for name, rows in valid:
            for cp in rows:
                answers.setdefault(name, {})[cp.partition] = code

    if not req.group_id:
        fail_all(errors.INVALID_GROUP_ID)
    elif valid:
        oc = OffsetCommitRequest(req.group_id, valid,
                                 req.generation_id if v >= 3 else -1,
                                 req.member_id if v >= 3 else "",
                                 req.group_instance_id if v >= 3 else None, -1, 8)
        try:
            groups = coordinator(ctx)
            shard = groups.shard_for(req.group_id)
            code, parts = append_transactional_offsets(
                ctx.broker, shard, oc, req.producer_id, req.producer_epoch, ctx.now_ms,
                transactional_id=req.transactional_id)
        except CoordinatorError as e:
            fail_all(e.code)
        else:
            if code:
                fail_all(code)
            else:
                for name, codes in parts:
                    for p, c in codes:
                        answers.setdefault(name, {})[p] = c
    return TxnOffsetCommitResponse(throttle_time_ms=0, topics=[
        _Topic(name=name, partitions=[_Part(partition_index=p, error_code=c) for p, c in ps.items()])
        for name, ps in answers.items()])


def handle(ctx, req):
    return _handle(ctx, req)
