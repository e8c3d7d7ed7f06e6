"""``kbroker cluster up --racks``: each node's own broker.rack (librdkafka's 0101 needs it)."""
import pytest

from kbroker.tools.cluster import node_props, plan, racks


def test_a_pattern_or_one_rack_per_node():
    assert racks("RACK{id}", 3) == ["RACK1", "RACK2", "RACK3"]
    assert racks("a, b,c", 3) == ["a", "b", "c"]
    assert racks(None, 2) == [None, None]
    with pytest.raises(ValueError):
        racks("a,b", 3)
    with pytest.raises(ValueError):
        racks("a,,c", 3)


def test_the_rack_lands_in_the_node_properties_and_an_override_still_wins():
    node = plan(2, None, 30000)[1]
    props = node_props(node, "1@127.0.0.1:30001", "/tmp/x", ["num.partitions=3"], "RACK2")
    assert "broker.rack=RACK2" in props and props[-1] == "num.partitions=3"
    assert not any(p.startswith("broker.rack=") for p in node_props(node, "v", "/tmp/x", []))
