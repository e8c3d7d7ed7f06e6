"""What each request must be allowed to do: Kafka's KafkaApis authorization, per API.

With an authorizer configured, the dispatcher runs :func:`authorized_handle` instead of the
handler directly. A filter for the API looks at the request first and either

* answers it alone (the whole request is refused: GROUP_AUTHORIZATION_FAILED for a group
  request, TRANSACTIONAL_ID_AUTHORIZATION_FAILED ...), or
* takes the refused parts out of the request (topics without the needed ACL, groups,
  transactional ids) and returns a ``post`` function that adds their error entries to the
  handler's response (TOPIC_AUTHORIZATION_FAILED per partition ...), or filters what the
  handler listed (Metadata's and ListGroups' "everything" answers keep what the principal may
  DESCRIBE), or sets the authorized-operations bitmasks.

So the handlers themselves stay free of security code, and the operation/resource/error code
table of Kafka's documentation lives here in one place. APIs without a filter need no ACL
(ApiVersions, SASL) or check in their own handler (ACL and SCRAM admin APIs).
"""

from __future__ import annotations

import copy
import inspect

from kbroker.net.connection import CloseConnection
from kbroker.security.acls import (ALTER, ALTER_CONFIGS, CLUSTER_ACTION, CLUSTER_NAME, CREATE, DELETE, DESCRIBE,
                                   DESCRIBE_CONFIGS, IDEMPOTENT_WRITE, R_CLUSTER, R_GROUP, R_TOPIC,
                                   R_TRANSACTIONAL_ID, READ, WRITE)
from kbroker.wire.errors import Errors
from kbroker.wire.primitives import ZERO_UUID

TOPIC_DENIED = Errors.TOPIC_AUTHORIZATION_FAILED
GROUP_DENIED = Errors.GROUP_AUTHORIZATION_FAILED
CLUSTER_DENIED = Errors.CLUSTER_AUTHORIZATION_FAILED
TXN_DENIED = Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
OPS_OMITTED = -2147483648
TOPIC_OPS = (READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS)
CLUSTER_OPS = (CREATE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE)
GROUP_OPS = (READ, DESCRIBE, DELETE)


def authorized_handle(spec, ctx, req):
    f = FILTERS.get(spec.api_key)
    if f is None:
        return spec.handle(ctx, req)
    out = f(ctx, req)
    if out is None:
        return spec.handle(ctx, req)
    if not callable(out):
        return out                       # refused as a whole
    res = spec.handle(ctx, req)
    if inspect.isawaitable(res):
        return _after(res, out)
    return out(copy.copy(res))


async def _after(awaitable, post):
    # a shallow copy: handlers may answer from a cache shared by every principal (Metadata)
    return post(copy.copy(await awaitable))


def _cluster(ctx, op) -> bool:
    return ctx.authorize(op, R_CLUSTER, CLUSTER_NAME)


def ops_bitmask(ctx, rtype: int, name: str, ops) -> int:
    return sum(1 << op for op in ops if ctx.authorize(op, rtype, name))


def _denied_topics(ctx, op, names) -> set:
    names = set(names)
    return names - ctx.authorized(op, R_TOPIC, names)


def _extend(attr):
    """post() that appends ``extra`` to the response's list ``attr``."""
    def make(extra):
        def post(resp):
            if resp is not None and extra:
                setattr(resp, attr, list(getattr(resp, attr)) + extra)
            return resp
        return post
    return make


def _refuse(req, attr, codes, error_entry, resp_attr="topics", key=lambda t: t.name):
    """Takes the entries of ``req.<attr>`` whose key ``codes`` refuses out of the request and
    returns the post() that answers each with ``error_entry(entry, code)`` in
    ``resp.<resp_attr>``; None when nothing is refused. The entry shapes stay with each API."""
    if not codes:
        return None
    items = getattr(req, attr)
    errs = [error_entry(t, codes[key(t)]) for t in items if key(t) in codes]
    setattr(req, attr, [t for t in items if key(t) not in codes])
    return _extend(resp_attr)(errs)


def _topic_codes(ctx, op, names) -> dict:
    """TOPIC_AUTHORIZATION_FAILED for each of ``names`` without ``op``."""
    return dict.fromkeys(_denied_topics(ctx, op, names), TOPIC_DENIED)


# -- produce / fetch / offsets ----------------------------------------------------------------

def _produce(ctx, req):
    from kbroker.wire.generated.produce_response import ProduceResponse as R
    tid = req.transactional_id
    if tid and not ctx.authorize(WRITE, R_TRANSACTIONAL_ID, tid):
        codes = {td.name: TXN_DENIED for td in req.topic_data}
    else:
        codes = {n: TOPIC_DENIED for n in _denied_topics(ctx, WRITE, (td.name for td in req.topic_data))}
    if not codes:
        return None
    errs = [R.TopicProduceResponse(name=td.name, partition_responses=[
        R.TopicProduceResponse.PartitionProduceResponse(index=p.index, error_code=codes[td.name], base_offset=-1)
        for p in td.partition_data]) for td in req.topic_data if td.name in codes]
    req.topic_data = [td for td in req.topic_data if td.name not in codes]

    def post(resp):
        if resp is None:   # acks=0: Kafka closes the connection when a partition failed
            raise CloseConnection("acks=0 produce refused by the authorizer")
        resp.responses = list(resp.responses) + errs
        return resp
    return post


