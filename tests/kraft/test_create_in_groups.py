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
    assert _names(groups(ts, per_op=1000)) == [["a", "b"], ["c"], ["d"], ["e", "f"]]
    assert groups([], per_op=1000) == []


def test_a_repeated_name_keeps_the_request_in_one_operation():
    ts = [NewTopic("a", 900), NewTopic("b", 900), NewTopic("a", 900)]
    assert _names(groups(ts, per_op=1000)) == [["a", "b", "a"]]


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
