"""The asyncio side of replication on a broker: runs the pure state machines.

* One ``ReplicaFetcher`` per leader broker (Kafka's ``num.replica.fetchers`` = 1 per source
  broker), in a task that sends its Fetch over ``kbroker.net.client.KafkaClient`` to the
  leader's inter-broker endpoint and applies the answer.
* Partitions move between fetchers as the replica manager reports role changes.
* Every 250 ms (and when asked), each partition this broker leads may propose an ISR change
  (``LeaderState.propose_isr_change``) as AlterPartition to the active controller; the
  answer (or the PartitionChangeRecord) updates the leader's view.
* ``replication-offset-checkpoint`` is written every
  ``replica.high.watermark.checkpoint.interval.ms``.
"""

from __future__ import annotations

import asyncio
import logging

from kbroker.net.peers import PeerClients
from kbroker.replication.fetcher import ReplicaFetcher
from kbroker.replication.roles import RoleChange
from kbroker.slices import each, run_in_slices
from kbroker.wire.errors import Errors
from kbroker.wire.generated.alter_partition_request import AlterPartitionRequest

log = logging.getLogger("kbroker.replication")

ISR_CHECK_MS = 250


class ReplicationDriver:
    def __init__(self, server) -> None:
        self.server = server
        self.cfg = server.config
        self.replicas = server.replicas
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self.tasks: dict[int, asyncio.Task] = {}
        # one connection per source broker on the inter-broker listener (its TLS/SASL)
        self.peers = PeerClients(server, f"replica-fetcher-{server.node_id}",
                                 request_timeout_ms=self.cfg["replica.fetch.wait.max.ms"] + 30_000)
        self.wakeups: dict[int, asyncio.Event] = {}
        self._isr_task: asyncio.Task | None = None
        self._alter_inflight: set = set()
        # the partitions led here, kept by role changes: the ISR check walks these, not every
        # replica (10,000 partitions walked every 250 ms held the loop 10-20 ms each time)
        self._leading: set = set()
        self._stopped = False
        self.replicas.role_listeners.append(self._on_role)

    @property
    def now_ms(self) -> int:
        return self.server.clock.now_ms()

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        self.replicas.broker_epoch = self.server.broker_epoch
        self._leading = {p for p in self.replicas.all_partitions() if p.leader_state is not None}
        for part in self.replicas.all_partitions():
            if part.leader_state is None and part.leader_id >= 0 and self.server.node_id in part.replicas:
                self._follow(part)
        self._isr_task = asyncio.create_task(self._isr_loop(), name="isr-changes")

    async def stop(self) -> None:
        self._stopped = True
        tasks = list(self.tasks.values()) + ([self._isr_task] if self._isr_task else [])
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.peers.close()

    # -- roles -----------------------------------------------------------------------------

    def _on_role(self, part, change: RoleChange) -> None:
        if self._stopped:
            return
        if part.leader_state is not None and change is not RoleChange.REMOVED:
            self._leading.add(part)
        else:
            self._leading.discard(part)
        if change in (RoleChange.BECAME_FOLLOWER, RoleChange.BECAME_LEADER, RoleChange.ISR_CHANGED,
                      RoleChange.REMOVED):
            for f in self.fetchers.values():
                f.remove(part.topic, part.index)
        if change is RoleChange.REMOVED:
            return
        if part.leader_state is None and part.leader_id >= 0 and self.server.node_id in part.replicas \
                and self._isr_task is not None:
            self._follow(part)

    def _follow(self, part) -> None:
        leader = part.leader_id
        if leader == self.server.node_id:
            return
        f = self.fetchers.get(leader)
        if f is None:
            f = ReplicaFetcher(self.server.node_id, leader, broker_epoch=self.server.broker_epoch,
                               max_wait_ms=self.cfg["replica.fetch.wait.max.ms"],
                               partition_max_bytes=self.cfg["replica.fetch.max.bytes"],
                               max_bytes=self.cfg["replica.fetch.response.max.bytes"],
                               backoff_ms=1000, throttle=self.server.replication_throttles.follower)
            self.fetchers[leader] = f
            self.wakeups[leader] = asyncio.Event()
        f.broker_epoch = self.server.broker_epoch
        log.info("%s follows broker %d (leader epoch %d) from offset %d", part, leader,
                 part.leader_epoch, part.log_end_offset)
        f.add(part.topic, part.index, part.topic_id, part.leader_epoch, part)
        task = self.tasks.get(leader)
        if task is None or task.done():
            self.tasks[leader] = asyncio.create_task(self._fetch_loop(leader), name=f"replica-fetcher-{leader}")
        self.wakeups[leader].set()

    # -- fetching --------------------------------------------------------------------------

    async def _fetch_loop(self, leader: int) -> None:
        f = self.fetchers[leader]
        wake = self.wakeups[leader]
        last_error = None
        while not self._stopped:
            if not f.partitions:
                wake.clear()
                await wake.wait()
                continue
            now = self.now_ms
            req = f.build_request(now)
            if req is None:
                nxt = f.next_deadline()
                if nxt is None or nxt <= now:   # none backs off: the throttle holds them all
                    nxt = now + f.backoff_ms
                wake.clear()
                try:
                    await asyncio.wait_for(wake.wait(), max(0.01, (nxt - now) / 1000))
                except asyncio.TimeoutError:
                    pass
                continue
            client = self.peers.get(leader)
            if client is None:     # the leader is fenced or unknown: wait for metadata
                f.backoff_all(now)
                continue
            try:
                resp = await client.send(req)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                if repr(e) != last_error:   # once per distinct failure, not every retry
                    log.warning("fetch from broker %d failed: %r", leader, e)
                    last_error = repr(e)
                f.backoff_all(self.now_ms)
                continue
            last_error = None
            appended = []
            try:
                appended = f.handle_response(req, resp, self.now_ms)
            except Exception:
                log.exception("applying a fetch from broker %d failed", leader)
                f.backoff_all(self.now_ms)
            for t in f.truncations:
                log.info("%s-%d truncated to %d: %s", t.topic, t.partition, t.offset, t.reason)
            f.truncations.clear()
            if appended:
                await self._durable(f, leader, appended)

    async def _durable(self, f: ReplicaFetcher, leader: int, appended: list) -> None:
        """Wait for the fsyncs the last answer's appends started (flush.messages) before
        the next Fetch reports their ends to the leader, as Kafka's fetcher thread, which
        fsyncs inside the append; here the loop serves everyone else meanwhile. A partition
        whose fsync failed (or that was truncated meanwhile) backs off."""
        waits = []
        for fp in appended:
            w = fp.replica.durable_wait()
            if w is not None:
                waits.append((fp, w))
        if not waits:
            return
        outcomes = await asyncio.gather(*(w for _, w in waits), return_exceptions=True)
        for (fp, _), outcome in zip(waits, outcomes):
            if isinstance(outcome, Exception):
                log.warning("%s-%d: fsync of data fetched from broker %d failed: %r",
                            fp.topic, fp.partition, leader, outcome)
                fp.backoff_until_ms = self.now_ms + f.backoff_ms

    # -- ISR changes -----------------------------------------------------------------------

    async def _isr_loop(self) -> None:
        last_checkpoint = self.now_ms
        every = self.cfg["replica.high.watermark.checkpoint.interval.ms"]
        lag = self.cfg["replica.lag.time.max.ms"]
        while not self._stopped:
            await asyncio.sleep(ISR_CHECK_MS / 1000)
            now = self.now_ms
            def check(part) -> None:
                ls = part.leader_state
                if ls is None:
                    self._leading.discard(part)
                    return
                if not ls.followers:
                    return
                prop = ls.propose_isr_change(now, part.log_end_offset, lag, self._isr_eligible)
                if prop is None and ls.pending is not None and part not in self._alter_inflight:
                    prop = ls.pending      # unanswered before: send it again
                if prop is not None and part not in self._alter_inflight:
                    self._alter_inflight.add(part)
                    asyncio.create_task(self._alter(part, prop))
            try:
                # in slices: 10,000 leaders took ~5 ms a pass
                await run_in_slices(each(list(self._leading), check))
                if now - last_checkpoint >= every:
                    last_checkpoint = now
                    await run_in_slices(self.replicas.checkpoint_high_watermarks_steps())
            except Exception:
                log.exception("ISR check failed")

    def _isr_eligible(self, broker_id: int) -> bool:
        b = self.server.image.brokers.get(broker_id)
        return b is not None and not b.fenced and not b.in_controlled_shutdown

    async def _alter(self, part, prop) -> None:
        R = AlterPartitionRequest
        P = R.TopicData.PartitionData
        req = R(broker_id=self.server.node_id, broker_epoch=self.server.broker_epoch, topics=[
            R.TopicData(topic_name=part.topic, topic_id=part.topic_id, partitions=[P(
                partition_index=part.index, leader_epoch=prop.leader_epoch,
                # v3 (what brokers here negotiate) carries members with their broker epochs
                new_isr_with_epochs=[P.BrokerState(broker_id=b, broker_epoch=e)
                                     for b, e in zip(prop.new_isr, prop.broker_epochs)],
                partition_epoch=prop.partition_epoch)])])
        try:
            resp = await self.server.control.channel.send(req)
            ls = part.leader_state
            if ls is None:
                return
            code = resp.error_code
            pd = None
            if not code and resp.topics and resp.topics[0].partitions:
                pd = resp.topics[0].partitions[0]
                code = pd.error_code
            if code == Errors.NONE and pd is not None:
                ls.on_alter_partition_response(prop, 0, pd.isr, pd.partition_epoch)
                part.isr = list(pd.isr)
                part.partition_epoch = max(part.partition_epoch, pd.partition_epoch)
                log.info("%s ISR now %s (partition epoch %d)", part, pd.isr, pd.partition_epoch)
                self.replicas._on_hw(part)
            else:
                log.info("%s ISR change to %s refused: %s", part, list(prop.new_isr), Errors(code).name
                         if code in Errors._value2member_map_ else code)
                ls.on_alter_partition_response(prop, code)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.info("AlterPartition for %s failed: %s (will retry)", part, e)
        finally:
            self._alter_inflight.discard(part)