def _is_follower(req, version) -> bool:
    rid = req.replica_id if version < 15 else getattr(req.replica_state, "replica_id", -1)
    return rid is not None and rid >= 0


def _fetch(ctx, req):
    from kbroker.wire.generated.fetch_response import FetchResponse as R
    image = ctx.broker.image
    by_id = ctx.api_version >= 13
    if _is_follower(req, ctx.api_version):
        denied = {id(t): CLUSTER_DENIED for t in req.topics} if not _cluster(ctx, CLUSTER_ACTION) else {}
    else:
        names = {}
        for t in req.topics:
            if by_id:
                ti = image.topics_by_id.get(t.topic_id)
                if ti is not None:
                    names[id(t)] = ti.name
            else:
                names[id(t)] = t.topic
        bad = _denied_topics(ctx, READ, names.values())
        denied = {k: TOPIC_DENIED for k, n in names.items() if n in bad}
    if not denied:
        return None
    errs = [R.FetchableTopicResponse(topic=t.topic, topic_id=t.topic_id, partitions=[
        R.FetchableTopicResponse.PartitionData(partition_index=p.partition, error_code=denied[id(t)], high_watermark=-1,
                                               last_stable_offset=-1, log_start_offset=-1, records=b"")
        for p in t.partitions]) for t in req.topics if id(t) in denied]
    req.topics = [t for t in req.topics if id(t) not in denied]

    def post(resp):
        if resp is not None and resp.error_code == 0:
            resp.responses = list(resp.responses) + errs
        return resp
    return post


def _list_offsets(ctx, req):
    from kbroker.wire.generated.list_offsets_response import ListOffsetsResponse as R
    P = R.ListOffsetsTopicResponse.ListOffsetsPartitionResponse
    return _refuse(req, "topics", _topic_codes(ctx, DESCRIBE, (t.name for t in req.topics)),
                   lambda t, c: R.ListOffsetsTopicResponse(name=t.name, partitions=[
                       P(partition_index=p.partition_index, error_code=c, old_style_offsets=[], timestamp=-1, offset=-1,
                         leader_epoch=-1) for p in t.partitions]))


def _offset_for_leader_epoch(ctx, req):
    from kbroker.wire.generated.offset_for_leader_epoch_response import OffsetForLeaderEpochResponse as R
    if ctx.api_version >= 3 and req.replica_id >= 0:
        bad = {t.topic: CLUSTER_DENIED for t in req.topics} if not _cluster(ctx, CLUSTER_ACTION) else {}
    else:
        bad = _topic_codes(ctx, DESCRIBE, (t.topic for t in req.topics))
    E = R.OffsetForLeaderTopicResult.EpochEndOffset
    return _refuse(req, "topics", bad, lambda t, c: R.OffsetForLeaderTopicResult(topic=t.topic, partitions=[
        E(error_code=c, partition=p.partition, leader_epoch=-1, end_offset=-1) for p in t.partitions]),
        key=lambda t: t.topic)


def _delete_records(ctx, req):
    from kbroker.wire.generated.delete_records_response import DeleteRecordsResponse as R
    P = R.DeleteRecordsTopicResult.DeleteRecordsPartitionResult
    return _refuse(req, "topics", _topic_codes(ctx, DELETE, (t.name for t in req.topics)),
                   lambda t, c: R.DeleteRecordsTopicResult(name=t.name, partitions=[
                       P(partition_index=p.partition_index, low_watermark=-1, error_code=c) for p in t.partitions]))


def _describe_producers(ctx, req):
    from kbroker.wire.generated.describe_producers_response import DescribeProducersResponse as R
    P = R.TopicResponse.PartitionResponse
    return _refuse(req, "topics", _topic_codes(ctx, READ, (t.name for t in req.topics)),
                   lambda t, c: R.TopicResponse(name=t.name, partitions=[
                       P(partition_index=i, error_code=c, error_message=None, active_producers=[])
                       for i in t.partition_indexes]))


# -- metadata ---------------------------------------------------------------------------------

