"""Fixtures shared across the unit-test packages."""

import asyncio

import pytest

from kbroker.log import aio_fsync


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
