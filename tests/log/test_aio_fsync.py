"""Native AIO fdatasync (kbroker.log.aio_fsync), the path group commit uses with no Python
thread. Real files, a real kernel AIO context."""

import asyncio
import errno
import gc
import os

import pytest

from kbroker.log import aio_fsync


@pytest.fixture(autouse=True)
def _native_aio(monkeypatch):
    monkeypatch.setenv("KBROKER_AIO_FSYNC", "1")

    async def available():
        return aio_fsync.for_loop(asyncio.get_running_loop()) is not None
    if not asyncio.run(available()):
        pytest.skip("native AIO unavailable here (io_setup failed; see kbroker.log.aio_fsync)")


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _aio_slots() -> int:
    with open("/proc/sys/fs/aio-nr") as f:
        return int(f.read())


def test_each_fdatasync_reports_its_own_end_on_the_loop(tmp_path):
    """Twenty files, an fdatasync each, all in flight at once: every callback runs once, on
    the loop's thread, with 0, and for its own file."""
    async def main():
        loop = asyncio.get_running_loop()
        aio = aio_fsync.for_loop(loop)
        assert aio_fsync.for_loop(loop) is aio            # one per loop
        fds = [os.open(tmp_path / f"f{i}", os.O_RDWR | os.O_CREAT) for i in range(20)]
        ended = {}
        done = loop.create_future()

        def on_end(fd, err):
            assert fd not in ended
            ended[fd] = err
            if len(ended) == len(fds):
                done.set_result(None)
        try:
            for fd in fds:
                os.write(fd, b"x" * 4096)
                aio.fdatasync(fd, lambda err, fd=fd: on_end(fd, err))
            await asyncio.wait_for(done, 10)
        finally:
            for fd in fds:
                os.close(fd)
        return ended, fds

    ended, fds = asyncio.run(main())
    assert ended == {fd: 0 for fd in fds}


def test_a_closed_descriptor_is_refused_with_ebadf(tmp_path):
    """io_submit refuses a closed descriptor at once (group commit then runs the round in
    its thread), and the context keeps working for the next file."""
    async def main():
        loop = asyncio.get_running_loop()
        aio = aio_fsync.for_loop(loop)
        fd = os.open(tmp_path / "gone", os.O_RDWR | os.O_CREAT)
        os.close(fd)
        got = loop.create_future()
        with pytest.raises(OSError) as refused:
            aio.fdatasync(fd, got.set_result)
        bad = refused.value.errno
        good_fd = os.open(tmp_path / "ok", os.O_RDWR | os.O_CREAT)
        ok = loop.create_future()
        try:
            aio.fdatasync(good_fd, ok.set_result)
            return bad, await asyncio.wait_for(ok, 10)
        finally:
            os.close(good_fd)

    assert asyncio.run(main()) == (errno.EBADF, 0)


def test_a_context_is_released_with_its_loop(tmp_path):
    """Test runs make thousands of loops: each loop's AIO context and eventfd go when the
    loop goes, so descriptors and the kernel's AIO slots (fs.aio-max-nr) do not run out."""
    def one_loop():
        async def main():
            aio = aio_fsync.for_loop(asyncio.get_running_loop())
            fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
            got = asyncio.get_running_loop().create_future()
            aio.fdatasync(fd, got.set_result)
            try:
                return await asyncio.wait_for(got, 10)
            finally:
                os.close(fd)
        return asyncio.run(main())

    assert one_loop() == 0
    gc.collect()
    before, slots = _open_fds(), _aio_slots()
    assert all(one_loop() == 0 for _ in range(60))
    gc.collect()
    assert _open_fds() <= before + 2
    assert _aio_slots() <= slots + 2 * aio_fsync._DEPTH   # (system-wide: room for another user)
