"""TxnOffsetCommit (28), versions 0-4: offsets committed inside a transaction.

The group coordinator validates the group (generation / member, as for OffsetCommit) and
builds the offset records; its runtime appends them to the group's __consumer_offsets partition as
one *transactional* batch of the producer (so the transaction's COMMIT/ABORT marker decides
them) and stay pending in the group's offset store until that marker is written
(OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT meanwhile)."""

from __future__ import annotations

from kbroker.groups import errors
from kbroker.groups.handler_support import CommitAnswers, coordinator
from kbroker.groups.runtime import CoordinatorError
from kbroker.groups.shard import OffsetCommitRequest
from kbroker.wire.generated.txn_offset_commit_response import TxnOffsetCommitResponse

API_KEY = 28
MIN_VERSION = 0
MAX_VERSION = 4

_Topic = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
_Part = _Topic.TxnOffsetCommitResponsePartition


async def _handle(ctx, req):
    v = ctx.api_version
    answers = CommitAnswers(ctx, req.topics, with_leader_epoch=v >= 2)
    if not req.group_id:
        answers.fail_valid(errors.INVALID_GROUP_ID)
    elif answers.valid:
        oc = OffsetCommitRequest(req.group_id, answers.valid,
                                 req.generation_id if v >= 3 else -1,
                                 req.member_id if v >= 3 else "",
                                 req.group_instance_id if v >= 3 else None, -1, 8)
        try:
            code, parts = await coordinator(ctx).commit_transactional_offsets(
                oc, req.producer_id, req.producer_epoch, req.transactional_id)
        except CoordinatorError as e:
            answers.fail_valid(e.code)
        else:
            if code:
                answers.fail_valid(code)
            else:
                answers.set_all(parts)
    return TxnOffsetCommitResponse(throttle_time_ms=0, topics=[
        _Topic(name=name, partitions=[_Part(partition_index=p, error_code=c) for p, c in ps.items()])
        for name, ps in answers.codes.items()])


def handle(ctx, req):
    return _handle(ctx, req)