def _metadata(ctx, req):
    from kbroker.wire.generated.metadata_response import MetadataResponse as R
    v = ctx.api_version
    image = ctx.broker.image
    errs = []
    all_topics = req.topics is None or (v == 0 and not req.topics)
    if not all_topics:
        keep = []
        can_create = None
        auto = (v < 4 or req.allow_auto_topic_creation) and ctx.broker.config["auto.create.topics.enable"]
        for rt in req.topics:
            name = rt.name
            if not name and v >= 10 and rt.topic_id not in (None, ZERO_UUID):
                ti = image.topics_by_id.get(rt.topic_id)
                if ti is not None and not ctx.authorize(DESCRIBE, R_TOPIC, ti.name):
                    errs.append(R.MetadataResponseTopic(error_code=TOPIC_DENIED, name=None, topic_id=rt.topic_id,
                                                        is_internal=False, partitions=[]))
                    continue
                keep.append(rt)
                continue
            denied = not ctx.authorize(DESCRIBE, R_TOPIC, name)
            if not denied and auto and name not in image.topics_by_name:
                if can_create is None:
                    can_create = _cluster(ctx, CREATE)
                denied = not (can_create or ctx.authorize(CREATE, R_TOPIC, name))
            if denied:
                if all(e.name != name for e in errs):
                    errs.append(R.MetadataResponseTopic(error_code=TOPIC_DENIED, name=name, topic_id=ZERO_UUID,
                                                        is_internal=False, partitions=[]))
            else:
                keep.append(rt)
        req.topics = keep
        if not keep and v >= 1:
            req.topics = []   # asked only for refused topics: answer no topic, never "all"

    def post(resp):
        topics = list(resp.topics)
        if all_topics:
            ok = ctx.authorized(DESCRIBE, R_TOPIC, [t.name for t in topics])
            topics = [t for t in topics if t.name in ok]
        topics = [_with_ops(ctx, t) for t in topics]
        cluster_ops = resp.cluster_authorized_operations
        if cluster_ops != OPS_OMITTED:
            cluster_ops = ops_bitmask(ctx, R_CLUSTER, CLUSTER_NAME, CLUSTER_OPS)
        # a new plain response: the handler's may be a shared one that keeps its encoding
        return R(throttle_time_ms=resp.throttle_time_ms, brokers=resp.brokers, cluster_id=resp.cluster_id,
                 controller_id=resp.controller_id, topics=topics + errs, cluster_authorized_operations=cluster_ops)
    return post


def _with_ops(ctx, t):
    """The topic entry with this principal's authorized operations (a copy: never mutate a
    cached response)."""
    if t.error_code != 0 or t.topic_authorized_operations == OPS_OMITTED:
        return t
    t = copy.copy(t)
    t.topic_authorized_operations = ops_bitmask(ctx, R_TOPIC, t.name, TOPIC_OPS)
    return t


def _describe_topic_partitions(ctx, req):
    from kbroker.wire.generated.describe_topic_partitions_response import DescribeTopicPartitionsResponse as R
    names = [t.name for t in req.topics]
    bad = _denied_topics(ctx, DESCRIBE, names)
    errs = [R.DescribeTopicPartitionsResponseTopic(error_code=TOPIC_DENIED, name=n, topic_id=ZERO_UUID, is_internal=False,
                                                   partitions=[], topic_authorized_operations=OPS_OMITTED)
            for n in dict.fromkeys(names) if n in bad]
    req.topics = [t for t in req.topics if t.name not in bad]
    listing = not names

    def post(resp):
        topics = list(resp.topics)
        if listing:
            ok = ctx.authorized(DESCRIBE, R_TOPIC, [t.name for t in topics])
            topics = [t for t in topics if t.name in ok]
        topics = [_with_ops(ctx, t) for t in topics]
        resp.topics = sorted(topics + errs, key=lambda t: t.name or "")
        return resp
    if names and not req.topics:
        from kbroker.wire.generated.describe_topic_partitions_response import DescribeTopicPartitionsResponse
        return DescribeTopicPartitionsResponse(topics=errs, next_cursor=None)
    return post


def _describe_cluster(ctx, req):
    if not req.include_cluster_authorized_operations:
        return None

    def post(resp):
        if resp.error_code == 0:
            resp.cluster_authorized_operations = ops_bitmask(ctx, R_CLUSTER, CLUSTER_NAME, CLUSTER_OPS)
        return resp
    return post


# -- topics admin -----------------------------------------------------------------------------

def _create_topics(ctx, req):
    from kbroker.wire.generated.create_topics_response import CreateTopicsResponse as R
    if _cluster(ctx, CREATE):
        bad = set()
    else:
        bad = _denied_topics(ctx, CREATE, (t.name for t in req.topics))
    errs = [R.CreatableTopicResult(name=n, error_code=TOPIC_DENIED, error_message=None, num_partitions=-1,
                                   replication_factor=-1, configs=[], topic_config_error_code=TOPIC_DENIED)
            for n in dict.fromkeys(t.name for t in req.topics) if n in bad]
    req.topics = [t for t in req.topics if t.name not in bad]

    def post(resp):
        for r in resp.topics:
            if r.error_code == 0 and not ctx.authorize(DESCRIBE_CONFIGS, R_TOPIC, r.name):
                r.configs = []
                r.topic_config_error_code = TOPIC_DENIED
        resp.topics = list(resp.topics) + errs
        return resp
    return post


