"""WriteTxnMarkers (27), versions 0-1: a transaction coordinator asks this broker to write
COMMIT/ABORT markers to partitions it leads. Each marker is checked against the partition's
producer state (producer epoch, coordinator epoch) before it is appended.

On a single node the local coordinator writes markers through the same function directly;
this API is what a coordinator on another broker uses."""

from __future__ import annotations

from kbroker.txn.handler_util import txn_runtime
from kbroker.wire.errors import Errors
from kbroker.wire.generated.write_txn_markers_response import WriteTxnMarkersResponse

API_KEY = 27
MIN_VERSION = 0
MAX_VERSION = 1

_Marker = WriteTxnMarkersResponse.WritableTxnMarkerResult
_Topic = _Marker.WritableTxnMarkerTopicResult
_Part = _Topic.WritableTxnMarkerPartitionResult


def handle(ctx, req):
    rt = txn_runtime(ctx)
    out = []
    for m in req.markers:
        topics = []
        for t in m.topics:
            parts = []
            for p in t.partition_indexes:
                if rt is None:
                    code = Errors.COORDINATOR_NOT_AVAILABLE
                else:
                    code = rt.write_marker_locally(t.name, p, m.producer_id, m.producer_epoch,
                                                   m.coordinator_epoch, m.transaction_result)
                parts.append(_Part(partition_index=p, error_code=code))
            topics.append(_Topic(name=t.name, partitions=parts))
        out.append(_Marker(producer_id=m.producer_id, topics=topics))
    return WriteTxnMarkersResponse(markers=out)
