"""The broker side of the broker lifecycle (Kafka's BrokerLifecycleManager): register with
the active controller, heartbeat every ``broker.heartbeat.interval.ms``, learn when it is
unfenced, and shut down in a controlled way.

All of it goes through ``ControllerChannel`` (the network), so a combined node registers with
its own controller exactly as a remote broker would.

* ``register()``: BrokerRegistration with this process's incarnation id, listeners, rack and
  supported features; retried until the controller answers. The epoch it returns is the
  broker epoch of every later request.
* ``run()``: a heartbeat every interval with the offset of the metadata the broker has applied
  (``current_metadata_offset``); the controller unfences the broker once that reaches its
  registration. STALE_BROKER_EPOCH / BROKER_ID_NOT_REGISTERED (a controller that lost the
  registration, or fenced us for good) mean: register again.
* ``controlled_shutdown(timeout)``: heartbeats with ``want_shut_down`` until the controller
  says ``should_shut_down`` (it has moved every leadership away), or the timeout.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Callable

from kbroker.kraft.controller import METADATA_VERSION, METADATA_VERSION_FEATURE
from kbroker.kraft.controller_channel import ControllerChannel, ControllerUnavailable
from kbroker.wire import registry as wire
from kbroker.wire.errors import Errors

log = logging.getLogger("kbroker.kraft.lifecycle")

BROKER_REGISTRATION, BROKER_HEARTBEAT = 62, 63


class BrokerLifecycle:
    def __init__(self, channel: ControllerChannel, *, broker_id: int, cluster_id: str,
                 listeners: list[tuple[str, str, int, int]], rack: str | None,
                 metadata_offset: Callable[[], int], heartbeat_interval_ms: int = 2000,
                 incarnation_id: uuid.UUID | None = None) -> None:
        self.channel = channel
        self.broker_id = broker_id
        self.cluster_id = cluster_id
        self.listeners = listeners
        self.rack = rack
        self.metadata_offset = metadata_offset
        self.interval_ms = heartbeat_interval_ms
        self.incarnation_id = incarnation_id or uuid.uuid4()
        self.epoch = -1
        self.fenced = True
        self.caught_up = False
        self._unfenced = asyncio.Event()
        self._stopping = False

    # -- registration ------------------------------------------------------------------------

    async def register(self) -> int:
        Req = wire.REQUESTS[BROKER_REGISTRATION]
        req = Req(broker_id=self.broker_id, cluster_id=self.cluster_id, incarnation_id=self.incarnation_id,
                  listeners=[Req.Listener(name=n, host=h, port=p, security_protocol=sp) for n, h, p, sp in self.listeners],
                  features=[Req.Feature(name=METADATA_VERSION_FEATURE, min_supported_version=1,
                                        max_supported_version=METADATA_VERSION)],
                  rack=self.rack, log_dirs=[], previous_broker_epoch=self.epoch)
        while True:
            try:
                resp = await self.channel.send(req)
            except ControllerUnavailable as e:
                log.warning("broker %d registration: %s; retrying", self.broker_id, e)
                continue
            if resp.error_code == 0:
                self.epoch = resp.broker_epoch
                self.fenced = True
                self._unfenced.clear()
                log.info("broker %d registered (incarnation %s), epoch %d", self.broker_id, self.incarnation_id, self.epoch)
                return self.epoch
            if resp.error_code in (Errors.INCONSISTENT_CLUSTER_ID, Errors.UNSUPPORTED_VERSION):
                raise RuntimeError(f"the controller refused broker {self.broker_id}'s registration: "
                                   f"{Errors(resp.error_code).name} (cluster id {self.cluster_id})")
            log.info("broker %d registration: %s; retrying", self.broker_id, Errors(resp.error_code).name)
            await asyncio.sleep(self.interval_ms / 1000)

    # -- heartbeats --------------------------------------------------------------------------

    async def heartbeat(self, want_shut_down: bool = False):
        Req = wire.REQUESTS[BROKER_HEARTBEAT]
        req = Req(broker_id=self.broker_id, broker_epoch=self.epoch,
                  current_metadata_offset=self.metadata_offset(), want_fence=False,
                  want_shut_down=want_shut_down)
        resp = await self.channel.send(req, timeout_ms=max(self.interval_ms, 1000))
        if resp.error_code in (Errors.STALE_BROKER_EPOCH, Errors.BROKER_ID_NOT_REGISTERED):
            log.warning("broker %d heartbeat: %s; registering again", self.broker_id, Errors(resp.error_code).name)
            await self.register()
            return resp
        if resp.error_code == 0:
            self.caught_up = resp.is_caught_up
            if self.fenced != resp.is_fenced:
                log.info("broker %d is %s", self.broker_id, "fenced" if resp.is_fenced else "unfenced")
            self.fenced = resp.is_fenced
            if not self.fenced:
                self._unfenced.set()
            else:
                self._unfenced.clear()
        return resp

    async def wait_unfenced(self, timeout_s: float) -> bool:
        """Heartbeat quickly until the controller unfences this broker (start-up)."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout_s
        while self.fenced and loop.time() < end:
            try:
                await self.heartbeat()
            except ControllerUnavailable as e:
                log.info("broker %d: %s", self.broker_id, e)
            if self.fenced:
                await asyncio.sleep(0.05)
        return not self.fenced

    async def run(self) -> None:
        while not self._stopping:
            await asyncio.sleep(self.interval_ms / 1000)
            if self._stopping:
                break
            try:
                await self.heartbeat()
            except ControllerUnavailable as e:
                log.warning("broker %d heartbeat: %s", self.broker_id, e)
            except Exception:
                log.exception("broker %d heartbeat failed", self.broker_id)

    async def controlled_shutdown(self, timeout_s: float, needed: Callable[[], bool] = lambda: True) -> bool:
        """True once the controller lets this broker go; False after the timeout, or as soon as
        ``needed()`` says there is no point any more (no other live broker to take this one's
        leaderships: when a whole cluster stops at once, the others' fencing arrives while
        this broker still waits for a controller, and the quorum may be gone for good)."""
        self._stopping = True
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout_s
        while loop.time() < end:
            if not needed():
                log.info("broker %d: controlled shutdown ended, no other live broker is left",
                         self.broker_id)
                return False
            try:
                resp = await asyncio.wait_for(self.heartbeat(want_shut_down=True), max(0.1, end - loop.time()))
            except (ControllerUnavailable, asyncio.TimeoutError) as e:
                log.info("broker %d controlled shutdown: %s", self.broker_id, e)
                continue
            if resp.error_code == 0 and resp.should_shut_down:
                log.info("broker %d: controlled shutdown complete", self.broker_id)
                return True
            await asyncio.sleep(min(0.1, self.interval_ms / 1000))
        log.warning("broker %d: controlled shutdown did not complete within %.1f s", self.broker_id, timeout_s)
        return False