def _delete_topics(ctx, req):
    from kbroker.wire.generated.delete_topics_response import DeleteTopicsResponse as R
    image = ctx.broker.image
    errs = []
    if ctx.api_version >= 6:
        keep = []
        for t in req.topics:
            name = t.name
            if name is None:
                ti = image.topics_by_id.get(t.topic_id)
                name = ti.name if ti is not None else None
            if name is not None and not ctx.authorize(DELETE, R_TOPIC, name):
                errs.append(R.DeletableTopicResult(name=t.name, topic_id=t.topic_id or ZERO_UUID,
                                                   error_code=TOPIC_DENIED, error_message=None))
            else:
                keep.append(t)
        req.topics = keep
    else:
        bad = _denied_topics(ctx, DELETE, req.topic_names)
        errs = [R.DeletableTopicResult(name=n, error_code=TOPIC_DENIED, error_message=None)
                for n in dict.fromkeys(req.topic_names) if n in bad]
        req.topic_names = [n for n in req.topic_names if n not in bad]
    return _extend("responses")(errs) if errs else None


def _create_partitions(ctx, req):
    from kbroker.wire.generated.create_partitions_response import CreatePartitionsResponse as R
    return _refuse(req, "topics", _topic_codes(ctx, ALTER, (t.name for t in req.topics)),
                   lambda t, c: R.CreatePartitionsTopicResult(name=t.name, error_code=c, error_message=None), "results")


# ConfigResource types: 2 topic, 4 broker, 8 broker logger
def _config_denied(ctx, op, rtype, name) -> int:
    if rtype == 2:
        return 0 if ctx.authorize(op, R_TOPIC, name) else TOPIC_DENIED
    if rtype in (4, 8):
        return 0 if _cluster(ctx, op) else CLUSTER_DENIED
    return 0


def _describe_configs(ctx, req):
    from kbroker.wire.generated.describe_configs_response import DescribeConfigsResponse as R
    codes = [_config_denied(ctx, DESCRIBE_CONFIGS, r.resource_type, r.resource_name) for r in req.resources]
    if not any(codes):
        return None
    errs = [R.DescribeConfigsResult(error_code=c, error_message=None, resource_type=r.resource_type,
                                    resource_name=r.resource_name, configs=[])
            for r, c in zip(req.resources, codes) if c]
    req.resources = [r for r, c in zip(req.resources, codes) if not c]
    return _extend("results")(errs)


def _alter_configs(response_module, response_name):
    def f(ctx, req):
        import importlib
        R = getattr(importlib.import_module(response_module), response_name)
        codes = [_config_denied(ctx, ALTER_CONFIGS, r.resource_type, r.resource_name) for r in req.resources]
        if not any(codes):
            return None
        errs = [R.AlterConfigsResourceResponse(error_code=c, error_message=None, resource_type=r.resource_type,
                                               resource_name=r.resource_name)
                for r, c in zip(req.resources, codes) if c]
        req.resources = [r for r, c in zip(req.resources, codes) if not c]
        return _extend("responses")(errs)
    return f


def _describe_log_dirs(ctx, req):
    from kbroker.wire.generated.describe_log_dirs_response import DescribeLogDirsResponse as R
    if _cluster(ctx, DESCRIBE):
        return None
    return R(error_code=CLUSTER_DENIED if ctx.api_version >= 3 else 0, results=[])


# -- groups -----------------------------------------------------------------------------------

def _group_error(factory, op=READ):
    def f(ctx, req):
        if ctx.authorize(op, R_GROUP, req.group_id):
            return None
        return factory(ctx, req)
    return f


def _join_denied(ctx, req):
    from kbroker.wire.generated.join_group_response import JoinGroupResponse as R
    return R(error_code=GROUP_DENIED, generation_id=-1, protocol_type=None, protocol_name=None if ctx.api_version >= 7 else "",
             leader="", member_id="", members=[])


def _sync_denied(ctx, req):
    from kbroker.wire.generated.sync_group_response import SyncGroupResponse as R
    return R(error_code=GROUP_DENIED, protocol_type=None, protocol_name=None, assignment=b"")


def _heartbeat_denied(ctx, req):
    from kbroker.wire.generated.heartbeat_response import HeartbeatResponse as R
    return R(error_code=GROUP_DENIED)


def _leave_denied(ctx, req):
    from kbroker.wire.generated.leave_group_response import LeaveGroupResponse as R
    return R(error_code=GROUP_DENIED, members=[])


def _offset_commit(ctx, req):
    from kbroker.wire.generated.offset_commit_response import OffsetCommitResponse as R
    group_ok = ctx.authorize(READ, R_GROUP, req.group_id)
    bad = {} if group_ok else {t.name: GROUP_DENIED for t in req.topics}
    if group_ok:
        bad = {n: TOPIC_DENIED for n in _denied_topics(ctx, READ, (t.name for t in req.topics))}
    if not bad:
        return None
    errs = [R.OffsetCommitResponseTopic(name=t.name, partitions=[
        R.OffsetCommitResponseTopic.OffsetCommitResponsePartition(partition_index=p.partition_index, error_code=bad[t.name])
        for p in t.partitions]) for t in req.topics if t.name in bad]
    if not group_ok:
        return R(topics=errs)
    req.topics = [t for t in req.topics if t.name not in bad]
    return _extend("topics")(errs)


