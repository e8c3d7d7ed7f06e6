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


# The compatibility matrix (compat_tests/matrix.py): record every compat test's outcome.
from compat_tests.matrix import MatrixRecorder  # noqa: E402
from compat_tests.brokers import DEPS  # noqa: E402

_matrix = MatrixRecorder()


def pytest_runtest_logreport(report):
    if report.when == "call" or (report.when == "setup" and report.failed):
        _matrix.record(report.nodeid, report.passed)


def pytest_sessionfinish(session, exitstatus):
    _matrix.write(DEPS / "compat-matrix.md")


def pytest_addoption(parser):
    parser.addoption("--duration", type=float, default=0.0,
                     help="seconds of extra load around each fault in compat_tests/cluster_faults")
    parser.addoption("--txn-records", type=int, default=0,
                     help="input records of the consume-transform-produce fault test (the issue's "
                          "100000; CI runs a short one)")


@pytest.fixture
def duration(request) -> float:
    return request.config.getoption("--duration")
