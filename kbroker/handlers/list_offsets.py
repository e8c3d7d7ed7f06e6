"""ListOffsets (2), versions 1-10: latest (-1: the high watermark, or the last stable offset
under read_committed), earliest (-2), max timestamp (-3), earliest local (-4), latest
tiered (-5: none without tiered storage), and by timestamp."""

from __future__ import annotations

from kbroker.log.errors import LogError
from kbroker.replication.leader_hints import not_served_here
from kbroker.wire.errors import Errors
from kbroker.wire.generated.list_offsets_response import ListOffsetsResponse

API_KEY = 2
MIN_VERSION = 1
MAX_VERSION = 10

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5

_Topic = ListOffsetsResponse.ListOffsetsTopicResponse
_Part = _Topic.ListOffsetsPartitionResponse


CONSUMER_REPLICA_ID = -1
DEBUGGING_REPLICA_ID = -2   # the one caller a follower answers (tools); everyone else asks the leader


def _one(part, p, read_committed: bool, leader_only: bool = True, from_client: bool = True,
         missing: int = Errors.UNKNOWN_TOPIC_OR_PARTITION) -> _Part:
    """``missing``: the error when this broker has no such partition (``not_served_here``)."""
    idx = p.partition_index
    if part is None:
        return _Part(partition_index=idx, error_code=missing)
    if leader_only and part.leader_state is None:
        # a follower's high watermark lags the leader's: a client with stale metadata would see
        # the latest offset go backwards (Spark then reports data loss)
        return _Part(partition_index=idx, error_code=Errors.NOT_LEADER_OR_FOLLOWER)
    cle = p.current_leader_epoch
    if cle >= 0 and cle != part.leader_epoch:
        code = Errors.FENCED_LEADER_EPOCH if cle < part.leader_epoch else Errors.UNKNOWN_LEADER_EPOCH
        return _Part(partition_index=idx, error_code=code)
    plog = part.log
    ts = p.timestamp
    # a client reads up to the high watermark (or LSO); anyone else (a replica id or the
    # debugging id -2: tools, fault tests) gets this replica's own log end, as in Kafka
    if not from_client:
        limit = plog.log_end_offset
    else:
        limit = part.last_stable_offset if read_committed else plog.high_watermark
    if ts == LATEST:
        return _Part(partition_index=idx, timestamp=-1, offset=limit, leader_epoch=part.leader_epoch)
    if ts in (EARLIEST, EARLIEST_LOCAL):
        return _Part(partition_index=idx, timestamp=-1, offset=plog.log_start_offset, leader_epoch=part.leader_epoch)
    if ts == LATEST_TIERED:
        return _Part(partition_index=idx, timestamp=-1, offset=-1, leader_epoch=-1)
    if ts < 0 and ts != MAX_TIMESTAMP:
        return _Part(partition_index=idx, error_code=Errors.INVALID_REQUEST)
    try:
        found = plog.offset_for_timestamp(ts, max_offset=limit)
    except LogError as e:
        return _Part(partition_index=idx, error_code=e.error_code)
    if found is None:
        return _Part(partition_index=idx, timestamp=-1, offset=-1, leader_epoch=-1)
    epoch = found.leader_epoch if getattr(found, "leader_epoch", None) is not None else -1
    return _Part(partition_index=idx, timestamp=found.timestamp, offset=found.offset, leader_epoch=epoch)


def handle(ctx, req):
    replicas = ctx.broker.replicas
    read_committed = ctx.api_version >= 2 and req.isolation_level == 1
    leader_only = req.replica_id != DEBUGGING_REPLICA_ID
    from_client = req.replica_id == CONSUMER_REPLICA_ID
    topics = []
    for t in req.topics:
        parts = replicas.topics.get(t.name)
        # a partition the metadata has but this broker does not (its log still opening, or
        # led elsewhere) is NOT_LEADER_OR_FOLLOWER, which clients retry, as in Kafka
        out = []
        for p in t.partitions:
            part = parts.get(p.partition_index) if parts else None
            missing = not_served_here(replicas.image, t.name, p.partition_index) if part is None else 0
            out.append(_one(part, p, read_committed, leader_only, from_client, missing))
        if ctx.api_version < 4:   # leader_epoch is not ignorable before v4
            for r in out:
                r.leader_epoch = -1
        topics.append(_Topic(name=t.name, partitions=out))
    return ListOffsetsResponse(throttle_time_ms=0, topics=topics)
