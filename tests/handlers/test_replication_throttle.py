"""The leader's side of replication throttles: a started broker (handlers called directly,
fake clock) leading a partition whose follower is assigned but out of the ISR, as during a
reassignment; the throttle configs set through IncrementalAlterConfigs."""

import pytest

from kbroker.handlers import registry
from kbroker.replication.roles import apply_partition_state
from kbroker.wire.errors import Errors
from tests.handlers.test_admin_configs import BROKER, SET, TOPIC, incremental
from tests.handlers.test_handlers import batch, create, produce
from tests.handlers.test_long_poll_wakeup import _fetch_request, _start
from tests.metrics.test_metrics import _scrape

FOLLOWER = 2


@pytest.fixture
def leader(broker):
    broker.server.api_specs.update(registry.load(("incremental_alter_configs",)))
    create(broker, "r")
    server = broker.server
    for _ in range(20):
        produce(broker, "r", 0, batch(50), acks=1)
    part = server.replicas.get("r", 0)
    me = server.node_id
    # leads with the follower assigned but out of the ISR, as during a reassignment
    apply_partition_state(part, me, me, part.leader_epoch + 1, part.partition_epoch + 1,
                          [me, FOLLOWER], [me], server.clock.now_ms())
    return broker, part


def _follower_fetch(broker, part, offset):
    tid = broker.server.image.topics_by_name["r"].topic_id
    resp = _start(broker, 1, 15, _fetch_request("r", offset, replica_id=FOLLOWER, leader_epoch=part.leader_epoch,
                                                  topic_id=tid, max_wait_ms=0))
    pd = resp.responses[0].partitions[0]
    assert pd.error_code == Errors.NONE
    return pd.records.size if pd.records else 0


def test_leader_sends_nothing_to_a_throttled_follower_over_the_quota(leader):
    broker, part = leader
    me = broker.server.node_id
    assert incremental(broker, BROKER, str(me), [("leader.replication.throttled.rate", SET, "1000")]).error_code == 0
    assert incremental(broker, TOPIC, "r", [("leader.replication.throttled.replicas", SET, f"0:{me}")]).error_code == 0
    first = _follower_fetch(broker, part, 0)
    assert first > 1000                          # under the quota: a whole answer, then recorded
    m = _scrape(broker.server)
    assert m[("kafka_server_leaderreplication_byte_rate", ())] == first    # over one window
    assert m[("kafka_server_followerreplication_byte_rate", ())] == 0
    assert _follower_fetch(broker, part, 0) == 0   # now over it
    broker.server.clock.advance(first)           # (ms: first bytes at 1000 B/s take `first` ms)
    assert _follower_fetch(broker, part, 0) > 0


def test_leader_does_not_throttle_without_the_partition_listed_or_a_rate(leader):
    broker, part = leader
    me = broker.server.node_id
    assert incremental(broker, BROKER, str(me), [("leader.replication.throttled.rate", SET, "1000")]).error_code == 0
    for _ in range(3):                            # no topic config: never held
        assert _follower_fetch(broker, part, 0) > 0
    assert incremental(broker, TOPIC, "r", [("leader.replication.throttled.replicas", SET, "0:99")]).error_code == 0
    for _ in range(3):                            # listed for another broker
        assert _follower_fetch(broker, part, 0) > 0


def test_throttle_configs_are_validated_as_kafka_does(leader):
    broker, _ = leader
    me = str(broker.server.node_id)
    bad = incremental(broker, BROKER, me, [("leader.replication.throttled.rate", SET, "-1")])
    assert bad.error_code == Errors.INVALID_REQUEST and "at least 0" in bad.error_message
    bad = incremental(broker, BROKER, me, [("follower.replication.throttled.rate", SET, "fast")])
    assert bad.error_code == Errors.INVALID_REQUEST
    bad = incremental(broker, TOPIC, "r", [("leader.replication.throttled.replicas", SET, "0-1")])
    assert bad.error_code == Errors.INVALID_CONFIG and "[partitionId]:[brokerId]" in bad.error_message
    ok = incremental(broker, TOPIC, "r", [("follower.replication.throttled.replicas", SET, "0:1, 1:2")])
    assert ok.error_code == 0
