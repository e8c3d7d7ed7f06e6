"""CreateTopics runs as one controller operation per ~1,000 partitions of topics, so no
step of its path holds the loop for the whole request (kbroker.kraft.create_in_groups)."""

from kbroker.kraft.controller import NewTopic
from kbroker.kraft.create_in_groups import groups
from kbroker.wire.errors import Errors
from kbroker.wire.generated.create_topics_request import CreateTopicsRequest
from tests.handlers.conftest import broker  # noqa: F401  (fixture)


def _names(runs):
    return [[t.name for t in run] for run in runs]


def test_groups_cut_in_order_at_the_partition_budget():
    ts = [NewTopic("a", 600), NewTopic("b", 300), NewTopic("c", 200), NewTopic("d", 5000),
          NewTopic("e", -1), NewTopic("f", assignments={0: [1], 1: [1]})]
    assert _names(groups(ts, 1, per_op=1000)) == [["a", "b"], ["c"], ["d"], ["e", "f"]]
    assert _names(groups(ts, 999, per_op=1000)) == [["a", "b"], ["c"], ["d"], ["e"], ["f"]]   # e: 999
    assert groups([], 1, per_op=1000) == []


def test_a_repeated_name_keeps_the_request_in_one_operation():
    ts = [NewTopic("a", 900), NewTopic("b", 900), NewTopic("a", 900)]
    assert _names(groups(ts, 1, per_op=1000)) == [["a", "b", "a"]]


def test_a_request_that_may_pass_kafkas_bounds_stays_one_operation():
    """Only the whole request can be checked against 10,000 records of valid topics."""
    ts = [NewTopic(f"t{i}", 1000) for i in range(9)] + [NewTopic("t9", 990), NewTopic("bad!", 5)]
    assert len(groups(ts, 1, per_op=1000)) == 1          # 10,006 records if all were valid
    assert len(groups(ts[:9], 1, per_op=1000)) == 9


def _request(*topics):
    T = CreateTopicsRequest.CreatableTopic
    return CreateTopicsRequest(topics=[T(name=n, num_partitions=p, replication_factor=-1, assignments=[], configs=[])
                                       for n, p in topics], timeout_ms=30000)


def test_a_large_request_is_created_in_several_operations(broker):  # noqa: F811
    server = broker.server
    real, calls = server.controller.submit, []

    async def counting(op):   # the real runtime, counted
        calls.append(op)
        return await real(op)
    server.controller.submit = counting
    try:
        resp = broker.call(19, 7, _request(("g1", 700), ("g3.x", 10), ("g2", 700), ("g3_x", 10)))
    finally:
        server.controller.submit = real
    got = [(t.name, t.error_code, t.num_partitions) for t in resp.topics]
    # in the request's order; the collision is found against the topic an earlier operation made
    assert got == [("g1", 0, 700), ("g3.x", 0, 10), ("g2", 0, 700), ("g3_x", Errors.INVALID_TOPIC_EXCEPTION, -1)]
    assert len(calls) == 2
    image = server.image
    assert [len(image.topic(n).partitions) for n in ("g1", "g2", "g3.x")] == [700, 700, 10]
    assert image.topic("g3_x") is None


def _outcome(resp):
    return sorted({(t.error_code, t.error_message) for t in resp.topics})


def test_kafkas_bounds_on_one_request(broker):  # noqa: F811
    """As Apache Kafka 4.0 answers (checked against reference-kafka): more than 10,000
    partitions asked for, or more than 10,000 records for the valid topics (validate_only
    too), fail every topic with POLICY_VIOLATION and create nothing; invalid topics' records
    do not count."""
    over_partitions = broker.call(19, 7, _request(*[(f"p{i}", 1000) for i in range(11)]))
    assert _outcome(over_partitions) == [(Errors.POLICY_VIOLATION, "Excessively large number of partitions per request.")]
    big = _request(*[(f"r{i}", 1000) for i in range(10)])   # 10,000 partitions + 10 topic records
    assert _outcome(broker.call(19, 7, big)) == [(Errors.POLICY_VIOLATION,
                                                 "Unable to perform excessively large batch operation.")]
    big.validate_only = True
    assert _outcome(broker.call(19, 7, big)) == [(Errors.POLICY_VIOLATION,
                                                 "Unable to perform excessively large batch operation.")]
    assert not [n for n in broker.server.image.topics_by_name if n[0] in "pr"]
    # 9,990 partitions + 10 topic records: at the bound; the invalid name adds nothing
    # (validated only: creating 9,990 logs here would take the test ten seconds)
    fits = _request(*[(f"w{i}", 1000) for i in range(9)], ("w9", 990), ("bad!", 5))
    fits.validate_only = True
    codes = {t.name: t.error_code for t in broker.call(19, 7, fits).topics}
    assert codes.pop("bad!") == Errors.INVALID_TOPIC_EXCEPTION and set(codes.values()) == {0}
    assert broker.server.image.topic("w9") is None
