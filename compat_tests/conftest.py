import pytest

from compat_tests.brokers import BrokerProcess


@pytest.fixture
def broker(tmp_path):
    """A fresh single-node broker process for one test."""
    b = BrokerProcess(tmp_path / "broker").start()
    yield b
    b.stop()


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory):
    """One broker for a whole module, for tests that use distinct topics."""
    b = BrokerProcess(tmp_path_factory.mktemp("broker")).start()
    yield b
    b.stop()
