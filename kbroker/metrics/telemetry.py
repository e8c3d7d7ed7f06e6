"""KIP-714 client telemetry: clients ask what to push (GetTelemetrySubscriptions) and push
OTLP metrics (PushTelemetry); the latest value of every pushed metric is exposed on the
metrics endpoint, labelled with the client's instance id (``org.apache.kafka.producer.
record.queue.time.avg`` -> ``org_apache_kafka_producer_record_queue_time_avg``).

Like Kafka, the broker advertises the two APIs only when telemetry is configured: here when
``metrics.port`` is set and ``client.telemetry.metrics`` lists metric-name prefixes
("*" for all)."""

from __future__ import annotations

import re
import uuid
import zlib

from prometheus_client.core import GaugeMetricFamily

from kbroker.metrics.otlp import ProtoError, decode_metrics
from kbroker.wire import compression as codecs
from kbroker.wire.errors import Errors

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
ACCEPTED = [ZSTD, LZ4, GZIP, SNAPPY]
_DECOMPRESS = {GZIP: codecs.gzip_decompress, SNAPPY: codecs.snappy_decompress,
               LZ4: codecs.lz4_decompress, ZSTD: codecs.zstd_decompress}
_NAME = re.compile(r"[^a-zA-Z0-9_:]")


def prom_name(name: str) -> str:
    n = _NAME.sub("_", name)
    return n if not n[:1].isdigit() else "_" + n


class ClientTelemetry:
    def __init__(self, prefixes: list[str], push_interval_ms: int, max_bytes: int = 1 << 20) -> None:
        self.prefixes = ["" if p == "*" else p for p in prefixes]
        self.push_interval_ms = push_interval_ms
        self.max_bytes = max_bytes
        # one id per subscription set, so a client notices a change
        self.subscription_id = zlib.crc32(("|".join(self.prefixes) + f"/{push_interval_ms}").encode()) & 0x7FFFFFFF
        # client instance id -> {"client": {...resource attrs}, "metrics": {(name, attrs): value}, "at": ms}
        self.clients: dict[uuid.UUID, dict] = {}
        self.pushes = 0
        self.rejected = 0

    def subscription(self, client_instance_id: uuid.UUID) -> uuid.UUID:
        return client_instance_id if client_instance_id.int else uuid.uuid4()

    def push(self, client_instance_id: uuid.UUID, subscription_id: int, compression: int, data, now_ms: int,
             terminating: bool = False) -> int:
        """Store a push; returns a Kafka error code."""
        if subscription_id != self.subscription_id:
            self.rejected += 1
            return Errors.UNKNOWN_SUBSCRIPTION_ID
        if data is None:
            return 0
        if len(data) > self.max_bytes:
            self.rejected += 1
            return Errors.TELEMETRY_TOO_LARGE
        try:
            if compression != NONE:
                if compression not in _DECOMPRESS:
                    return Errors.UNSUPPORTED_COMPRESSION_TYPE
                data = _DECOMPRESS[compression](data, max_size=self.max_bytes * 16)
            resource, points = decode_metrics(data)
        except (ProtoError, ValueError):
            self.rejected += 1
            return Errors.INVALID_RECORD
        entry = self.clients.setdefault(client_instance_id, {"client": {}, "metrics": {}})
        entry["client"].update(resource)
        entry["at"] = now_ms
        for name, attrs, value in points:
            if any(name.startswith(p) for p in self.prefixes):
                entry["metrics"][(name, tuple(sorted(attrs.items())))] = value
        self.pushes += 1
        return 0

    def families(self):
        yield GaugeMetricFamily("kbroker_client_telemetry_clients", "Clients that pushed telemetry", value=len(self.clients))
        fams: dict[str, GaugeMetricFamily] = {}
        for cid, entry in self.clients.items():
            base = {"client_instance_id": str(cid)}
            for key in ("client_id", "client_software_name", "client_software_version"):
                if key in entry["client"]:
                    base[key] = entry["client"][key]
            for (name, attrs), value in entry["metrics"].items():
                labels = {**base, **{prom_name(k): v for k, v in attrs}}
                f = fams.get(name)
                if f is None:
                    f = fams[name] = _LabelledGauge(prom_name(name), f"client metric {name} (KIP-714)")
                f.add(labels, value)
        for f in fams.values():
            yield from f.families()


class _LabelledGauge:
    """Points of one metric may carry different attribute sets: one family per label set."""

    def __init__(self, name: str, doc: str) -> None:
        self.name, self.doc = name, doc
        self.by_keys: dict[tuple, GaugeMetricFamily] = {}

    def add(self, labels: dict[str, str], value: float) -> None:
        keys = tuple(sorted(labels))
        f = self.by_keys.get(keys)
        if f is None:
            f = self.by_keys[keys] = GaugeMetricFamily(self.name, self.doc, labels=list(keys))
        f.add_metric([labels[k] for k in keys], value)

    def families(self):
        # Prometheus wants one family per name: merge label sets (missing labels empty)
        if len(self.by_keys) == 1:
            yield from self.by_keys.values()
            return
        all_keys = sorted({k for keys in self.by_keys for k in keys})
        merged = GaugeMetricFamily(self.name, self.doc, labels=all_keys)
        for keys, f in self.by_keys.items():
            for s in f.samples:
                merged.add_metric([s.labels.get(k, "") for k in all_keys], s.value)
        yield merged
