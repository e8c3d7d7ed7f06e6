from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from compat_tests.clients import Consumed, Rec


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 90))


class AiokafkaDriver:
    name = "aiokafka"

    def __init__(self, bootstrap: str):
        self.bootstrap = bootstrap

    async def _admin(self, fn):
        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
        await admin.start()
        try:
            return await fn(admin)
        finally:
            await admin.close()

    def create_topic(self, name, partitions, configs=None):
        run(self._admin(lambda a: a.create_topics(
            [NewTopic(name, partitions, 1, topic_configs=configs or {})])))

    def delete_topic(self, name):
        run(self._admin(lambda a: a.delete_topics([name])))

    def produce(self, topic, records: list[Rec], compression="none", **conf):
        async def go():
            p = AIOKafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=5,
                                 compression_type=None if compression == "none" else compression,
                                 **conf)
            await p.start()
            try:
                futs = [await p.send(topic, key=r.key, value=r.value, timestamp_ms=r.timestamp,
                                     headers=list(r.headers)) for r in records]
                return [(m.partition, m.offset) for m in await asyncio.gather(*futs)]
            finally:
                await p.stop()
        return run(go())

    def consume(self, topic, count, **conf):
        async def go():
            c = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False,
                                 auto_offset_reset="earliest", **conf)
            await c.start()
            try:
                tps = [TopicPartition(topic, p) for p in sorted(c.partitions_for_topic(topic) or
                                                                 await self._partitions(c, topic))]
                c.assign(tps)
                await c.seek_to_beginning(*tps)
                out = []
                idle = 0
                while len(out) < count and idle < 20:
                    batch = await c.getmany(timeout_ms=500)
                    idle = 0 if batch else idle + 1
                    for msgs in batch.values():
                        out += [Consumed(m.partition, m.offset, m.timestamp, m.key, m.value,
                                         tuple(m.headers)) for m in msgs]
                return out
            finally:
                await c.stop()
        return run(go())

    @staticmethod
    async def _partitions(c, topic):
        await c._client.force_metadata_update()
        return c.partitions_for_topic(topic)

    def latest_offsets(self, topic):
        async def go():
            c = AIOKafkaConsumer(bootstrap_servers=self.bootstrap)
            await c.start()
            try:
                parts = c.partitions_for_topic(topic) or await self._partitions(c, topic)
                ends = await c.end_offsets([TopicPartition(topic, p) for p in parts])
                return {tp.partition: off for tp, off in ends.items()}
            finally:
                await c.stop()
        return run(go())

    def describe_configs(self, topic):
        async def go(a):
            (resp,) = await a.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
            (resource,) = resp.resources
            return {e[0]: e[1] for e in resource[4]}
        return run(self._admin(go))

    def alter_config(self, topic, name, value):
        run(self._admin(lambda a: a.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, configs={name: value})])))
