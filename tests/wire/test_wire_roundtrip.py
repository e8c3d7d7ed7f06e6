"""Every generated message, at every valid version: encode -> decode -> equal -> same bytes."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wire_strategies import all_versions, message_class, message_strategy, messages, protocol_available

pytestmark = pytest.mark.skipif(not protocol_available(), reason="kafka-protocol schemas not found")

MSGS = messages() if protocol_available() else ()


def _roundtrip(cls, obj, version):
    data = obj.encode(version)
    back = cls.decode(data, version)
    assert back == obj, f"{cls.__name__} v{version}\n sent {obj!r}\n got  {back!r}"
    assert back.encode(version) == data, f"{cls.__name__} v{version}: re-encoding differs"


@pytest.mark.parametrize("msg", MSGS, ids=lambda m: m.name)
def test_defaults_roundtrip_every_version(msg):
    cls = message_class(msg)
    for v in all_versions(msg):
        _roundtrip(cls, cls(), v)


@pytest.mark.parametrize("msg", MSGS, ids=lambda m: m.name)
def test_random_roundtrip_every_version(msg):
    cls = message_class(msg)
    versions = all_versions(msg)
    # one example covers every version, so every version is exercised on every example
    strategy = st.tuples(*(message_strategy(msg, v) for v in versions))

    @settings(max_examples=6, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(strategy)
    def check(objs):
        for v, obj in zip(versions, objs):
            _roundtrip(cls, obj, v)

    check()
