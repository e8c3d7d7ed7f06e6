"""ElectLeaders (v0-2), AlterPartitionReassignments and ListPartitionReassignments driven
directly on a single node (the ``broker`` fixture of conftest.py): the request and response
shapes at every version, and the answers of a one-broker cluster."""

from kbroker.wire.errors import Errors
from kbroker.wire.generated.alter_partition_reassignments_request import AlterPartitionReassignmentsRequest as A
from kbroker.wire.generated.create_topics_request import CreateTopicsRequest
from kbroker.wire.generated.elect_leaders_request import ElectLeadersRequest as E
from kbroker.wire.generated.list_partition_reassignments_request import ListPartitionReassignmentsRequest as L


def create(h, name, partitions=2):
    T = CreateTopicsRequest.CreatableTopic
    r = h.call(19, 7, CreateTopicsRequest(topics=[T(name=name, num_partitions=partitions, replication_factor=1,
                                                    assignments=[], configs=[])]))
    assert r.topics[0].error_code == 0


def codes(resp):
    return {(t.topic, p.partition_id): p.error_code for t in resp.replica_election_results for p in t.partition_result}


def test_elect_leaders_every_version(broker):
    create(broker, "t")
    for v in (0, 1, 2):
        r = broker.call(43, v, E(election_type=0, topic_partitions=[E.TopicPartitions(topic="t", partitions=[0, 5])],
                                 timeout_ms=1000))
        assert codes(r) == {("t", 0): Errors.ELECTION_NOT_NEEDED, ("t", 5): Errors.UNKNOWN_TOPIC_OR_PARTITION}
    r = broker.call(43, 2, E(election_type=1, topic_partitions=[E.TopicPartitions(topic="t", partitions=[1])]))
    assert codes(r) == {("t", 1): Errors.ELECTION_NOT_NEEDED}
    # every partition: the ones that needed nothing are left out
    assert broker.call(43, 2, E(election_type=0, topic_partitions=None)).replica_election_results == []
    r = broker.call(43, 2, E(election_type=7, topic_partitions=[E.TopicPartitions(topic="t", partitions=[0])]))
    assert codes(r) == {("t", 0): Errors.INVALID_REQUEST}


def test_reassignments_on_one_broker(broker):
    create(broker, "r", 1)
    R = A.ReassignableTopic

    def alter(replicas):
        r = broker.call(45, 0, A(timeout_ms=1000, topics=[R(name="r", partitions=[
            R.ReassignablePartition(partition_index=0, replicas=replicas)])]))
        assert r.error_code == 0
        return r.responses[0].partitions[0].error_code

    assert alter([1, 2]) == Errors.INVALID_REPLICA_ASSIGNMENT     # broker 2 is not registered
    assert alter(None) == Errors.NO_REASSIGNMENT_IN_PROGRESS
    assert alter([1]) == Errors.NONE                              # already there: nothing to do
    r = broker.call(46, 0, L(timeout_ms=1000, topics=None))
    assert (r.error_code, r.topics) == (0, [])
    r = broker.call(46, 0, L(timeout_ms=1000, topics=[L.ListPartitionReassignmentsTopics(name="r", partition_indexes=[0])]))
    assert r.topics == []
