"""Metadata v12 by topic id, as the Java client asks for it: name "" (not null) plus the id
(how a KIP-848 regex member learns the names of the topics it was assigned)."""
import uuid

from kbroker.wire.errors import Errors
from kbroker.wire.generated.metadata_request import MetadataRequest

from tests.handlers.test_handlers import create

Topic = MetadataRequest.MetadataRequestTopic


def test_metadata_by_topic_id_with_empty_name(broker):
    tid = create(broker, "by-id", 2).topics[0].topic_id
    r = broker.call(3, 12, MetadataRequest(topics=[Topic(topic_id=tid, name="")], allow_auto_topic_creation=False))
    assert [(t.error_code, t.name, t.topic_id, len(t.partitions)) for t in r.topics] == [(0, "by-id", tid, 2)]
    r = broker.call(3, 12, MetadataRequest(topics=[Topic(topic_id=uuid.uuid4(), name="")], allow_auto_topic_creation=False))
    assert r.topics[0].error_code == Errors.UNKNOWN_TOPIC_ID
    r = broker.call(3, 12, MetadataRequest(topics=[Topic(name="")], allow_auto_topic_creation=False))
    assert r.topics[0].error_code == Errors.INVALID_TOPIC_EXCEPTION     # no id: still a bad name