def _offset_fetch(ctx, req):
    from kbroker.wire.generated.offset_fetch_response import OffsetFetchResponse as R
    v = ctx.api_version
    if v >= 8:
        denied_groups, topic_errs = [], {}
        keep = []
        for g in req.groups:
            if not ctx.authorize(DESCRIBE, R_GROUP, g.group_id):
                denied_groups.append(R.OffsetFetchResponseGroup(group_id=g.group_id, topics=[], error_code=GROUP_DENIED))
                continue
            keep.append(g)
            if g.topics is not None:
                bad = _denied_topics(ctx, DESCRIBE, (t.name for t in g.topics))
                P = R.OffsetFetchResponseGroup.OffsetFetchResponseTopics
                topic_errs[g.group_id] = [P(name=t.name, partitions=[P.OffsetFetchResponsePartitions(
                    partition_index=i, committed_offset=-1, committed_leader_epoch=-1, metadata="", error_code=TOPIC_DENIED)
                    for i in t.partition_indexes]) for t in g.topics if t.name in bad]
                g.topics = [t for t in g.topics if t.name not in bad]
        req.groups = keep

        def post(resp):
            for g in resp.groups:
                if g.group_id in topic_errs:
                    g.topics = list(g.topics) + topic_errs[g.group_id]
                elif g.error_code == 0:   # all topics: keep the ones the principal may describe
                    ok = ctx.authorized(DESCRIBE, R_TOPIC, [t.name for t in g.topics])
                    g.topics = [t for t in g.topics if t.name in ok]
            resp.groups = list(resp.groups) + denied_groups
            return resp
        return post
    P = R.OffsetFetchResponseTopic.OffsetFetchResponsePartition
    if not ctx.authorize(DESCRIBE, R_GROUP, req.group_id):
        return R(error_code=GROUP_DENIED, topics=[] if v >= 2 else [
            R.OffsetFetchResponseTopic(name=t.name, partitions=[P(partition_index=i, committed_offset=-1, metadata="",
                                                                  error_code=GROUP_DENIED) for i in t.partition_indexes])
            for t in req.topics or ()])
    errs = []
    if req.topics is not None:
        bad = _denied_topics(ctx, DESCRIBE, (t.name for t in req.topics))
        errs = [R.OffsetFetchResponseTopic(name=t.name, partitions=[
            P(partition_index=i, committed_offset=-1, committed_leader_epoch=-1, metadata="", error_code=TOPIC_DENIED)
            for i in t.partition_indexes]) for t in req.topics if t.name in bad]
        req.topics = [t for t in req.topics if t.name not in bad]
    listing = req.topics is None

    def post(resp):
        topics = list(resp.topics)
        if listing:
            ok = ctx.authorized(DESCRIBE, R_TOPIC, [t.name for t in topics])
            topics = [t for t in topics if t.name in ok]
        resp.topics = topics + errs
        return resp
    return post


def _offset_delete(ctx, req):
    from kbroker.wire.generated.offset_delete_response import OffsetDeleteResponse as R
    if not ctx.authorize(DELETE, R_GROUP, req.group_id):
        return R(error_code=GROUP_DENIED, topics=[])
    P = R.OffsetDeleteResponseTopic.OffsetDeleteResponsePartition
    return _refuse(req, "topics", _topic_codes(ctx, READ, (t.name for t in req.topics)),
                   lambda t, c: R.OffsetDeleteResponseTopic(name=t.name, partitions=[
                       P(partition_index=p.partition_index, error_code=c) for p in t.partitions]))


def _describe_groups(ctx, req):
    from kbroker.wire.generated.describe_groups_response import DescribeGroupsResponse as R
    bad = {g for g in req.groups if not ctx.authorize(DESCRIBE, R_GROUP, g)}
    errs = [R.DescribedGroup(error_code=GROUP_DENIED, group_id=g, group_state="", protocol_type="", protocol_data="",
                             members=[], authorized_operations=OPS_OMITTED) for g in dict.fromkeys(req.groups) if g in bad]
    req.groups = [g for g in req.groups if g not in bad]
    return _described_groups(ctx, ctx.api_version >= 3 and req.include_authorized_operations, errs)


def _described_groups(ctx, include_ops: bool, errs):
    """post() of DescribeGroups and ConsumerGroupDescribe: the principal's operations on each
    described group (when asked), then the refused groups' entries."""
    def post(resp):
        if include_ops:
            for g in resp.groups:
                if g.error_code == 0:
                    g.authorized_operations = ops_bitmask(ctx, R_GROUP, g.group_id, GROUP_OPS)
        resp.groups = list(resp.groups) + errs
        return resp
    return post


