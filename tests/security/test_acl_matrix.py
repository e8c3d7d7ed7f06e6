"""The ACL matrix: for every API kbroker serves that needs an ACL, a principal without the
ACLs Kafka's "Operations and Resources on Protocols" table requires gets Kafka's error code,
and with them gets past authorization. Prefixed and DENY rules on top. Runs the real
dispatcher path (authorizer + handlers) of a real broker started in-process."""
from __future__ import annotations

import asyncio
import inspect

import pytest

from kbroker.handlers.context import RequestContext
from kbroker.security import acls as A
from kbroker.security.authz_filters import FILTERS, REQUIRED, authorized_handle
from kbroker.security.controller_ops import create_acls, delete_acls
from kbroker.wire import registry as wire
from kbroker.wire.errors import Errors
from kbroker.wire.primitives import Writer
from kbroker.wire.records import BatchBuilder
from tests.offline_server import start_offline, stop_offline

AUTH_ERRORS = {Errors.TOPIC_AUTHORIZATION_FAILED, Errors.GROUP_AUTHORIZATION_FAILED,
               Errors.CLUSTER_AUTHORIZATION_FAILED, Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
ALICE = "User:alice"
T, G, TX = "orders", "grp", "tx1"


class Conn:
    def __init__(self, principal):
        self.state = {"principal": principal}
        self.peer = "10.1.2.3:5555"
        self.listener_name = "PLAINTEXT"


class Harness:
    def __init__(self, server, loop):
        self.server, self.loop = server, loop

    def call(self, api_key, version, request, principal=ALICE):
        spec = self.server.api_specs[api_key]
        # a real decode of what the request encodes to, as the dispatcher would see it
        request = spec.request_cls.decode(request.encode(version), version)
        ctx = RequestContext(self.server, Conn(principal), api_key, version, 1, "test",
                             self.server.clock.now_ms(), "PLAINTEXT")
        out = authorized_handle(spec, ctx, request)
        if inspect.isawaitable(out):
            out = self.loop.run_until_complete(out)
        if out is not None:
            out.encode_into(Writer(), version)
        return out

    def grant(self, *acls):
        self.loop.run_until_complete(self.server.controller.submit(create_acls(list(acls))))

    def revoke_all(self):
        self.loop.run_until_complete(self.server.controller.submit(delete_acls([A.AclFilter()])))


@pytest.fixture(scope="module")
def h(tmp_path_factory):
    server = start_offline(tmp_path_factory.mktemp("acl") / "data",
                           "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                           "super.users=User:admin")
    harness = Harness(server, server.loop)
    req = _req(19, topics=[dict(name=n, num_partitions=1, replication_factor=1, assignments=[], configs=[])
                           for n in (T, "orders-eu", "logs")])
    assert all(t.error_code == 0 for t in harness.call(19, 7, req, principal="User:admin").topics)
    yield harness
    stop_offline(server)


def _req(api_key, **fields):
    """A request object from plain dicts (nested structs by the schema's field classes)."""
    cls = wire.REQUESTS[api_key]
    return _build(cls, fields)


def _build(cls, fields):
    kw = {}
    nested = {k: v for k, v in vars(cls).items() if inspect.isclass(v) and hasattr(v, "encode")}
    for k, v in fields.items():
        if isinstance(v, list) and v and isinstance(v[0], dict):
            sub = _field_class(nested, k)
            v = [_build(sub, x) for x in v]
        elif isinstance(v, dict):
            v = _build(_field_class(nested, k), v)
        kw[k] = v
    return cls(**kw)


def _field_class(nested, field):
    probe = {k: c for k, c in nested.items()}
    # the schema class whose instances the generated __init__ default or encoder expects:
    # match by trying each nested class (they are few) on the field name's words
    words = field.removeprefix("v3_and_below_").replace("_", "").lower()
    for k, c in probe.items():
        if k.lower().rstrip("s") in words or words.rstrip("s") in k.lower():
            return c
    if len(probe) == 1:
        return next(iter(probe.values()))
    raise KeyError(f"no nested class for {field}: {list(probe)}")


def _batch():
    b = BatchBuilder()
    b.append(key=b"k", value=b"v", timestamp=1_700_000_000_000)
    return b.build()


def codes(obj) -> set[int]:
    """Every error code anywhere in a response."""
    out = set()
    if isinstance(obj, list):
        for x in obj:
            out |= codes(x)
        return out
    if not hasattr(obj, "encode_into"):
        return out
    names = [n for c in type(obj).__mro__ for n in getattr(c, "__slots__", ())]
    for k in names:
        v = getattr(obj, k, None)
        if k.endswith("error_code") and isinstance(v, int):
            out.add(v)
        elif isinstance(v, list) or hasattr(v, "encode_into"):
            out |= codes(v)
    return out


def acl(op, rtype, name, perm=A.ALLOW, pattern=A.P_LITERAL, principal=ALICE, host="*"):
    return A.Acl(rtype, name, pattern, principal, host, op, perm)


TOPIC_ACL = {"name": T}
# (api key, version, request fields, ACLs that make it pass, the error without them)
CASES = [
    (0, 9, dict(acks=-1, timeout_ms=1000, topic_data=[dict(name=T, partition_data=[dict(index=0, records=_batch())])]),
     [acl(A.WRITE, A.R_TOPIC, T)], Errors.TOPIC_AUTHORIZATION_FAILED),
    (0, 9, dict(transactional_id=TX, acks=-1, timeout_ms=1000,
                topic_data=[dict(name=T, partition_data=[dict(index=0, records=_batch())])]),
     [acl(A.WRITE, A.R_TOPIC, T), acl(A.WRITE, A.R_TRANSACTIONAL_ID, TX)], Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
    (1, 12, dict(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, session_id=0, session_epoch=-1,
                 topics=[dict(topic=T, partitions=[dict(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])],
                 forgotten_topics_data=[]),
     [acl(A.READ, A.R_TOPIC, T)], Errors.TOPIC_AUTHORIZATION_FAILED),
    (1, 12, dict(replica_id=2, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, session_id=0, session_epoch=-1,
                 topics=[dict(topic=T, partitions=[dict(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])],
                 forgotten_topics_data=[]),
     [acl(A.CLUSTER_ACTION, A.R_CLUSTER, A.CLUSTER_NAME)], Errors.CLUSTER_AUTHORIZATION_FAILED),
    (2, 7, dict(replica_id=-1, topics=[dict(name=T, partitions=[dict(partition_index=0, timestamp=-1)])]),
     [acl(A.DESCRIBE, A.R_TOPIC, T)], Errors.TOPIC_AUTHORIZATION_FAILED),
    (3, 12, dict(topics=[dict(name=T)], allow_auto_topic_creation=False),
     [acl(A.DESCRIBE, A.R_TOPIC, T)], Errors.TOPIC_AUTHORIZATION_FAILED),
    (3, 12, dict(topics=[dict(name="brand-new")], allow_auto_topic_creation=True),
     [acl(A.DESCRIBE, A.R_TOPIC, "brand-new"), acl(A.CREATE, A.R_TOPIC, "brand-new")], Errors.TOPIC_AUTHORIZATION_FAILED),
    (8, 8, dict(group_id=G, generation_id_or_member_epoch=-1, member_id="", topics=[
        dict(name=T, partitions=[dict(partition_index=0, committed_offset=1)])]),
     [acl(A.READ, A.R_GROUP, G), acl(A.READ, A.R_TOPIC, T)], Errors.GROUP_AUTHORIZATION_FAILED),
    (9, 7, dict(group_id=G, topics=[dict(name=T, partition_indexes=[0])]),
     [acl(A.DESCRIBE, A.R_GROUP, G), acl(A.DESCRIBE, A.R_TOPIC, T)], Errors.GROUP_AUTHORIZATION_FAILED),
    (9, 8, dict(groups=[dict(group_id=G, topics=[dict(name=T, partition_indexes=[0])])]),
     [acl(A.DESCRIBE, A.R_GROUP, G), acl(A.DESCRIBE, A.R_TOPIC, T)], Errors.GROUP_AUTHORIZATION_FAILED),
    (10, 3, dict(key=G, key_type=0), [acl(A.DESCRIBE, A.R_GROUP, G)], Errors.GROUP_AUTHORIZATION_FAILED),
    (10, 4, dict(key_type=1, coordinator_keys=[TX]), [acl(A.DESCRIBE, A.R_TRANSACTIONAL_ID, TX)],
     Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
    (11, 7, dict(group_id=G, session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="", protocol_type="consumer",
                 protocols=[dict(name="range", metadata=b"")]), [acl(A.READ, A.R_GROUP, G)], Errors.GROUP_AUTHORIZATION_FAILED),
    (12, 4, dict(group_id=G, generation_id=1, member_id="m"), [acl(A.READ, A.R_GROUP, G)], Errors.GROUP_AUTHORIZATION_FAILED),
    (13, 4, dict(group_id=G, members=[dict(member_id="m")]), [acl(A.READ, A.R_GROUP, G)], Errors.GROUP_AUTHORIZATION_FAILED),
    (14, 5, dict(group_id=G, generation_id=1, member_id="m", protocol_type="consumer", protocol_name="range", assignments=[]),
     [acl(A.READ, A.R_GROUP, G)], Errors.GROUP_AUTHORIZATION_FAILED),
    (15, 5, dict(groups=[G]), [acl(A.DESCRIBE, A.R_GROUP, G)], Errors.GROUP_AUTHORIZATION_FAILED),
    (19, 7, dict(topics=[dict(name="made", num_partitions=1, replication_factor=1, assignments=[], configs=[])]),
     [acl(A.CREATE, A.R_TOPIC, "made"), acl(A.DESCRIBE_CONFIGS, A.R_TOPIC, "made")], Errors.TOPIC_AUTHORIZATION_FAILED),
    (20, 6, dict(topics=[dict(name="logs")]), [acl(A.DELETE, A.R_TOPIC, "logs")], Errors.TOPIC_AUTHORIZATION_FAILED),
    (21, 2, dict(topics=[dict(name=T, partitions=[dict(partition_index=0, offset=0)])], timeout_ms=1000),
     [acl(A.DELETE, A.R_TOPIC, T)], Errors.TOPIC_AUTHORIZATION_FAILED),
    (22, 4, dict(transactional_id=None, transaction_timeout_ms=60000), [acl(A.IDEMPOTENT_WRITE, A.R_CLUSTER, A.CLUSTER_NAME)],
     Errors.CLUSTER_AUTHORIZATION_FAILED),
    (22, 4, dict(transactional_id=None, transaction_timeout_ms=60000), [acl(A.WRITE, A.R_TOPIC, T)],
     Errors.CLUSTER_AUTHORIZATION_FAILED),
    (22, 4, dict(transactional_id=TX, transaction_timeout_ms=60000), [acl(A.WRITE, A.R_TRANSACTIONAL_ID, TX)],
     Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
    (23, 4, dict(replica_id=-1, topics=[dict(topic=T, partitions=[dict(partition=0, current_leader_epoch=-1, leader_epoch=0)])]),
     [acl(A.DESCRIBE, A.R_TOPIC, T)], Errors.TOPIC_AUTHORIZATION_FAILED),
    (24, 3, dict(v3_and_below_transactional_id=TX, v3_and_below_producer_id=1, v3_and_below_producer_epoch=0,
                 v3_and_below_topics=[dict(name=T, partitions=[0])]),
     [acl(A.WRITE, A.R_TRANSACTIONAL_ID, TX), acl(A.WRITE, A.R_TOPIC, T)], Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
    (25, 3, dict(transactional_id=TX, producer_id=1, producer_epoch=0, group_id=G),
     [acl(A.WRITE, A.R_TRANSACTIONAL_ID, TX), acl(A.READ, A.R_GROUP, G)], Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
    (26, 3, dict(transactional_id=TX, producer_id=1, producer_epoch=0, committed=True),
     [acl(A.WRITE, A.R_TRANSACTIONAL_ID, TX)], Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
    (27, 1, dict(markers=[dict(producer_id=1, producer_epoch=0, transaction_result=True, coordinator_epoch=0,
                               topics=[dict(name=T, partition_indexes=[0])])]),
     [acl(A.CLUSTER_ACTION, A.R_CLUSTER, A.CLUSTER_NAME)], Errors.CLUSTER_AUTHORIZATION_FAILED),
    (28, 3, dict(transactional_id=TX, group_id=G, producer_id=1, producer_epoch=0, generation_id=-1, member_id="",
                 topics=[dict(name=T, partitions=[dict(partition_index=0, committed_offset=1)])]),
     [acl(A.WRITE, A.R_TRANSACTIONAL_ID, TX), acl(A.READ, A.R_GROUP, G), acl(A.READ, A.R_TOPIC, T)],
     Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
    (32, 4, dict(resources=[dict(resource_type=2, resource_name=T, configuration_keys=None)]),
     [acl(A.DESCRIBE_CONFIGS, A.R_TOPIC, T)], Errors.TOPIC_AUTHORIZATION_FAILED),
    (32, 4, dict(resources=[dict(resource_type=4, resource_name="1", configuration_keys=None)]),
     [acl(A.DESCRIBE_CONFIGS, A.R_CLUSTER, A.CLUSTER_NAME)], Errors.CLUSTER_AUTHORIZATION_FAILED),
    (33, 2, dict(resources=[dict(resource_type=2, resource_name=T, configs=[dict(name="retention.ms", value="100000")])]),
     [acl(A.ALTER_CONFIGS, A.R_TOPIC, T)], Errors.TOPIC_AUTHORIZATION_FAILED),
    (35, 4, dict(topics=None), [acl(A.DESCRIBE, A.R_CLUSTER, A.CLUSTER_NAME)], Errors.CLUSTER_AUTHORIZATION_FAILED),
    (37, 3, dict(topics=[dict(name=T, count=2, assignments=None)], timeout_ms=1000),
     [acl(A.ALTER, A.R_TOPIC, T)], Errors.TOPIC_AUTHORIZATION_FAILED),
    (42, 2, dict(groups_names=[G]), [acl(A.DELETE, A.R_GROUP, G)], Errors.GROUP_AUTHORIZATION_FAILED),
    (44, 1, dict(resources=[dict(resource_type=4, resource_name="1", configs=[
        dict(name="log.retention.ms", config_operation=0, value="100000")])]),
     [acl(A.ALTER_CONFIGS, A.R_CLUSTER, A.CLUSTER_NAME)], Errors.CLUSTER_AUTHORIZATION_FAILED),
    (47, 0, dict(group_id=G, topics=[dict(name=T, partitions=[dict(partition_index=0)])]),
     [acl(A.DELETE, A.R_GROUP, G), acl(A.READ, A.R_TOPIC, T)], Errors.GROUP_AUTHORIZATION_FAILED),
    (61, 0, dict(topics=[dict(name=T, partition_indexes=[0])]), [acl(A.READ, A.R_TOPIC, T)], Errors.TOPIC_AUTHORIZATION_FAILED),
    (65, 0, dict(transactional_ids=[TX]), [acl(A.DESCRIBE, A.R_TRANSACTIONAL_ID, TX)],
     Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
    (68, 0, dict(group_id=G, member_id="", member_epoch=0, rebalance_timeout_ms=10000, subscribed_topic_names=[T],
                 server_assignor=None, topic_partitions=[]),
     [acl(A.READ, A.R_GROUP, G), acl(A.DESCRIBE, A.R_TOPIC, T)], Errors.GROUP_AUTHORIZATION_FAILED),
    (69, 0, dict(group_ids=[G]), [acl(A.DESCRIBE, A.R_GROUP, G)], Errors.GROUP_AUTHORIZATION_FAILED),
    (75, 0, dict(topics=[dict(name=T)], response_partition_limit=100), [acl(A.DESCRIBE, A.R_TOPIC, T)],
     Errors.TOPIC_AUTHORIZATION_FAILED),
    (29, 3, dict(resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1, principal_filter=None,
                 host_filter=None, operation=1, permission_type=1),
     [acl(A.DESCRIBE, A.R_CLUSTER, A.CLUSTER_NAME)], Errors.CLUSTER_AUTHORIZATION_FAILED),
    (50, 0, dict(users=None), [acl(A.DESCRIBE, A.R_CLUSTER, A.CLUSTER_NAME)], Errors.CLUSTER_AUTHORIZATION_FAILED),
    (48, 1, dict(components=[], strict=False), [acl(A.DESCRIBE_CONFIGS, A.R_CLUSTER, A.CLUSTER_NAME)],
     Errors.CLUSTER_AUTHORIZATION_FAILED),
    (49, 1, dict(entries=[dict(entity=[dict(entity_type="user", entity_name="bob")],
                               ops=[dict(key="producer_byte_rate", value=1024.0, remove=False)])], validate_only=True),
     [acl(A.ALTER_CONFIGS, A.R_CLUSTER, A.CLUSTER_NAME)], Errors.CLUSTER_AUTHORIZATION_FAILED),
    (51, 0, dict(deletions=[dict(name="bob", mechanism=1)], upsertions=[]),
     [acl(A.ALTER, A.R_CLUSTER, A.CLUSTER_NAME)], Errors.CLUSTER_AUTHORIZATION_FAILED),
    (57, 1, dict(timeout_ms=1000, validate_only=True, feature_updates=[
        dict(feature="metadata.version", max_version_level=21, upgrade_type=1)]),
     [acl(A.ALTER, A.R_CLUSTER, A.CLUSTER_NAME)], Errors.CLUSTER_AUTHORIZATION_FAILED),
    (43, 2, dict(election_type=0, topic_partitions=[dict(topic=T, partitions=[0])], timeout_ms=1000),
     [acl(A.ALTER, A.R_CLUSTER, A.CLUSTER_NAME)], Errors.CLUSTER_AUTHORIZATION_FAILED),
    (45, 0, dict(timeout_ms=1000, topics=[dict(name=T, partitions=[dict(partition_index=0, replicas=None)])]),
     [acl(A.ALTER, A.R_CLUSTER, A.CLUSTER_NAME)], Errors.CLUSTER_AUTHORIZATION_FAILED),
    (46, 0, dict(timeout_ms=1000, topics=None), [acl(A.DESCRIBE, A.R_CLUSTER, A.CLUSTER_NAME)],
     Errors.CLUSTER_AUTHORIZATION_FAILED),
]


def _id(case):
    return f"{wire.api_name(case[0])}-v{case[1]}-{'+'.join(A.OP_NAMES[a.operation] for a in case[3])}"


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_matrix(h, case):
    api, version, fields, grants, denied_code = case
    h.revoke_all()
    out = h.call(api, version, _req(api, **fields))
    assert denied_code in codes(out), f"without ACLs: {out}"
    h.grant(*grants)
    out = h.call(api, version, _req(api, **fields))
    assert not (codes(out) & AUTH_ERRORS), f"with {grants}: {out}"
    # the super user never needs an ACL
    h.revoke_all()
    assert not (codes(h.call(api, version, _req(api, **fields), principal="User:admin")) & AUTH_ERRORS)


def test_every_api_with_a_filter_is_in_the_matrix():
    covered = {c[0] for c in CASES} | {16, 60, 66, 30, 31}   # listing APIs and ACL APIs: tests below
    needs_acl = set(FILTERS) | {29, 30, 31, 50, 51}
    assert needs_acl - covered == set()
    assert set(REQUIRED) >= needs_acl - {60}


def test_metadata_hides_topics_without_describe(h):
    h.revoke_all()
    md = h.call(3, 12, _req(3, topics=None, allow_auto_topic_creation=False))
    assert md.topics == []
    h.grant(acl(A.DESCRIBE, A.R_TOPIC, "orders", pattern=A.P_PREFIXED))
    md = h.call(3, 12, _req(3, topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=True))
    assert sorted(t.name for t in md.topics) == ["orders", "orders-eu"]
    assert all(t.topic_authorized_operations == 1 << A.DESCRIBE for t in md.topics)
    # ListGroups and ListTransactions filter the same way (no DESCRIBE on the cluster)
    assert h.call(16, 4, _req(16, states_filter=[])).groups == []


def test_prefixed_and_deny_rules_on_produce(h):
    h.revoke_all()
    h.grant(acl(A.WRITE, A.R_TOPIC, "orders", pattern=A.P_PREFIXED),
            acl(A.WRITE, A.R_TOPIC, "orders-eu", perm=A.DENY))
    req = _req(0, acks=-1, timeout_ms=1000, topic_data=[
        dict(name=n, partition_data=[dict(index=0, records=_batch())]) for n in (T, "orders-eu", "logs")])
    out = h.call(0, 9, req)
    got = {t.name: t.partition_responses[0].error_code for t in out.responses}
    assert got == {T: 0, "orders-eu": Errors.TOPIC_AUTHORIZATION_FAILED, "logs": Errors.TOPIC_AUTHORIZATION_FAILED}


def test_host_rule(h):
    h.revoke_all()
    h.grant(acl(A.DESCRIBE, A.R_TOPIC, T, host="10.9.9.9"))
    req = _req(2, replica_id=-1, topics=[dict(name=T, partitions=[dict(partition_index=0, timestamp=-1)])])
    assert Errors.TOPIC_AUTHORIZATION_FAILED in codes(h.call(2, 7, req))
    h.grant(acl(A.DESCRIBE, A.R_TOPIC, T, host="10.1.2.3"))
    assert not codes(h.call(2, 7, req)) & AUTH_ERRORS


def test_acl_apis(h):
    h.revoke_all()
    C = wire.REQUESTS[30].AclCreation
    creation = C(resource_type=A.R_TOPIC, resource_name="x-", resource_pattern_type=A.P_PREFIXED, principal="User:bob",
                 host="*", operation=A.READ, permission_type=A.ALLOW)
    assert h.call(30, 3, wire.REQUESTS[30](creations=[creation])).results[0].error_code == Errors.CLUSTER_AUTHORIZATION_FAILED
    out = h.call(30, 3, wire.REQUESTS[30](creations=[creation, C(resource_type=A.R_CLUSTER, resource_name="bad",
                                                                 resource_pattern_type=3, principal="User:bob", host="*",
                                                                 operation=A.ALTER, permission_type=A.ALLOW)]),
                 principal="User:admin")
    assert [r.error_code for r in out.results] == [0, Errors.INVALID_REQUEST]
    d = h.call(29, 3, _req(29, resource_type_filter=A.R_TOPIC, resource_name_filter="x-y", pattern_type_filter=A.P_MATCH,
                           principal_filter=None, host_filter=None, operation=1, permission_type=1), principal="User:admin")
    assert [(r.resource_name, r.pattern_type, r.acls[0].principal) for r in d.resources] == [("x-", A.P_PREFIXED, "User:bob")]
    F = wire.REQUESTS[31].DeleteAclsFilter
    out = h.call(31, 3, wire.REQUESTS[31](filters=[F(resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
                                                     principal_filter="User:bob", host_filter=None, operation=1,
                                                     permission_type=1)]), principal="User:admin")
    assert [m.resource_name for m in out.filter_results[0].matching_acls] == ["x-"]
    assert h.server.image.security.acls.by_id == {}


def test_create_topics_hides_configs_without_describe_configs(h):
    h.revoke_all()
    h.grant(acl(A.CREATE, A.R_CLUSTER, A.CLUSTER_NAME))
    out = h.call(19, 7, _req(19, topics=[dict(name="cfg-hidden", num_partitions=1, replication_factor=1, assignments=[],
                                              configs=[])]))
    r = out.topics[0]
    assert (r.error_code, r.topic_config_error_code, r.configs) == (0, Errors.TOPIC_AUTHORIZATION_FAILED, [])


def test_cluster_and_group_authorized_operations(h):
    h.revoke_all()
    h.grant(acl(A.DESCRIBE, A.R_CLUSTER, A.CLUSTER_NAME), acl(A.ALTER_CONFIGS, A.R_CLUSTER, A.CLUSTER_NAME))
    out = h.call(60, 1, _req(60, include_cluster_authorized_operations=True, endpoint_type=1))
    assert out.cluster_authorized_operations == (1 << A.DESCRIBE) | (1 << A.ALTER_CONFIGS) | (1 << A.DESCRIBE_CONFIGS)
    # the group exists (a consumer joins it), then both describe APIs answer its operations
    # and refuse the group without DESCRIBE
    _, version, fields, _, _ = next(c for c in CASES if c[0] == 68)
    for _ in range(200):   # COORDINATOR_NOT_AVAILABLE until FindCoordinator has made the offsets topic
        h.call(10, 3, _req(10, key=G, key_type=0), principal="User:admin")
        if h.call(68, version, _req(68, **fields), principal="User:admin").error_code == 0:
            break
        h.loop.run_until_complete(asyncio.sleep(0.05))
    h.grant(acl(A.DESCRIBE, A.R_GROUP, G), acl(A.READ, A.R_GROUP, G))
    for api, version, fields in [(15, 5, dict(groups=[G, "other"])), (69, 0, dict(group_ids=[G, "other"]))]:
        out = h.call(api, version, _req(api, include_authorized_operations=True, **fields))
        got = {g.group_id: (g.error_code, g.authorized_operations) for g in out.groups}
        assert got[G] == (0, (1 << A.READ) | (1 << A.DESCRIBE)), out
        assert got["other"][0] == Errors.GROUP_AUTHORIZATION_FAILED, out


def test_client_quotas_stored_and_described(h):
    def alter(entity, ops, validate_only=False):
        req = _req(49, entries=[dict(entity=[dict(entity_type=t, entity_name=n) for t, n in entity],
                                     ops=[dict(key=k, value=v, remove=r) for k, v, r in ops])], validate_only=validate_only)
        return h.call(49, 1, req, principal="User:admin").entries[0]

    def describe(components, strict=False):
        out = h.call(48, 1, _req(48, components=[dict(entity_type=t, match_type=m, match=x) for t, m, x in components],
                                 strict=strict), principal="User:admin")
        assert out.error_code == 0
        return {tuple((e.entity_type, e.entity_name) for e in x.entity): {v.key: v.value for v in x.values}
                for x in out.entries}
    assert alter([("user", "alice")], [("producer_byte_rate", 1048576, False), ("consumer_byte_rate", 2097152, False)]).error_code == 0
    assert alter([("user", None)], [("producer_byte_rate", 4096, False)]).error_code == 0            # default user
    assert alter([("user", "alice"), ("client-id", "app")], [("request_percentage", 50, False)]).error_code == 0
    assert alter([("user", "bob")], [("producer_byte_rate", 1, False)], validate_only=True).error_code == 0
    assert alter([("user", "x")], [("connection_creation_rate", 5, False)]).error_code == Errors.INVALID_REQUEST
    assert alter([("ip", "1.2.3.4"), ("user", "x")], [("connection_creation_rate", 5, False)]).error_code == Errors.INVALID_REQUEST
    assert alter([("user", "x")], [("producer_byte_rate", -5, False)]).error_code == Errors.INVALID_REQUEST
    assert describe([("user", 0, "alice")], strict=True) == {
        (("user", "alice"),): {"producer_byte_rate": 1048576.0, "consumer_byte_rate": 2097152.0}}
    assert set(describe([("user", 0, "alice")])) == {(("user", "alice"),), (("client-id", "app"), ("user", "alice"))}
    assert describe([("user", 1, None)]) == {(("user", None),): {"producer_byte_rate": 4096.0}}
    assert (("user", "bob"),) not in describe([("user", 2, None)])                                 # validate_only stored nothing
    assert alter([("user", "alice")], [("consumer_byte_rate", 0, True)]).error_code == 0
    assert describe([("user", 0, "alice")], strict=True) == {(("user", "alice"),): {"producer_byte_rate": 1048576.0}}


@pytest.mark.parametrize("api", [2, 21, 23, 37, 61])   # 47: the harness group has no coordinator (15)
def test_refused_topic_answered_beside_the_allowed_one(h, api):
    """A request naming an allowed and a refused topic: the handler answers the allowed one,
    the refused one comes back with TOPIC_AUTHORIZATION_FAILED in the same response."""
    _, version, fields, grants, _ = next(c for c in CASES if c[0] == api)
    entry = fields["topics"][0]
    key = "topic" if "topic" in entry else "name"
    fields = dict(fields, topics=[entry, dict(entry, **{key: "logs"})])
    h.revoke_all()
    h.grant(*grants)
    out = h.call(api, version, _req(api, **fields))
    entries = getattr(out, "results", None) or out.topics
    got = {getattr(e, key): codes(e) for e in entries}
    assert set(got) == {T, "logs"}, out
    assert got["logs"] == {Errors.TOPIC_AUTHORIZATION_FAILED}, out
    assert not got[T] & AUTH_ERRORS, out


def test_controller_listener_is_trusted_by_every_check(h):
    h.revoke_all()
    sec = h.server.security
    ctrl = Conn(ALICE)
    ctrl.listener_name = "CONTROLLER"   # (the harness broker has no controller listener of its own)
    sec.trusted_listeners.add("CONTROLLER")
    try:
        assert sec.authorize(ctrl, A.WRITE, A.R_TOPIC, T) and sec.authorize_any(ctrl, A.WRITE, A.R_TOPIC)
    finally:
        sec.trusted_listeners.discard("CONTROLLER")
    assert not sec.authorize(Conn(ALICE), A.WRITE, A.R_TOPIC, T)
    assert not sec.authorize_any(Conn(ALICE), A.WRITE, A.R_TOPIC)
