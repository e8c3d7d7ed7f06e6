"""Frame -> handler -> response chunks: the glue between ``kbroker.net`` and the handlers.

``Dispatcher.dispatch(conn, frame)`` is called by the connection for each request frame and
returns what ``kbroker.net.connection`` expects: ``None`` (no response), the response frame
as a list of chunks, or an awaitable of either. A handler returns its response, an awaitable
of it, or a ``Deferred`` (kbroker.handlers.deferred), which the dispatcher completes from its
callback into a plain future, with no task.

* An ApiVersions request at a version we do not support gets Kafka's answer: an ApiVersions
  v0 response with UNSUPPORTED_VERSION and our ranges.
* Any other API key or version outside the registry closes the connection with a log line,
  as Kafka does; so does a body that fails to decode.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from time import perf_counter_ns

from kbroker import gc_policy
from kbroker.handlers import api_versions
from kbroker.handlers.context import RequestContext
from kbroker.handlers.deferred import Deferred
from kbroker.net.connection import CloseConnection
from kbroker.security.authenticator import gate as security_gate
from kbroker.security.authz_filters import authorized_handle
from kbroker.security.throttling import admit_mutations, apply as apply_quotas
from kbroker.slices import LEFT, run_for, run_in_slices
from kbroker.wire.errors import CodecError
from kbroker.wire.frame import decode_request_header, encode_response_chunks
from kbroker.wire.primitives import Reader

log = logging.getLogger("kbroker.requests")
# Kafka's kafka.request.logger: one line per completed request at DEBUG
request_log = logging.getLogger("kbroker.request.logger")

PRODUCE = 0
# A request body larger than this, when its schema has arrays of structs, is decoded by its
# steps reader (``Message.read_steps``): here for up to DECODE_IN_PLACE_S, the rest in slices
# (a Fetch naming 10,000 partitions took ~5 ms in one go). 32 KiB of Fetch is ~1,100
# partitions, ~0.6 ms; a large Produce is mostly records and decodes in place.
DECODE_IN_STEPS_BYTES = 32 * 1024
DECODE_IN_PLACE_S = 0.001


class Dispatcher:
    def __init__(self, broker, specs) -> None:
        self.broker = broker
        self.specs = specs
        self._now_ms = broker.clock.now_ms
        self.metrics = getattr(broker, "request_metrics", None)   # kbroker.metrics.requests

    def dispatch(self, conn, frame):
        hook = conn.state.get("frame_hook") if conn is not None else None
        if hook is not None:   # raw SASL tokens after a SaslHandshake v0
            return hook(conn, frame)
        t0 = perf_counter_ns()
        try:
            header, pos = decode_request_header(frame)
        except CodecError as e:
            raise CloseConnection(f"malformed request header: {e}") from None
        api_key = header.request_api_key
        version = header.request_api_version
        corr = header.correlation_id
        spec = self.specs.get(api_key)
        if spec is None or not spec.min_version <= version <= spec.max_version:
            if api_key == api_versions.API_KEY:
                resp = api_versions.unsupported_version_response(self.specs)
                return encode_response_chunks(corr, api_key, 0, resp)
            name = spec.name if spec else f"api key {api_key}"
            raise CloseConnection(
                f"unsupported request {name} v{version} from client {header.client_id!r}"
                + (f" (supported {spec.min_version}-{spec.max_version})" if spec else ""))
        security = getattr(self.broker, "security", None)
        if security is not None and conn is not None:
            security_gate(security, conn, api_key, spec.name, self._now_ms())
        try:
            if len(frame) - pos > DECODE_IN_STEPS_BYTES and spec.request_cls._steps is not None:
                steps = spec.request_cls.read_steps(Reader(frame, pos), version)
                req = run_for(steps, DECODE_IN_PLACE_S)
                if req is LEFT:
                    handled = asyncio.get_running_loop().create_future()
                    if conn is not None:
                        conn.hold_frames_until(handled)
                    return self._decoded_in_steps(conn, spec, header, steps, len(frame), t0, handled)
            else:
                req = spec.request_cls.read(Reader(frame, pos), version)
        except Exception as e:
            raise _malformed(spec, header, e) from None
        return self._serve(conn, spec, header, req, len(frame), t0)

    async def _decoded_in_steps(self, conn, spec, header, steps, nbytes, t0, handled):
        """The rest of a large request's decoding, in slices with the loop's other sliced work,
        then the request served. Until it is answered the collector is quiet: its objects are
        many and short-lived (kbroker.gc_policy). The quiet ends after ``_decode_and_serve``
        has returned, when they are gone: a collection that starts as it ends walks no request."""
        asyncio.current_task().set_name(f"{spec.name} v{header.request_api_version}")   # loop diagnostics
        gc_policy.begin_quiet()
        try:
            return await self._decode_and_serve(conn, spec, header, steps, nbytes, t0, handled)
        except asyncio.CancelledError as e:
            # (its client left) the traceback's frames hold the request's 10,000 partitions
            # in a cycle a collection would have to walk: they go now, by reference count
            raise e.with_traceback(None)
        finally:
            gc_policy.end_quiet()

    async def _decode_and_serve(self, conn, spec, header, steps, nbytes, t0, handled):
        """``handled`` is done once the handler ran: the connection's next frames wait for it."""
        try:
            try:
                req = await run_in_slices(steps)
            except Exception as e:
                raise _malformed(spec, header, e) from None
            result = self._serve(conn, spec, header, req, nbytes, t0)
        finally:
            handled.set_result(None)
        return (await result) if inspect.isawaitable(result) else result

    def _serve(self, conn, spec, header, req, nbytes, t0):
        """Handle a decoded request: its response's chunks, None, or an awaitable of either."""
        api_key = header.request_api_key
        security = getattr(self.broker, "security", None)
        ctx = RequestContext(self.broker, conn, api_key, header.request_api_version, header.correlation_id,
                             header.client_id, self._now_ms(), conn.listener_name if conn is not None else "PLAINTEXT")
        mutations = admit_mutations(ctx, req)   # controller_mutation_rate (KIP-599)
        if mutations is not None and mutations.refused is not None:
            result = mutations.refused
        elif security is not None and security.enforces(ctx.listener_name):
            result = authorized_handle(spec, ctx, req)   # Kafka's per-API ACL checks
        else:
            result = spec.handle(ctx, req)
        t_local = perf_counter_ns()
        if type(result) is Deferred:
            answer = asyncio.get_running_loop().create_future()
            result.then(functools.partial(self._deferred_done, answer, ctx, req, t0, t_local, nbytes, mutations))
            return answer
        if inspect.isawaitable(result):
            return self._finish(result, ctx, req, t0, t_local, nbytes, mutations)
        result = apply_quotas(ctx, req, result, nbytes, t_local - t0, mutations)   # KIP-219 throttling
        if inspect.isawaitable(result):
            return self._finish(result, ctx, req, t0, t_local, 0, None, throttled=True)
        return self._encoded(ctx, req, result, t0, t_local, t_local)

    async def _finish(self, awaitable, ctx, req, t0, t_local, nbytes, mutations, throttled=False):
        resp = await awaitable
        if not throttled:
            resp = apply_quotas(ctx, req, resp, nbytes, t_local - t0, mutations)
            if inspect.isawaitable(resp):
                resp = await resp
        return self._encoded(ctx, req, resp, t0, t_local, perf_counter_ns())

    def _deferred_done(self, answer, ctx, req, t0, t_local, nbytes, mutations, resp, error) -> None:
        """A Deferred response completed: quotas, metrics and encoding as ``_finish`` does,
        in the callback that completed it (no task)."""
        if answer.done():        # (the connection went away meanwhile)
            return
        if error is not None:
            answer.set_exception(error)
            return
        try:
            resp = apply_quotas(ctx, req, resp, nbytes, t_local - t0, mutations)
            if inspect.isawaitable(resp):     # held back for a quota: the task path
                later = asyncio.ensure_future(self._finish(resp, ctx, req, t0, t_local, 0, None, throttled=True))
                later.add_done_callback(functools.partial(_settle, answer))
                return
            answer.set_result(self._encoded(ctx, req, resp, t0, t_local, perf_counter_ns()))
        except Exception as e:  # noqa: BLE001 - the connection reports it and closes
            answer.set_exception(e)

    def _encoded(self, ctx, req, resp, t0, t_local, t_end):
        """The request is done: its metrics, then its response's chunks (None: no response)."""
        self._done(ctx, req, resp, t0, t_local, t_end)
        if resp is None:
            return None
        return encode_response_chunks(ctx.correlation_id, ctx.api_key, ctx.api_version, resp)

    def _done(self, ctx, req, resp, t0, t_local, t_end):
        if self.metrics is not None:
            self.metrics.observe(ctx.api_key, ctx.api_version, req, resp, t0, t_local, t_end,
                                 getattr(resp, "throttle_time_ms", 0) or 0)   # quotas (KIP-219)
        if request_log.isEnabledFor(logging.DEBUG):
            request_log.debug("Completed request: %s v%d correlation id %d from client %r on %s (%s), total %.3f ms, local %.3f ms",
                              self.specs[ctx.api_key].name, ctx.api_version, ctx.correlation_id, ctx.client_id,
                              ctx.listener_name, getattr(ctx.conn, "peer", None), (t_end - t0) / 1e6, (t_local - t0) / 1e6)


def _malformed(spec, header, e) -> CloseConnection:
    return CloseConnection(f"malformed {spec.name} v{header.request_api_version} request from client "
                           f"{header.client_id!r}: {e}")


def _settle(answer, task) -> None:
    """Copy a finished task's outcome to the future the connection waits on."""
    if answer.done():
        if not task.cancelled():
            task.exception()
        return
    if task.cancelled():
        answer.cancel()
    elif task.exception() is not None:
        answer.set_exception(task.exception())
    else:
        answer.set_result(task.result())
