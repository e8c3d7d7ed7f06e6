"""fdatasync through Linux's native AIO (io_submit with IOCB_CMD_FDSYNC), answered on the loop.

Group commit used to run each fdatasync in a worker thread. A Python thread needs the GIL
to start the call and again to report its end, and the event loop holds the GIL while it
reads and appends the next requests, so an fsync round started late and its answers left
late (~0.2 ms each way with one Java producer's five 16 KiB requests in flight). Here the
kernel runs the fdatasync on its own workqueue (Linux >= 4.18) and signals an eventfd that
the loop watches: no thread, no GIL hand-over.

One context per event loop (``for_loop``). Each call names a callback that runs on the loop
with 0 or the errno. The kernel holds its own reference to the file until the fsync ends,
so the caller may close its descriptor meanwhile. Where the system has no native AIO
(another kernel, a container that forbids it, ``KBROKER_AIO_FSYNC=0``), ``for_loop``
returns None and the caller keeps its thread.
"""

from __future__ import annotations

import ctypes
import logging
import os
import platform
import weakref
from typing import Callable

log = logging.getLogger(__name__)

# (io_setup, io_destroy, io_getevents, io_submit) by machine
_SYSCALLS = {"x86_64": (206, 207, 208, 209), "aarch64": (0, 1, 4, 2)}
_IOCB_CMD_FDSYNC = 3
_IOCB_FLAG_RESFD = 1
_EVENTS_PER_REAP = 64
_DEPTH = 128   # fsyncs in flight per loop (one per partition's round at most)


class _Iocb(ctypes.Structure):   # struct iocb, little-endian layout
    _fields_ = [("data", ctypes.c_uint64), ("key", ctypes.c_uint32), ("rw_flags", ctypes.c_int32),
                ("opcode", ctypes.c_uint16), ("reqprio", ctypes.c_int16), ("fildes", ctypes.c_uint32),
                ("buf", ctypes.c_uint64), ("nbytes", ctypes.c_uint64), ("offset", ctypes.c_int64),
                ("reserved2", ctypes.c_uint64), ("flags", ctypes.c_uint32), ("resfd", ctypes.c_uint32)]


class _IoEvent(ctypes.Structure):
    _fields_ = [("data", ctypes.c_uint64), ("obj", ctypes.c_uint64),
                ("res", ctypes.c_int64), ("res2", ctypes.c_int64)]


class _Timespec(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_long), ("nsec", ctypes.c_long)]


class AioFsync:
    """A kernel AIO context and its eventfd, registered with one event loop."""

    def __init__(self, loop) -> None:
        nums = _SYSCALLS.get(platform.machine())
        if nums is None or not hasattr(os, "eventfd"):
            raise OSError("no native AIO on this platform")
        setup, self._destroy, self._getevents, self._submit = nums
        # PyDLL keeps the GIL through the call: io_submit of an fsync and io_getevents with
        # no wait return at once, and dropping the GIL would let another thread take it for
        # up to a switch interval before the loop got it back.
        libc = ctypes.PyDLL(None, use_errno=True)
        self._syscall = libc.syscall
        self._syscall.restype = ctypes.c_long
        self._ctx = ctypes.c_ulong(0)
        if self._syscall(ctypes.c_long(setup), ctypes.c_long(_DEPTH), ctypes.byref(self._ctx)) != 0:
            e = ctypes.get_errno()
            raise OSError(e, f"io_setup: {os.strerror(e)}")
        self._efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        # released when this object goes, with its loop (whose reader is what holds it)
        weakref.finalize(self, _release, self._syscall, self._destroy, self._ctx.value, self._efd)
        self._callbacks: dict[int, Callable[[int], None]] = {}
        self._token = 0
        self._iocb = _Iocb()
        self._iocbs = (ctypes.POINTER(_Iocb) * 1)(ctypes.pointer(self._iocb))
        self._events = (_IoEvent * _EVENTS_PER_REAP)()
        self._no_wait = _Timespec(0, 0)
        loop.add_reader(self._efd, self._reap)

    def fdatasync(self, fd: int, callback: Callable[[int], None]) -> None:
        """Start an fdatasync of ``fd``; ``callback(errno)`` runs on the loop when it ends
        (errno 0: done). Raises OSError if the kernel refuses it (the caller falls back)."""
        self._token += 1
        cb = self._iocb   # the kernel copies it in io_submit: one is enough
        ctypes.memset(ctypes.byref(cb), 0, ctypes.sizeof(cb))
        cb.data, cb.opcode, cb.fildes = self._token, _IOCB_CMD_FDSYNC, fd
        cb.flags, cb.resfd = _IOCB_FLAG_RESFD, self._efd
        if self._syscall(ctypes.c_long(self._submit), self._ctx, ctypes.c_long(1), self._iocbs) != 1:
            e = ctypes.get_errno()
            raise OSError(e, f"io_submit: {os.strerror(e)}")
        self._callbacks[self._token] = callback

    def _reap(self) -> None:
        try:
            os.eventfd_read(self._efd)
        except BlockingIOError:
            return
        while True:
            n = self._syscall(ctypes.c_long(self._getevents), self._ctx, ctypes.c_long(0),
                              ctypes.c_long(_EVENTS_PER_REAP), self._events, ctypes.byref(self._no_wait))
            if n <= 0:
                return
            done = [(ev.data, ev.res) for ev in self._events[:n]]
            for token, res in done:
                callback = self._callbacks.pop(token, None)
                if callback is not None:
                    try:
                        callback(-res if res < 0 else 0)
                    except Exception:  # pragma: no cover - a callback's own bug
                        log.exception("an fdatasync callback failed")
            if n < _EVENTS_PER_REAP:
                return


def _release(syscall, destroy: int, ctx: int, efd: int) -> None:
    syscall(ctypes.c_long(destroy), ctypes.c_ulong(ctx))
    os.close(efd)


_by_loop: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def for_loop(loop) -> AioFsync | None:
    """The loop's context (made on first use), or None where native AIO is unavailable."""
    if os.environ.get("KBROKER_AIO_FSYNC", "1") == "0":
        return None
    aio = _by_loop.get(loop, False)
    if aio is False:
        try:
            aio = AioFsync(loop)
        except OSError as e:
            log.info("fsync rounds run in a thread: native AIO unavailable (%s)", e)
            aio = None
        _by_loop[loop] = aio
    return aio

