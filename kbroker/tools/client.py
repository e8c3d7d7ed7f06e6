"""The tools' client: the calls of ``kbroker.groups.admin_client`` (metadata, groups, offsets)
plus the topic, config, record and produce/fetch calls the tools need, sent through
``kbroker.net.client.KafkaClient`` (the asyncio client the nodes use) on a private event loop,
so a tool reads as plain blocking code.

Why our own protocol code rather than confluent-kafka or kafka-python: those are test
dependencies only, and the tools must work from a plain ``pip install kbroker``; the codec is
already here, generated from Kafka's schemas."""

from __future__ import annotations

import asyncio

from kbroker.groups.admin_client import EARLIEST, LATEST, AdminClient, KafkaError  # noqa: F401
from kbroker.wire.errors import Errors, error_name
from kbroker.net.client import ClientError, KafkaClient
from kbroker.wire.generated.create_partitions_request import CreatePartitionsRequest
from kbroker.wire.generated.create_topics_request import CreateTopicsRequest
from kbroker.wire.generated.delete_records_request import DeleteRecordsRequest
from kbroker.wire.generated.delete_topics_request import DeleteTopicsRequest
from kbroker.wire.generated.describe_configs_request import DescribeConfigsRequest
from kbroker.wire.generated.fetch_request import FetchRequest
from kbroker.wire.generated.incremental_alter_configs_request import IncrementalAlterConfigsRequest
from kbroker.wire.generated.produce_request import ProduceRequest
from kbroker.wire.compression import TruncatedRecordError
from kbroker.wire.records import iter_batches

TOPIC_RESOURCE, BROKER_RESOURCE, BROKER_LOGGER_RESOURCE = 2, 4, 8
MAX_TIMESTAMP = -3
OP_SET, OP_DELETE = 0, 1


def _check(code: int, what: str, message: str | None = None) -> None:
    if code:
        raise KafkaError(code, f"{what}: {error_name(code)}" + (f" ({message})" if message else ""))


def one_batch_produce(topic: str, partition: int, batch, acks: int = -1, timeout_ms: int = 30000,
                      transactional_id: str | None = None) -> ProduceRequest:
    """A ProduceRequest of one record batch to one partition."""
    P = ProduceRequest.TopicProduceData
    return ProduceRequest(transactional_id=transactional_id, acks=acks, timeout_ms=timeout_ms, topic_data=[
        P(name=topic, partition_data=[P.PartitionProduceData(index=partition, records=batch)])])


