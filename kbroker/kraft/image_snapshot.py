"""A MetadataImage as snapshot records, and back (KIP-630).

``image_records(image)`` lists the metadata records that rebuild ``image`` from nothing, in
an order that replays cleanly (features, brokers, topics then their partitions, configs,
producer ids); ``encode_image`` frames them for ``RaftNode.create_snapshot``.
``load_image(framed)`` replays a snapshot's records into a fresh image. Loading a snapshot
must equal replaying the log it summarises (tests/kraft/test_image_snapshot.py).
"""

from __future__ import annotations

from typing import Iterable

from kbroker.kraft.image import MetadataImage
from kbroker.kraft.records import decode_record, encode_record
from kbroker.wire.generated.config_record import ConfigRecord
from kbroker.wire.generated.feature_level_record import FeatureLevelRecord
from kbroker.wire.generated.partition_record import PartitionRecord
from kbroker.wire.generated.producer_ids_record import ProducerIdsRecord
from kbroker.wire.generated.register_broker_record import RegisterBrokerRecord
from kbroker.wire.generated.topic_record import TopicRecord


def image_records(image: MetadataImage) -> list:
    out: list = []
    for name, level in sorted(image.features.items()):
        out.append(FeatureLevelRecord(name=name, feature_level=level))
    for bid, b in sorted(image.brokers.items()):
        eps = [RegisterBrokerRecord.BrokerEndpoint(name=n, host=h, port=p, security_protocol=sp)
               for n, (h, p, sp) in b.endpoints.items()]
        out.append(RegisterBrokerRecord(broker_id=bid, incarnation_id=b.incarnation_id,
                                        broker_epoch=b.epoch, end_points=eps, features=[],
                                        rack=b.rack, fenced=b.fenced,
                                        in_controlled_shutdown=b.in_controlled_shutdown))
    for name, t in sorted(image.topics_by_name.items()):
        out.append(TopicRecord(name=name, topic_id=t.topic_id))
        for pid, p in sorted(t.partitions.items()):
            out.append(PartitionRecord(
                partition_id=pid, topic_id=t.topic_id, replicas=list(p.replicas), isr=list(p.isr),
                removing_replicas=list(p.removing_replicas), adding_replicas=list(p.adding_replicas),
                leader=p.leader, leader_epoch=p.leader_epoch, partition_epoch=p.partition_epoch))
    for (rtype, rname), cfg in sorted(image.configs.items()):
        for k, v in sorted(cfg.items()):
            out.append(ConfigRecord(resource_type=rtype, resource_name=rname, name=k, value=v))
    if image.next_producer_id:
        out.append(ProducerIdsRecord(broker_id=-1, broker_epoch=-1, next_producer_id=image.next_producer_id))
    out += image.security.records()   # SCRAM credentials, ACLs, client quotas, delegation tokens
    return out


def encode_image(image: MetadataImage) -> list[bytes]:
    return [encode_record(r) for r in image_records(image)]


def load_image(framed: Iterable[bytes], offset: int = -1) -> MetadataImage:
    """A fresh image from a snapshot's framed records; ``offset`` = the snapshot's end - 1."""
    return image_of(map(decode_record, framed), offset)


def image_of(records: Iterable, offset: int = -1) -> MetadataImage:
    """A fresh image from decoded records (a snapshot's, or another image's ``image_records``)."""
    image = MetadataImage()
    for r in records:
        image.apply(r)
    image.offset = offset
    return image
