"""Fixtures shared across the unit-test packages."""

import asyncio

import pytest

from kbroker import gc_policy
from kbroker.log import aio_fsync


@pytest.fixture(autouse=True)
def _collector_quiet_ends():
    """A test whose loop stops with a large request in flight leaves no quiet collector
    (kbroker.gc_policy) to the tests after it."""
    yield
    gc_policy.end_all_quiets()


@pytest.fixture(params=["thread", "aio"])
def fsync_path(request, monkeypatch):
    """Runs the test on each path of the active log's group-commit fsyncs: a worker thread
    (kbroker.log.commit_chain) and native AIO (kbroker.log.aio_fsync)."""
    monkeypatch.setenv("KBROKER_AIO_FSYNC", "0" if request.param == "thread" else "1")
    if request.param == "aio":
        async def available():
            return aio_fsync.for_loop(asyncio.get_running_loop()) is not None
        if not asyncio.run(available()):
            pytest.skip("native AIO unavailable here (io_setup failed; see kbroker.log.aio_fsync)")
    return request.param


@pytest.fixture
def submit_held():
    """``submit_held(real, aio, fd, callback, release)``: submit the fdatasync through
    ``real`` (the unpatched AioFsync.fdatasync) and keep its end from ``callback`` until
    ``release`` (a threading.Event) is set: a slow disk, gated by the test."""
    def submit(real, aio, fd, callback, release):
        loop = asyncio.get_running_loop()

        def held(errno):
            if release.is_set():
                callback(errno)
            else:
                loop.call_later(0.001, held, errno)
        real(aio, fd, held)
    return submit