def _list_groups(ctx, req):
    if _cluster(ctx, DESCRIBE):
        return None

    def post(resp):
        ok = ctx.authorized(DESCRIBE, R_GROUP, [g.group_id for g in resp.groups])
        resp.groups = [g for g in resp.groups if g.group_id in ok]
        return resp
    return post


def _delete_groups(ctx, req):
    from kbroker.wire.generated.delete_groups_response import DeleteGroupsResponse as R
    bad = {g for g in req.groups_names if not ctx.authorize(DELETE, R_GROUP, g)}
    if not bad:
        return None
    errs = [R.DeletableGroupResult(group_id=g, error_code=GROUP_DENIED) for g in dict.fromkeys(req.groups_names) if g in bad]
    req.groups_names = [g for g in req.groups_names if g not in bad]
    return _extend("results")(errs)


def _consumer_group_heartbeat(ctx, req):
    from kbroker.wire.generated.consumer_group_heartbeat_response import ConsumerGroupHeartbeatResponse as R
    if not ctx.authorize(READ, R_GROUP, req.group_id):
        return R(error_code=GROUP_DENIED, error_message=None)
    if req.subscribed_topic_names:
        bad = _denied_topics(ctx, DESCRIBE, req.subscribed_topic_names)
        if bad:
            return R(error_code=TOPIC_DENIED, error_message=f"The group member is not authorized to describe topics {sorted(bad)}")
    return None


def _consumer_group_describe(ctx, req):
    from kbroker.wire.generated.consumer_group_describe_response import ConsumerGroupDescribeResponse as R
    bad = {g for g in req.group_ids if not ctx.authorize(DESCRIBE, R_GROUP, g)}
    errs = [R.DescribedGroup(error_code=GROUP_DENIED, error_message=None, group_id=g, members=[])
            for g in dict.fromkeys(req.group_ids) if g in bad]
    req.group_ids = [g for g in req.group_ids if g not in bad]
    return _described_groups(ctx, req.include_authorized_operations, errs)


# -- coordinators, producers, transactions ----------------------------------------------------

def _find_coordinator(ctx, req):
    from kbroker.wire.generated.find_coordinator_response import FindCoordinatorResponse as R

    def code(key, key_type) -> int:
        if key_type == 1:
            return 0 if ctx.authorize(DESCRIBE, R_TRANSACTIONAL_ID, key) else TXN_DENIED
        return 0 if ctx.authorize(DESCRIBE, R_GROUP, key) else GROUP_DENIED
    if ctx.api_version < 4:
        c = code(req.key, req.key_type)
        return R(error_code=c, error_message=None, node_id=-1, host="", port=-1) if c else None
    codes = {k: code(k, req.key_type) for k in req.coordinator_keys}
    errs = [R.Coordinator(key=k, node_id=-1, host="", port=-1, error_code=c, error_message=None)
            for k, c in codes.items() if c]
    if not errs:
        return None
    req.coordinator_keys = [k for k in req.coordinator_keys if not codes[k]]
    return _extend("coordinators")(errs)


def _init_producer_id(ctx, req):
    from kbroker.wire.generated.init_producer_id_response import InitProducerIdResponse as R
    tid = req.transactional_id
    if tid is not None:
        ok, code = ctx.authorize(WRITE, R_TRANSACTIONAL_ID, tid), TXN_DENIED
    else:   # idempotent producer: IDEMPOTENT_WRITE on the cluster or WRITE on any topic (KIP-679)
        ok, code = _cluster(ctx, IDEMPOTENT_WRITE) or ctx.authorize_any(WRITE, R_TOPIC), CLUSTER_DENIED
    return None if ok else R(error_code=code, producer_id=-1, producer_epoch=-1)


def _add_partitions_to_txn(ctx, req):
    from kbroker.wire.generated.add_partitions_to_txn_response import AddPartitionsToTxnResponse as R
    if ctx.api_version >= 4:    # broker-to-broker verification batches
        return None if _cluster(ctx, CLUSTER_ACTION) else R(error_code=CLUSTER_DENIED, results_by_transaction=[])
    topics = req.v3_and_below_topics
    if not ctx.authorize(WRITE, R_TRANSACTIONAL_ID, req.v3_and_below_transactional_id):
        codes = {t.name: TXN_DENIED for t in topics}
    else:
        bad = _denied_topics(ctx, WRITE, (t.name for t in topics))
        if not bad:
            return None
        codes = {t.name: TOPIC_DENIED if t.name in bad else Errors.OPERATION_NOT_ATTEMPTED for t in topics}
    T = R.AddPartitionsToTxnTopicResult
    return R(error_code=0, results_by_topic_v3_and_below=[T(name=t.name, results_by_partition=[
        R.AddPartitionsToTxnPartitionResult(partition_index=p, partition_error_code=codes[t.name]) for p in t.partitions])
        for t in topics])


