"""DescribeQuorum (55) on a broker listener: Kafka's Admin ``describeMetadataQuorum`` asks any
broker, which forwards the request to the active controller (only the Raft leader knows every
replica's progress) and returns its answer. Without a network path to the controller (a node
started without listeners) the local quorum answers."""

from __future__ import annotations

from kbroker.wire.errors import Errors
from kbroker.wire.generated.describe_quorum_response import DescribeQuorumResponse

API_KEY = 55
MIN_VERSION = 0
MAX_VERSION = 2


async def _forward(ctx, req):
    from kbroker.kraft.controller_channel import ControllerUnavailable
    control = ctx.broker.control
    try:
        return await control.channel.send(req, ctx.api_version)
    except ControllerUnavailable as e:
        return DescribeQuorumResponse(error_code=Errors.REQUEST_TIMED_OUT, error_message=str(e), topics=[])


def handle(ctx, req):
    control = getattr(ctx.broker, "control", None)
    if control is not None and control.networked:
        return _forward(ctx, req)
    rt = ctx.broker.controller
    D = DescribeQuorumResponse
    P = D.TopicData.PartitionData
    me = D.ReplicaState(replica_id=ctx.broker.node_id, log_end_offset=rt.mlog.end_offset,
                        last_fetch_timestamp=ctx.now_ms, last_caught_up_timestamp=ctx.now_ms)
    return D(error_code=0, topics=[D.TopicData(topic_name="__cluster_metadata", partitions=[
        P(partition_index=0, error_code=0, leader_id=ctx.broker.node_id, leader_epoch=rt.quorum.epoch,
          high_watermark=rt.mlog.end_offset, current_voters=[me], observers=[])])], nodes=[])