class ToolClient(AdminClient):
    def __init__(self, bootstrap: str, timeout: float = 30.0, client_id: str = "kbroker-tools",
                 ssl=None, sasl=None):
        super().__init__(bootstrap, timeout, client_id)
        self.ssl, self.sasl = ssl, sasl     # from --command-config (kbroker.security.client_auth)
        self.loop = asyncio.new_event_loop()
        self._clients: dict[tuple[str, int], KafkaClient] = {}

    def kafka_client(self, addr: tuple[str, int] | None = None) -> KafkaClient:
        addr = addr or self.bootstrap
        c = self._clients.get(addr)
        if c is None:
            c = self._clients[addr] = KafkaClient(addr[0], addr[1], client_id=self.client_id,
                                                  request_timeout_ms=int(self.timeout * 1000),
                                                  ssl=self.ssl, sasl=self.sasl)
        return c

    def call(self, req, version: int, addr: tuple[str, int] | None = None):
        try:
            return self.loop.run_until_complete(self.kafka_client(addr).send(req, version))
        except ClientError as e:
            raise ConnectionError(str(e)) from None

    def close(self):
        for c in self._clients.values():
            self.loop.run_until_complete(c.close())
        self._clients.clear()
        if not self.loop.is_closed():
            self.loop.close()

    # -- topics ------------------------------------------------------------------------------

    def topics(self, names: list[str] | None = None):
        """name -> MetadataResponseTopic (partitions with leader, replicas, ISR)."""
        md = self.metadata(names)
        return {t.name: t for t in md.topics}

    def create_topic(self, name: str, partitions: int = -1, replication_factor: int = -1,
                     configs: dict[str, str] | None = None, validate_only: bool = False):
        T = CreateTopicsRequest.CreatableTopic
        req = CreateTopicsRequest(topics=[T(name=name, num_partitions=partitions, replication_factor=replication_factor,
                                            assignments=[], configs=[T.CreatableTopicConfig(name=k, value=v)
                                                                     for k, v in (configs or {}).items()])],
                                  timeout_ms=int(self.timeout * 1000), validate_only=validate_only)
        r = self.call(req, 7).topics[0]
        _check(r.error_code, f"CreateTopics({name})", r.error_message)
        return r

    def delete_topic(self, name: str) -> None:
        req = DeleteTopicsRequest(topics=[DeleteTopicsRequest.DeleteTopicState(name=name)],
                                  timeout_ms=int(self.timeout * 1000))
        r = self.call(req, 6).responses[0]
        _check(r.error_code, f"DeleteTopics({name})", r.error_message)

    def create_partitions(self, name: str, count: int) -> None:
        T = CreatePartitionsRequest.CreatePartitionsTopic
        req = CreatePartitionsRequest(topics=[T(name=name, count=count, assignments=None)],
                                      timeout_ms=int(self.timeout * 1000), validate_only=False)
        r = self.call(req, 3).results[0]
        _check(r.error_code, f"CreatePartitions({name})", r.error_message)

    # -- configs -----------------------------------------------------------------------------

    def _node_of(self, resource_type: int, name: str) -> tuple[str, int] | None:
        """A broker's own configs go to that broker, as Kafka's admin client sends them."""
        if resource_type not in (BROKER_RESOURCE, BROKER_LOGGER_RESOURCE) or not name.strip().isdigit():
            return None
        for b in self.metadata(None).brokers:
            if b.node_id == int(name):
                return b.host, b.port
        return None

    def describe_configs(self, resource_type: int, name: str, synonyms: bool = True):
        R = DescribeConfigsRequest.DescribeConfigsResource
        req = DescribeConfigsRequest(resources=[R(resource_type=resource_type, resource_name=name,
                                                  configuration_keys=None)],
                                     include_synonyms=synonyms, include_documentation=False)
        r = self.call(req, 4, self._node_of(resource_type, name)).results[0]
        _check(r.error_code, f"DescribeConfigs({name})", r.error_message)
        return r.configs

    def alter_configs(self, resource_type: int, name: str, set_: dict[str, str], delete: list[str]) -> None:
        R = IncrementalAlterConfigsRequest.AlterConfigsResource
        ops = [R.AlterableConfig(name=k, config_operation=OP_SET, value=v) for k, v in set_.items()]
        ops += [R.AlterableConfig(name=k, config_operation=OP_DELETE, value=None) for k in delete]
        req = IncrementalAlterConfigsRequest(resources=[R(resource_type=resource_type, resource_name=name, configs=ops)],
                                             validate_only=False)
        r = self.call(req, 1, self._node_of(resource_type, name)).responses[0]
        _check(r.error_code, f"IncrementalAlterConfigs({name})", r.error_message)

    # -- records -----------------------------------------------------------------------------

    def leader_addr(self, topic: str, partition: int):
        leader = self.partitions(topic).get(partition)
        if leader is None:
            raise KafkaError(Errors.UNKNOWN_TOPIC_OR_PARTITION, f"{topic}-{partition}: no such partition")
        return self.brokers.get(leader, self.bootstrap)

    def delete_records(self, offsets: dict[tuple[str, int], int]) -> dict[tuple[str, int], tuple[int, int]]:
        """(topic, partition) -> (error code, low watermark)."""
        T = DeleteRecordsRequest.DeleteRecordsTopic
        by_topic: dict[str, list] = {}
        for (t, p), off in offsets.items():
            by_topic.setdefault(t, []).append(T.DeleteRecordsPartition(partition_index=p, offset=off))
        req = DeleteRecordsRequest(topics=[T(name=t, partitions=ps) for t, ps in by_topic.items()],
                                   timeout_ms=int(self.timeout * 1000))
        resp = self.call(req, 2)
        return {(t.name, p.partition_index): (p.error_code, p.low_watermark) for t in resp.topics for p in t.partitions}

    def produce(self, topic: str, partition: int, batch: bytes, acks: int = -1) -> int:
        """Append one record batch; returns its base offset."""
        req = one_batch_produce(topic, partition, batch, acks, int(self.timeout * 1000))
        r = self.call(req, 9, self.leader_addr(topic, partition)).responses[0].partition_responses[0]
        _check(r.error_code, f"Produce({topic}-{partition})", r.error_message)
        return r.base_offset

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int = 1 << 20, max_wait_ms: int = 500,
              isolation_level: int = 0):
        """(record batches from ``offset``, high watermark)."""
        F = FetchRequest.FetchTopic
        req = FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=max_bytes,
                           isolation_level=isolation_level, session_id=0, session_epoch=-1,
                           topics=[F(topic=topic, partitions=[F.FetchPartition(
                               partition=partition, current_leader_epoch=-1, fetch_offset=offset,
                               log_start_offset=-1, partition_max_bytes=max_bytes)])],
                           forgotten_topics_data=[], rack_id="")
        p = self.call(req, 12, self.leader_addr(topic, partition)).responses[0].partitions[0]
        _check(p.error_code, f"Fetch({topic}-{partition} at {offset})")
        return whole_batches(bytes(p.records or b"")), p.high_watermark


def alter_client_quotas(tc: "ToolClient", entity: dict[str, str | None], set_: dict[str, float],
                        remove: list[str] = ()) -> None:
    """AlterClientQuotas for one entity ({"user": "alice", "client-id": None} = alice, any
    client's default)."""
    from kbroker.wire.generated.alter_client_quotas_request import AlterClientQuotasRequest as Q
    ops = [Q.EntryData.OpData(key=k, value=float(v), remove=False) for k, v in set_.items()]
    ops += [Q.EntryData.OpData(key=k, value=0.0, remove=True) for k in remove]
    req = Q(entries=[Q.EntryData(entity=[Q.EntryData.EntityData(entity_type=t, entity_name=n) for t, n in entity.items()],
                                 ops=ops)], validate_only=False)
    for e in tc.call(req, 1).entries:
        _check(e.error_code, "AlterClientQuotas", e.error_message)


def describe_client_quotas(tc: "ToolClient", components: list[tuple[str, int, str | None]], strict: bool = False):
    """[(entity {type: name|None}, {key: value})] matching components [(type, match type
    0 exact / 1 default / 2 any, name)]."""
    from kbroker.wire.generated.describe_client_quotas_request import DescribeClientQuotasRequest as D
    resp = tc.call(D(components=[D.ComponentData(entity_type=t, match_type=m, match=n) for t, m, n in components],
                     strict=strict), 1)
    _check(resp.error_code, "DescribeClientQuotas", resp.error_message)
    return [({e.entity_type: e.entity_name for e in x.entity}, {v.key: v.value for v in x.values})
            for x in resp.entries or ()]


def whole_batches(data: bytes) -> list:
    """The complete batches of a fetch response (a response may end in a partial batch)."""
    out = []
    try:
        for b in iter_batches(bytearray(data)):
            out.append(b)
    except TruncatedRecordError:
        pass
    return out
