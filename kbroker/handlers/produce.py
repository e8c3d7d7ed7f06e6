"""Produce (0), versions 0-11 (v0-2 legacy message sets are up-converted first, see
kbroker.broker.legacy_produce): one append per partition through ReplicaManager (producer
state check, log validation of headers + CRC, offsets rewritten in place, one pwrite).

acks=0 gets no response; if such a request fails, the connection is closed so the client
notices (as Kafka does). acks=1 and acks=-1 are the same on a single node: the append is
committed when it returns.
"""

from __future__ import annotations

from kbroker.broker.legacy_produce import is_legacy, up_convert
from kbroker.log.errors import LogError
from kbroker.net.connection import CloseConnection
from kbroker.txn.verification import verify_produce
from kbroker.wire.errors import Errors
from kbroker.wire.generated.produce_response import ProduceResponse

API_KEY = 0
MIN_VERSION = 0
MAX_VERSION = 11

_Topic = ProduceResponse.TopicProduceResponse
_Part = _Topic.PartitionProduceResponse
_RecordError = _Part.BatchIndexAndErrorMessage


def handle(ctx, req):
    replicas = ctx.broker.replicas
    now = ctx.now_ms
    acks = req.acks
    bad_acks = acks not in (0, 1, -1)
    responses = []
    failed = False
    txn_rt = getattr(ctx.broker, "txn_coordinator", None)
    for td in req.topic_data:
        parts = replicas.topics.get(td.name)
        out = []
        for pd in td.partition_data:
            part = parts.get(pd.index) if parts is not None else None
            if bad_acks:
                out.append(_Part(index=pd.index, error_code=Errors.INVALID_REQUIRED_ACKS, base_offset=-1))
                failed = True
                continue
            if part is None:
                out.append(_Part(index=pd.index, error_code=Errors.UNKNOWN_TOPIC_OR_PARTITION, base_offset=-1,
                                 error_message=None))
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
            txn_err = verify_produce(txn_rt, req.transactional_id, part, records)
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
        responses.append(_Topic(name=td.name, partition_responses=out))
    if acks == 0:
        if failed:
            raise CloseConnection("acks=0 produce request failed; closing so the producer notices")
        return None
    return ProduceResponse(responses=responses, throttle_time_ms=0)