def _add_offsets_to_txn(ctx, req):
    from kbroker.wire.generated.add_offsets_to_txn_response import AddOffsetsToTxnResponse as R
    if not ctx.authorize(WRITE, R_TRANSACTIONAL_ID, req.transactional_id):
        return R(error_code=TXN_DENIED)
    if not ctx.authorize(READ, R_GROUP, req.group_id):
        return R(error_code=GROUP_DENIED)
    return None


def _end_txn(ctx, req):
    from kbroker.wire.generated.end_txn_response import EndTxnResponse as R
    if ctx.authorize(WRITE, R_TRANSACTIONAL_ID, req.transactional_id):
        return None
    return R(error_code=TXN_DENIED, producer_id=-1, producer_epoch=-1)


def _txn_offset_commit(ctx, req):
    from kbroker.wire.generated.txn_offset_commit_response import TxnOffsetCommitResponse as R
    if not ctx.authorize(WRITE, R_TRANSACTIONAL_ID, req.transactional_id):
        bad = {t.name: TXN_DENIED for t in req.topics}
    elif not ctx.authorize(READ, R_GROUP, req.group_id):
        bad = {t.name: GROUP_DENIED for t in req.topics}
    else:
        bad = {n: TOPIC_DENIED for n in _denied_topics(ctx, READ, (t.name for t in req.topics))}
    if not bad:
        return None
    T = R.TxnOffsetCommitResponseTopic
    errs = [T(name=t.name, partitions=[T.TxnOffsetCommitResponsePartition(partition_index=p.partition_index,
                                                                          error_code=bad[t.name]) for p in t.partitions])
            for t in req.topics if t.name in bad]
    if any(c != TOPIC_DENIED for c in bad.values()):
        return R(topics=errs)
    req.topics = [t for t in req.topics if t.name not in bad]
    return _extend("topics")(errs)


def _write_txn_markers(ctx, req):
    from kbroker.wire.generated.write_txn_markers_response import WriteTxnMarkersResponse as R
    if _cluster(ctx, CLUSTER_ACTION):
        return None
    M = R.WritableTxnMarkerResult
    return R(markers=[M(producer_id=m.producer_id, topics=[M.WritableTxnMarkerTopicResult(name=t.name, partitions=[
        M.WritableTxnMarkerTopicResult.WritableTxnMarkerPartitionResult(partition_index=i, error_code=CLUSTER_DENIED)
        for i in t.partition_indexes]) for t in m.topics]) for m in req.markers])


def _describe_transactions(ctx, req):
    from kbroker.wire.generated.describe_transactions_response import DescribeTransactionsResponse as R
    bad = {t for t in req.transactional_ids if not ctx.authorize(DESCRIBE, R_TRANSACTIONAL_ID, t)}
    errs = [R.TransactionState(error_code=TXN_DENIED, transactional_id=t, transaction_state="", transaction_timeout_ms=0,
                               transaction_start_time_ms=-1, producer_id=-1, producer_epoch=-1, topics=[])
            for t in dict.fromkeys(req.transactional_ids) if t in bad]
    req.transactional_ids = [t for t in req.transactional_ids if t not in bad]

    def post(resp):
        for s in resp.transaction_states:   # only the partitions of topics the principal may describe
            ok = ctx.authorized(DESCRIBE, R_TOPIC, [t.topic for t in s.topics])
            s.topics = [t for t in s.topics if t.topic in ok]
        resp.transaction_states = list(resp.transaction_states) + errs
        return resp
    return post


def _list_transactions(ctx, req):
    def post(resp):
        ok = ctx.authorized(DESCRIBE, R_TRANSACTIONAL_ID, [s.transactional_id for s in resp.transaction_states])
        resp.transaction_states = [s for s in resp.transaction_states if s.transactional_id in ok]
        return resp
    return post


def _update_features(ctx, req):
    from kbroker.wire.generated.update_features_response import UpdateFeaturesResponse as R
    if _cluster(ctx, ALTER):
        return None
    msg = "The principal is not authorized to ALTER the cluster"
    return R(error_code=CLUSTER_DENIED, error_message=msg, results=[
        R.UpdatableFeatureResult(feature=u.feature, error_code=CLUSTER_DENIED, error_message=msg)
        for u in req.feature_updates])


def _partition_admin(ctx, req):
    """ElectLeaders / AlterPartitionReassignments need ALTER on the cluster,
    ListPartitionReassignments DESCRIBE (kbroker.kraft.partition_admin)."""
    from kbroker.wire import registry as wire
    key = ctx.api_key
    if _cluster(ctx, DESCRIBE if key == 46 else ALTER):
        return None
    R = wire.RESPONSES[key]
    if key == 43:
        P = R.ReplicaElectionResult
        return R(error_code=CLUSTER_DENIED, replica_election_results=[
            P(topic=t.topic, partition_result=[P.PartitionResult(partition_id=p, error_code=CLUSTER_DENIED)
                                               for p in t.partitions]) for t in req.topic_partitions or []])
    return R(error_code=CLUSTER_DENIED)


