"""Replication throttles, pure: the config parsing, the quota and the follower's fetcher,
on fake time (the rate itself is kbroker.security.quotas.SampledRate, tested there). The leader's side is tests/handlers/test_replication_throttle.py."""

import uuid

from kbroker.kraft.image import BROKER_RESOURCE, TOPIC_RESOURCE
from kbroker.replication.fetcher import ReplicaFetcher
from kbroker.replication.throttle import ALL, UNBOUNDED, ReplicationQuota, throttled_partitions
from tests.replication.memlog import MemReplica


# -- the configs -----------------------------------------------------------------------------

def test_throttled_replicas_are_the_partitions_listed_for_this_broker():
    assert throttled_partitions("0:1,1:2, 2:1 ,3:11", 1) == frozenset({0, 2})
    assert throttled_partitions("0:1,1:2", 3) == frozenset()
    assert throttled_partitions(" * ", 7) == ALL
    assert throttled_partitions("", 1) == frozenset()
    assert throttled_partitions(None, 1) == frozenset()


class _Image:
    def __init__(self):
        self.configs = {}

    def topic_configs(self, name):
        return self.configs.get((TOPIC_RESOURCE, name), {})


def _quota(image, node=1):
    return ReplicationQuota(node, "leader.replication.throttled.rate", "leader.replication.throttled.replicas",
                            lambda: image, samples=11, window_ms=1000)


def test_quota_bound_is_the_broker_value_else_the_cluster_default_else_unbounded():
    image = _Image()
    q = _quota(image)
    assert q.bound() == UNBOUNDED and not q.exceeded(0)
    image.configs[(BROKER_RESOURCE, "")] = {"leader.replication.throttled.rate": "500"}
    assert q.bound() == 500
    image.configs[(BROKER_RESOURCE, "1")] = {"leader.replication.throttled.rate": "100"}
    assert q.bound() == 100
    image.configs[(BROKER_RESOURCE, "2")] = {"leader.replication.throttled.rate": "1"}
    assert q.bound() == 100            # another broker's value is not ours


def test_quota_holds_only_out_of_sync_throttled_partitions_over_the_bound():
    image = _Image()
    q = _quota(image)
    image.configs[(BROKER_RESOURCE, "1")] = {"leader.replication.throttled.rate": "1000"}
    image.configs[(TOPIC_RESOURCE, "t")] = {"leader.replication.throttled.replicas": "0:1,1:2"}
    q.record(20_000, 0)
    assert q.exceeded(0)
    assert q.holds("t", 0, in_sync=False)
    assert not q.holds("t", 0, in_sync=True)      # the ISR is never throttled
    assert not q.holds("t", 1, in_sync=False)     # listed for broker 2
    assert not q.holds("u", 0, in_sync=False)     # no throttle on that topic
    assert not q.exceeded(20_000)                 # the rate fell under the bound
    image.configs[(TOPIC_RESOURCE, "t")] = {"leader.replication.throttled.replicas": "*"}
    assert q.holds("t", 5, in_sync=False)


# -- the follower's fetcher ------------------------------------------------------------------

def test_follower_leaves_out_a_throttled_partition_and_records_what_it_fetched():
    image = _Image()
    q = ReplicationQuota(2, "follower.replication.throttled.rate", "follower.replication.throttled.replicas",
                         lambda: image, samples=11, window_ms=1000)
    image.configs[(BROKER_RESOURCE, "2")] = {"follower.replication.throttled.rate": "1000"}
    image.configs[(TOPIC_RESOURCE, "t")] = {"follower.replication.throttled.replicas": "0:2"}
    f = ReplicaFetcher(2, 1, throttle=q)
    tid = uuid.uuid4()
    throttled, free = MemReplica(2), MemReplica(2)
    f.add("t", 0, tid, 0, throttled)
    f.add("t", 1, tid, 0, free)

    def asked(now):
        req = f.build_request(now)
        return sorted(p.partition for t in req.topics for p in t.partitions) if req else []

    assert asked(0) == [0, 1]
    q.record(50_000, 0)                          # over the bound: partition 0 waits
    assert asked(0) == [1]
    throttled.isr = [1, 2]                       # in sync: never throttled
    assert asked(0) == [0, 1]
    throttled.isr = [1]
    assert asked(60_000) == [0, 1]               # the old bytes aged out
    assert q.measured.rate(60_000) == 0
