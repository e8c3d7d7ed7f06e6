"""Produce and consume through each real client with security settings, for the security
compat tests. ``mode`` is one of MODES; ``creds`` says which user/password/certificate to use."""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from compat_tests.security_certs import Certs

MODES = ("sasl_ssl_scram512", "mtls", "sasl_plaintext_plain")


@dataclass
class Target:
    mode: str
    bootstrap: str
    certs: Certs
    user: str = "alice"
    password: str = "alice-secret"
    rogue: bool = False       # present the untrusted client certificate

    @property
    def protocol(self) -> str:
        return {"sasl_ssl_scram512": "SASL_SSL", "mtls": "SSL", "sasl_plaintext_plain": "SASL_PLAINTEXT"}[self.mode]

    @property
    def mechanism(self) -> str | None:
        return {"sasl_ssl_scram512": "SCRAM-SHA-512", "sasl_plaintext_plain": "PLAIN"}.get(self.mode)

    def _cert_key(self):
        c = self.certs
        return (c.rogue_cert, c.rogue_key) if self.rogue else (c.client_cert, c.client_key)

    def confluent(self) -> dict:
        conf = {"bootstrap.servers": self.bootstrap, "security.protocol": self.protocol}
        if self.mechanism:
            conf.update({"sasl.mechanism": self.mechanism, "sasl.username": self.user, "sasl.password": self.password})
        if "SSL" in self.protocol:
            conf["ssl.ca.location"] = str(self.certs.ca)
        if self.mode == "mtls":
            cert, key = self._cert_key()
            conf.update({"ssl.certificate.location": str(cert), "ssl.key.location": str(key)})
        return conf

    def kafka_python(self) -> dict:
        conf = {"bootstrap_servers": self.bootstrap, "security_protocol": self.protocol}
        if self.mechanism:
            conf.update({"sasl_mechanism": self.mechanism, "sasl_plain_username": self.user,
                         "sasl_plain_password": self.password})
        if "SSL" in self.protocol:
            conf["ssl_cafile"] = str(self.certs.ca)
        if self.mode == "mtls":
            cert, key = self._cert_key()
            conf.update({"ssl_certfile": str(cert), "ssl_keyfile": str(key)})
        return conf

    def aiokafka(self) -> dict:
        conf = self.kafka_python()
        if "SSL" in self.protocol:
            from aiokafka.helpers import create_ssl_context
            cafile = conf.pop("ssl_cafile")
            conf["ssl_context"] = create_ssl_context(cafile=cafile, certfile=conf.pop("ssl_certfile", None),
                                                     keyfile=conf.pop("ssl_keyfile", None))
        return conf

    def java(self) -> dict:
        conf = {"security.protocol": self.protocol}
        if self.mechanism:
            module = ("org.apache.kafka.common.security.scram.ScramLoginModule" if self.mechanism.startswith("SCRAM")
                      else "org.apache.kafka.common.security.plain.PlainLoginModule")
            conf.update({"sasl.mechanism": self.mechanism,
                         "sasl.jaas.config": f'{module} required username="{self.user}" password="{self.password}";'})
        if "SSL" in self.protocol:
            conf.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.certs.ca)})
        if self.mode == "mtls":
            cert, key = self._cert_key()
            # Java's PEM keystore: key + certificate in one file
            pem = self.certs.dir / ("rogue.pem" if self.rogue else "client.pem")
            if self.rogue and not pem.exists():
                pem.write_bytes(key.read_bytes() + cert.read_bytes())
            conf.update({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(pem)})
        return conf


def roundtrip(client: str, t: Target, topic: str, values: list[bytes]) -> list[bytes]:
    """Produce ``values`` (acks=all), then read the topic from the start; the values read."""
    return {"confluent-kafka": _confluent, "kafka-python": _kafka_python, "aiokafka": _aiokafka,
            "java-4.3.0": _java}[client](t, topic, values)


def _confluent(t, topic, values):
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
    errors = []
    p = Producer({**t.confluent(), "linger.ms": 5, "message.timeout.ms": 20000,
                  "error_cb": lambda e: errors.append(e)})
    acks = []
    for v in values:
        p.produce(topic, v, on_delivery=lambda e, m: acks.append(e))
    p.flush(30)
    if any(acks) or len(acks) != len(values):
        raise RuntimeError(f"produce failed: {acks[:3]} {errors[:3]}")
    c = Consumer({**t.confluent(), "group.id": "sec-rt", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        out = []
        while len(out) < len(values):
            msgs = c.consume(len(values) - len(out), timeout=15)
            if not msgs:
                break
            for m in msgs:
                if m.error():
                    raise RuntimeError(m.error())
                out.append(m.value())
        return out
    finally:
        c.close()


def _kafka_python(t, topic, values):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    p = KafkaProducer(acks="all", linger_ms=5, **t.kafka_python())
    try:
        for f in [p.send(topic, v) for v in values]:
            f.get(30)
    finally:
        p.close(10)
    c = KafkaConsumer(enable_auto_commit=False, auto_offset_reset="earliest", **t.kafka_python())
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        out, idle = [], 0
        while len(out) < len(values) and idle < 30:
            batch = c.poll(timeout_ms=500)
            idle = 0 if batch else idle + 1
            for msgs in batch.values():
                out += [m.value for m in msgs]
        return out
    finally:
        c.close()


def _aiokafka(t, topic, values):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    async def go():
        p = AIOKafkaProducer(acks="all", linger_ms=5, **t.aiokafka())
        await p.start()
        try:
            for f in [await p.send(topic, v) for v in values]:
                await f
        finally:
            await p.stop()
        c = AIOKafkaConsumer(enable_auto_commit=False, auto_offset_reset="earliest", **t.aiokafka())
        await c.start()
        try:
            tp = TopicPartition(topic, 0)
            c.assign([tp])
            await c.seek_to_beginning(tp)
            out = []
            while len(out) < len(values):
                batch = await c.getmany(timeout_ms=10000)
                if not batch:
                    break
                for msgs in batch.values():
                    out += [m.value for m in msgs]
            return out
        finally:
            await c.stop()
    return asyncio.run(asyncio.wait_for(go(), 90))


def _java(t, topic, values):
    from compat_tests.clients import Rec
    from compat_tests.clients.java import JavaDriver
    d = JavaDriver(t.bootstrap, "4.3.0")
    conf = t.java()
    now = int(time.time() * 1000)
    d.produce(topic, [Rec(None, v, now) for v in values], **{**conf, "acks": "all", "delivery.timeout.ms": "30000",
                                                           "request.timeout.ms": "15000"})
    return [c.value for c in d.consume(topic, len(values), **conf)]
