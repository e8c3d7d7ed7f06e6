"""WriteTxnMarkers (27), versions 0-1: a transaction coordinator asks this broker to write
COMMIT/ABORT markers to partitions it leads. Each marker is checked against the partition's
producer state (producer epoch, coordinator epoch) before it is appended, and answered once
the partition's in-sync replicas have it (Kafka appends markers with acks=all), so a
coordinator never completes a transaction on a marker a leader change could lose.

The local coordinator writes markers through the same function (``TxnRuntime.write_marker``);
this API is what a coordinator on another broker uses (``kbroker.txn.marker_sender``)."""

from __future__ import annotations

import asyncio

from kbroker.txn.handler_util import txn_runtime
from kbroker.wire.errors import Errors
from kbroker.wire.generated.write_txn_markers_response import WriteTxnMarkersResponse

API_KEY = 27
MIN_VERSION = 0
MAX_VERSION = 1

_Marker = WriteTxnMarkersResponse.WritableTxnMarkerResult
_Topic = _Marker.WritableTxnMarkerTopicResult
_Part = _Topic.WritableTxnMarkerPartitionResult


async def _handle(ctx, req):
    rt = txn_runtime(ctx)
    out = []
    writes = []   # (partition result, the marker's write) awaited together
    for m in req.markers:
        topics = []
        for t in m.topics:
            parts = []
            for p in t.partition_indexes:
                r = _Part(partition_index=p, error_code=Errors.COORDINATOR_NOT_AVAILABLE)
                if rt is not None:
                    writes.append((r, rt.write_marker(t.name, p, m.producer_id, m.producer_epoch,
                                                      m.coordinator_epoch, m.transaction_result)))
                parts.append(r)
            topics.append(_Topic(name=t.name, partitions=parts))
        out.append(_Marker(producer_id=m.producer_id, topics=topics))
    codes = await asyncio.gather(*(w for _, w in writes))
    for (r, _), code in zip(writes, codes):
        r.error_code = code
    return WriteTxnMarkersResponse(markers=out)


def handle(ctx, req):
    return _handle(ctx, req)
