"""FindCoordinator for groups names the leader of the group's __consumer_offsets partition on
the listener the request came in on (not the node that was asked), and
COORDINATOR_NOT_AVAILABLE while that leader is unknown or fenced."""
import asyncio
from types import SimpleNamespace

from kbroker.config import Endpoint
from kbroker.handlers import find_coordinator
from kbroker.wire.errors import Errors
from kbroker.wire.generated.find_coordinator_request import FindCoordinatorRequest


def _ctx(leaders):
    reg = lambda i, fenced=False: SimpleNamespace(  # noqa: E731
        broker_id=i, fenced=fenced, rack=None, endpoints={"PLAINTEXT": (f"h{i}", 9000 + i, 0), "EXTERNAL": (f"x{i}", 19000 + i, 0)})
    image = SimpleNamespace(brokers={1: reg(1), 2: reg(2), 3: reg(3, fenced=True)})

    async def ensure_offsets_topic():
        return True
    groups = SimpleNamespace(ensure_offsets_topic=ensure_offsets_topic, coordinator_node=leaders.get)
    broker = SimpleNamespace(node_id=1, image=image, groups=groups, replicas=object(),
                             _advertised_endpoints=lambda: [Endpoint("PLAINTEXT", "h1", 9001, "PLAINTEXT"),
                                                            Endpoint("EXTERNAL", "x1", 19001, "PLAINTEXT")])
    return SimpleNamespace(broker=broker, listener_name="EXTERNAL", api_version=4)


def test_group_coordinator_is_the_partition_leader_on_the_request_listener():
    ctx = _ctx({"here": 1, "there": 2, "fenced": 3, "none": None})
    req = FindCoordinatorRequest(key_type=0, coordinator_keys=["here", "there", "fenced", "none"])
    resp = asyncio.run(find_coordinator.handle(ctx, req))
    got = {c.key: (c.error_code, c.node_id, c.host, c.port) for c in resp.coordinators}
    assert got["here"] == (0, 1, "x1", 19001)
    assert got["there"] == (0, 2, "x2", 19002)
    assert got["fenced"][0] == Errors.COORDINATOR_NOT_AVAILABLE
    assert got["none"][0] == Errors.COORDINATOR_NOT_AVAILABLE
