"""Capture the first requests real Kafka clients send, as golden-byte fixtures.

    python tests/wire/golden/capture_clients.py [client ...] [scenario ...]

A throwaway listener plays a one-broker cluster for one client at a time and records every
request frame. It answers with kbroker's own codec: ApiVersions (every version our schemas
know, or UNSUPPORTED_VERSION at v0 for a newer one, as Kafka does), Metadata (itself as the
only broker, leader of golden-topic[0]), InitProducerId, Produce, Fetch and ListOffsets with
minimal success answers, and hangs up once the scenario's last request (Metadata, Produce or
Fetch) has been answered. Each request is written to golden/<client>/<scenario>/<nn>_<Api>_v<N>.hex
with a comment saying which client produced it.

Not a test: run it by hand when a client version changes, and commit the fixtures.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(REPO))

from kbroker.wire import registry  # noqa: E402
from kbroker.wire.errors import Errors  # noqa: E402
from kbroker.wire.frame import FrameDecoder, decode_request, decode_request_header, encode_response  # noqa: E402
from kbroker.wire.generated.api_versions_response import ApiVersionsResponse  # noqa: E402
from kbroker.wire.generated.fetch_response import FetchResponse  # noqa: E402
from kbroker.wire.generated.find_coordinator_response import FindCoordinatorResponse  # noqa: E402
from kbroker.wire.generated.init_producer_id_response import InitProducerIdResponse  # noqa: E402
from kbroker.wire.generated.list_offsets_response import ListOffsetsResponse  # noqa: E402
from kbroker.wire.generated.metadata_response import MetadataResponse  # noqa: E402
from kbroker.wire.generated.produce_response import ProduceResponse  # noqa: E402


TOPIC = "golden-topic"
TOPIC_ID = uuid.UUID("2c9b3d47-6f1e-4a5b-8c3d-9e0f1a2b3c4d")
TARGET = {"bootstrap": 3, "produce": 0, "fetch": 1}   # scenario -> API key that ends it
ANSWERED = (0, 1, 2, 3, 10, 18, 22)   # the APIs advertised (and answered) by the listener


class Listener:
    def __init__(self, scenario: str = "bootstrap"):
        self.scenario = scenario
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.frames: list[bytes] = []
        self.done = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        dec = FrameDecoder()
        try:
            while not self.done.is_set():
                data = conn.recv(65536)
                if not data:
                    return
                for frame in dec.feed(data):
                    frame = bytes(frame)
                    self.frames.append(frame)
                    conn.sendall(self._answer(frame))
        finally:
            conn.close()

    def _answer(self, frame: bytes):
        """Reply bytes for a request, or None to hang up (scenario complete or unknown API)."""
        header, _ = decode_request_header(frame)
        key, ver, cid = header.request_api_key, header.request_api_version, header.correlation_id
        if key == 18:   # ApiVersions
            lo, hi = registry.VERSIONS[18]
            keys = [ApiVersionsResponse.ApiVersion(api_key=k, min_version=v[0], max_version=v[1])
                    for k, v in sorted(registry.VERSIONS.items()) if k in ANSWERED]
            if ver > hi:
                body = ApiVersionsResponse(error_code=Errors.UNSUPPORTED_VERSION, api_keys=keys).encode(0)
            else:
                body = ApiVersionsResponse(api_keys=keys).encode(ver)
            return encode_response(cid, 0, body)
        _, req = decode_request(frame)
        resp = self._response(key, ver, req)
        if resp is None:
            return b""   # not ours to answer: record it, stay silent, let the client time out
        if key == TARGET[self.scenario]:
            self.done.set()
        return encode_response(cid, registry.response_header_version(key, ver), resp.encode(ver))

    def _response(self, key, ver, req):
        if key == 3:    # Metadata: one broker (us); golden-topic with one partition led by us
            M = MetadataResponse
            T = M.MetadataResponseTopic
            if self.scenario == "bootstrap":
                names = [t.name for t in (req.topics or []) if t.name]
                topics = [T(error_code=Errors.UNKNOWN_TOPIC_OR_PARTITION, name=n) for n in names]
            elif req.topics == []:
                topics = []
            else:
                topics = [T(name=TOPIC, topic_id=TOPIC_ID, partitions=[T.MetadataResponsePartition(
                    partition_index=0, leader_id=0, leader_epoch=0, replica_nodes=[0], isr_nodes=[0])])]
            return M(brokers=[M.MetadataResponseBroker(node_id=0, host="127.0.0.1", port=self.port)],
                     cluster_id="golden", controller_id=0, topics=topics)
        if key == 22:   # InitProducerId (idempotent producers)
            return InitProducerIdResponse(producer_id=4000, producer_epoch=0)
        if key == 0:    # Produce
            R = ProduceResponse.TopicProduceResponse
            return ProduceResponse(responses=[R(name=t.name, partition_responses=[
                R.PartitionProduceResponse(index=p.index, base_offset=0) for p in t.partition_data])
                for t in req.topic_data])
        if key == 1:    # Fetch: nothing there yet
            F = FetchResponse.FetchableTopicResponse
            return FetchResponse(responses=[F(topic=t.topic, topic_id=t.topic_id, partitions=[
                F.PartitionData(partition_index=p.partition, high_watermark=0, last_stable_offset=0,
                                log_start_offset=0, records=b"") for p in t.partitions])
                for t in req.topics])
        if key == 10:   # FindCoordinator: we coordinate everything
            F = FindCoordinatorResponse
            if ver >= 4:
                return F(coordinators=[F.Coordinator(key=k, node_id=0, host="127.0.0.1", port=self.port)
                                       for k in req.coordinator_keys])
            return F(node_id=0, host="127.0.0.1", port=self.port)
        if key == 2:    # ListOffsets: empty log
            L = ListOffsetsResponse.ListOffsetsTopicResponse
            return ListOffsetsResponse(topics=[L(name=t.name, partitions=[
                L.ListOffsetsPartitionResponse(partition_index=p.partition_index, offset=0, timestamp=-1)
                for p in t.partitions]) for t in req.topics])
        return None

    def close(self):
        self.done.set()
        self.sock.close()


# ----------------------------------------------------------------------------- clients
# Each runner drives one client through a scenario against the listener and returns a
# description of the client (name and version) for the fixture comments. Errors after the
# listener hangs up are expected and ignored.

def run_kafka_python(port, scenario):
    import kafka
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    boot = f"127.0.0.1:{port}"
    try:
        if scenario == "fetch":
            c = KafkaConsumer(bootstrap_servers=boot, client_id="golden-kafka-python", group_id=None,
                              enable_auto_commit=False, request_timeout_ms=3000)
            tp = TopicPartition(TOPIC, 0)
            c.assign([tp])
            c.seek(tp, 0)
            c.poll(timeout_ms=3000)
            c.close()
        else:
            p = KafkaProducer(bootstrap_servers=boot, client_id="golden-kafka-python",
                              request_timeout_ms=3000, max_block_ms=3000)
            try:
                if scenario == "produce":
                    p.send(TOPIC, key=b"key", value=b"golden value").get(timeout=5)
                else:
                    p.partitions_for(TOPIC)
            finally:
                p.close(timeout=1)
    except Exception:
        pass
    return f"kafka-python {kafka.__version__}"


def run_aiokafka(port, scenario):
    import asyncio

    import aiokafka
    from aiokafka.structs import TopicPartition
    boot = f"127.0.0.1:{port}"

    async def go():
        if scenario == "fetch":
            c = aiokafka.AIOKafkaConsumer(bootstrap_servers=boot, client_id="golden-aiokafka",
                                          enable_auto_commit=False, request_timeout_ms=3000)
            try:
                await asyncio.wait_for(c.start(), 5)
                tp = TopicPartition(TOPIC, 0)
                c.assign([tp])
                c.seek(tp, 0)
                await asyncio.wait_for(c.getmany(timeout_ms=2000), 5)
            except Exception:
                pass
            finally:
                try:
                    await asyncio.wait_for(c.stop(), 3)
                except Exception:
                    pass
            return
        p = aiokafka.AIOKafkaProducer(bootstrap_servers=boot, client_id="golden-aiokafka",
                                      request_timeout_ms=3000)
        try:
            await asyncio.wait_for(p.start(), 5)
            if scenario == "produce":
                await asyncio.wait_for(p.send_and_wait(TOPIC, b"golden value", key=b"key"), 5)
        except Exception:
            pass
        finally:
            try:
                await asyncio.wait_for(p.stop(), 3)
            except Exception:
                pass
    asyncio.run(go())
    return f"aiokafka {aiokafka.__version__}"


def run_confluent(port, scenario):
    import confluent_kafka
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient
    conf = {"bootstrap.servers": f"127.0.0.1:{port}", "client.id": "golden-confluent", "log_level": 0}
    try:
        if scenario == "produce":
            p = Producer(conf)
            p.produce(TOPIC, b"golden value", b"key")
            p.flush(5)
        elif scenario == "fetch":
            c = Consumer({**conf, "group.id": "golden", "enable.auto.commit": False})
            c.assign([TopicPartition(TOPIC, 0, 0)])
            c.poll(3)
            c.close()
        else:
            AdminClient(conf).list_topics(timeout=3)
    except Exception:
        pass
    v = confluent_kafka.version()
    v = v[0] if isinstance(v, tuple) else v
    return f"confluent-kafka {v}, librdkafka {confluent_kafka.libversion()[0]}"


def run_kcat(port, scenario):
    exe = shutil.which("kcat")
    if not exe:
        raise RuntimeError("kcat not installed")
    args = [exe, "-b", f"127.0.0.1:{port}", "-X", "client.id=golden-kcat", "-m", "3"]
    if scenario == "produce":
        subprocess.run(args + ["-P", "-t", TOPIC, "-K:"], input=b"key:golden value\n",
                       capture_output=True, timeout=20)
    elif scenario == "fetch":
        subprocess.run(args + ["-C", "-t", TOPIC, "-p", "0", "-o", "0", "-e"], capture_output=True, timeout=20)
    else:
        subprocess.run(args + ["-L"], capture_output=True, timeout=20)
    v = subprocess.run([exe, "-V"], capture_output=True, text=True).stdout
    line = next((ln for ln in v.splitlines() if ln.startswith("Version")), "").split("(")[0].strip()
    lib = v.split("librdkafka ")[1].split()[0] if "librdkafka " in v else "?"
    return f"kcat {line.replace('Version ', '')}, librdkafka {lib}"


JAVA_SRC = """
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.*;
public class Capture {
  public static void main(String[] a) throws Exception {
    Properties p = new Properties();
    p.put("bootstrap.servers", a[0]);
    p.put("client.id", "golden-java");
    p.put("request.timeout.ms", "3000");
    p.put("default.api.timeout.ms", "4000");
    p.put("max.block.ms", "4000");
    p.put("delivery.timeout.ms", "5000");
    p.put("linger.ms", "0");
    try {
      if (a[1].equals("produce")) {
        try (KafkaProducer<byte[], byte[]> pr = new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
          pr.send(new ProducerRecord<>("golden-topic", "key".getBytes(), "golden value".getBytes())).get();
        }
      } else if (a[1].equals("fetch")) {
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
          TopicPartition tp = new TopicPartition("golden-topic", 0);
          c.assign(List.of(tp));
          c.seek(tp, 0);
          c.poll(Duration.ofSeconds(3));
        }
      } else {
        try (Admin admin = Admin.create(p)) { admin.describeCluster().nodes().get(); }
      }
    } catch (Exception e) { }
    System.exit(0);
  }
}
"""


def _run_java(port, scenario, version):
    jars = REPO / ".deps" / "java" / version
    if not jars.is_dir():
        raise RuntimeError(f"{jars} missing (scripts/fetch-java-clients.sh)")
    cp = os.pathsep.join(str(j) for j in sorted(jars.glob("*.jar")))
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "Capture.java"
        src.write_text(JAVA_SRC)
        subprocess.run(["java", "-cp", cp, str(src), f"127.0.0.1:{port}", scenario],
                       capture_output=True, timeout=90)
    return f"Java kafka-clients {version}"


CLIENTS = {
    "kafka-python": run_kafka_python,
    "aiokafka": run_aiokafka,
    "confluent-kafka": run_confluent,
    "kcat": run_kcat,
    "java-3.9.0": lambda port, scenario: _run_java(port, scenario, "3.9.0"),
    "java-4.3.0": lambda port, scenario: _run_java(port, scenario, "4.3.0"),
}
SCENARIOS = {
    "bootstrap": "connect: ApiVersions, Metadata",
    "produce": "send one record (key b'key', value b'golden value') to golden-topic[0]",
    "fetch": "consume golden-topic[0] from offset 0",
}


def capture(name: str, scenario: str) -> list[Path]:
    lst = Listener(scenario)
    try:
        t = threading.Thread(target=lambda: setattr(lst, "desc", CLIENTS[name](lst.port, scenario)), daemon=True)
        t.start()
        lst.done.wait(40)
        t.join(40)
        time.sleep(0.2)
    finally:
        lst.close()
    desc = f"{getattr(lst, 'desc', name)}, scenario '{scenario}': {SCENARIOS[scenario]}"
    out_dir = HERE / name / scenario
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    written = []
    for i, frame in enumerate(lst.frames):
        h, _ = decode_request_header(frame)
        api = registry.api_name(h.request_api_key)
        p = out_dir / f"{i:02d}_{api}_v{h.request_api_version}.hex"
        p.write_text(f"# captured from {desc}\n"
                     f"# request frame without its 4-byte size prefix: {api} v{h.request_api_version}, "
                     f"correlation id {h.correlation_id}\n"
                     + "\n".join(frame.hex()[i:i + 64] for i in range(0, len(frame) * 2, 64)) + "\n")
        written.append(p)
    return written


def main(argv):
    names = [a for a in argv if a in CLIENTS] or list(CLIENTS)
    scenarios = [a for a in argv if a in SCENARIOS] or list(SCENARIOS)
    for n in names:
        for sc in scenarios:
            try:
                files = capture(n, sc)
                print(f"{n}/{sc}: {', '.join(p.name for p in files) or 'nothing captured'}", flush=True)
            except Exception as e:  # keep going: one missing client should not stop the others
                print(f"{n}/{sc}: failed: {e!r}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