FILTERS = {
    0: _produce,
    1: _fetch,
    2: _list_offsets,
    3: _metadata,
    8: _offset_commit,
    9: _offset_fetch,
    10: _find_coordinator,
    11: _group_error(_join_denied),
    12: _group_error(_heartbeat_denied),
    13: _group_error(_leave_denied),
    14: _group_error(_sync_denied),
    15: _describe_groups,
    16: _list_groups,
    19: _create_topics,
    20: _delete_topics,
    21: _delete_records,
    22: _init_producer_id,
    23: _offset_for_leader_epoch,
    24: _add_partitions_to_txn,
    25: _add_offsets_to_txn,
    26: _end_txn,
    27: _write_txn_markers,
    28: _txn_offset_commit,
    32: _describe_configs,
    33: _alter_configs("kbroker.wire.generated.alter_configs_response", "AlterConfigsResponse"),
    35: _describe_log_dirs,
    37: _create_partitions,
    42: _delete_groups,
    44: _alter_configs("kbroker.wire.generated.incremental_alter_configs_response", "IncrementalAlterConfigsResponse"),
    47: _offset_delete,
    57: _update_features,
    60: _describe_cluster,
    61: _describe_producers,
    65: _describe_transactions,
    66: _list_transactions,
    68: _consumer_group_heartbeat,
    69: _consumer_group_describe,
    75: _describe_topic_partitions,
    43: _partition_admin, 45: _partition_admin, 46: _partition_admin,
}

# What each API needs, for the ACL matrix test and the docs: api key -> [(operation, resource)]
# (the first that the request names; Kafka's "Operations and Resources on Protocols" table).
REQUIRED = {
    0: [(WRITE, R_TOPIC), (WRITE, R_TRANSACTIONAL_ID)], 1: [(READ, R_TOPIC), (CLUSTER_ACTION, R_CLUSTER)],
    2: [(DESCRIBE, R_TOPIC)], 3: [(DESCRIBE, R_TOPIC), (CREATE, R_CLUSTER)], 8: [(READ, R_GROUP), (READ, R_TOPIC)],
    9: [(DESCRIBE, R_GROUP), (DESCRIBE, R_TOPIC)], 10: [(DESCRIBE, R_GROUP), (DESCRIBE, R_TRANSACTIONAL_ID)],
    11: [(READ, R_GROUP)], 12: [(READ, R_GROUP)], 13: [(READ, R_GROUP)], 14: [(READ, R_GROUP)],
    15: [(DESCRIBE, R_GROUP)], 16: [(DESCRIBE, R_CLUSTER), (DESCRIBE, R_GROUP)],
    19: [(CREATE, R_CLUSTER), (CREATE, R_TOPIC)], 20: [(DELETE, R_TOPIC)], 21: [(DELETE, R_TOPIC)],
    22: [(WRITE, R_TRANSACTIONAL_ID), (IDEMPOTENT_WRITE, R_CLUSTER)], 23: [(DESCRIBE, R_TOPIC), (CLUSTER_ACTION, R_CLUSTER)],
    24: [(WRITE, R_TRANSACTIONAL_ID), (WRITE, R_TOPIC)], 25: [(WRITE, R_TRANSACTIONAL_ID), (READ, R_GROUP)],
    26: [(WRITE, R_TRANSACTIONAL_ID)], 27: [(CLUSTER_ACTION, R_CLUSTER)],
    28: [(WRITE, R_TRANSACTIONAL_ID), (READ, R_GROUP), (READ, R_TOPIC)],
    32: [(DESCRIBE_CONFIGS, R_TOPIC), (DESCRIBE_CONFIGS, R_CLUSTER)], 33: [(ALTER_CONFIGS, R_TOPIC), (ALTER_CONFIGS, R_CLUSTER)],
    35: [(DESCRIBE, R_CLUSTER)], 37: [(ALTER, R_TOPIC)], 42: [(DELETE, R_GROUP)],
    44: [(ALTER_CONFIGS, R_TOPIC), (ALTER_CONFIGS, R_CLUSTER)], 47: [(DELETE, R_GROUP), (READ, R_TOPIC)],
    61: [(READ, R_TOPIC)], 65: [(DESCRIBE, R_TRANSACTIONAL_ID)], 66: [(DESCRIBE, R_TRANSACTIONAL_ID)],
    68: [(READ, R_GROUP), (DESCRIBE, R_TOPIC)], 69: [(DESCRIBE, R_GROUP)], 75: [(DESCRIBE, R_TOPIC)],
    29: [(DESCRIBE, R_CLUSTER)], 30: [(ALTER, R_CLUSTER)], 31: [(ALTER, R_CLUSTER)],
    50: [(DESCRIBE, R_CLUSTER)], 51: [(ALTER, R_CLUSTER)], 57: [(ALTER, R_CLUSTER)],
    43: [(ALTER, R_CLUSTER)], 45: [(ALTER, R_CLUSTER)], 46: [(DESCRIBE, R_CLUSTER)],
}
