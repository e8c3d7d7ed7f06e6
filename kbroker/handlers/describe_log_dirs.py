"""DescribeLogDirs (35), versions 0-4: each log dir with the sizes of the partitions it holds
(all of them, or those asked for), their lag behind the high watermark, and (v4) the file
system's total and usable bytes. The metadata log is not a topic partition, as in Kafka."""

from __future__ import annotations

import os

from kbroker.kraft.runtime import METADATA_TOPIC
from kbroker.wire.errors import Errors
from kbroker.wire.generated.describe_log_dirs_response import DescribeLogDirsResponse

API_KEY = 35
MIN_VERSION = 0
MAX_VERSION = 4

_Result = DescribeLogDirsResponse.DescribeLogDirsResult
_Topic = _Result.DescribeLogDirsTopic
_Part = _Topic.DescribeLogDirsPartition


def _dir_result(log_manager, d: str, wanted) -> _Result:
    try:
        st = os.statvfs(d)
    except OSError:
        return _Result(error_code=Errors.KAFKA_STORAGE_ERROR, log_dir=d, topics=[])
    by_topic: dict[str, list] = {}
    for (topic, index), plog in sorted(log_manager.logs().items()):
        if topic == METADATA_TOPIC or log_manager.dir_of(topic, index) != d:
            continue
        if wanted is not None and (topic, index) not in wanted:
            continue
        by_topic.setdefault(topic, []).append(_Part(
            partition_index=index, partition_size=plog.size_in_bytes,
            offset_lag=max(plog.high_watermark - plog.log_end_offset, 0), is_future_key=False))
    return _Result(error_code=0, log_dir=d, topics=[_Topic(name=t, partitions=p) for t, p in by_topic.items()],
                   total_bytes=st.f_blocks * st.f_frsize, usable_bytes=st.f_bavail * st.f_frsize)


def handle(ctx, req):
    lm = ctx.broker.log_manager
    wanted = None if req.topics is None else {(t.topic, p) for t in req.topics for p in t.partitions}
    return DescribeLogDirsResponse(throttle_time_ms=0, error_code=0,
                                   results=[_dir_result(lm, d, wanted) for d in lm.log_dirs])
