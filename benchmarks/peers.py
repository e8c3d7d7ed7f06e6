"""The three brokers a scale/stall benchmark runs side by side: kbroker, Apache Kafka 4.0
(``../shared/reference-kafka``, one combined broker+controller node) and Tansu (the Rust
peer, ``scripts/fetch-peer.sh``, in-memory storage). Each listens on 127.0.0.1 on a free
port with its data in a temp dir, and is stopped by the PID we started."""
from __future__ import annotations

import base64
import os
import subprocess
import sys
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from compat_tests.brokers import REPO, TANSU, BrokerProcess, free_port  # noqa: E402

KAFKA_HOME = REPO.parent.parent / "shared" / "reference-kafka"
if not KAFKA_HOME.exists():
    KAFKA_HOME = REPO.parent / "shared" / "reference-kafka"
NAMES = {"kbroker": "kbroker", "kafka": "Kafka", "tansu": "Tansu"}


class KafkaProcess(BrokerProcess):
    """Apache Kafka 4.0 in KRaft combined mode (the reference-kafka README's one node);
    BrokerProcess's wait, stop and kill, with Kafka's own start scripts."""

    kind = "kafka"

    def __init__(self, data_dir: Path, overrides: dict | None = None, heap: str = "1g") -> None:
        self.data_dir = Path(data_dir)
        self.port = free_port()
        self.cport = free_port()
        self.overrides = dict(overrides or {})
        self.heap = heap
        self.proc: subprocess.Popen | None = None
        self.log_path = self.data_dir / "kafka-stdout.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 90.0, fresh: bool = True) -> "KafkaProcess":
        """``fresh=False``: restart on the existing data (no format)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        props = {
            "process.roles": "broker,controller", "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.cport}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.cport}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.data_dir / "logs"),
            "offsets.topic.replication.factor": "1", "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1", "group.initial.rebalance.delay.ms": "0",
        }
        props.update(self.overrides)
        cfg = self.data_dir / "server.properties"
        cfg.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        env = {**os.environ, "LOG_DIR": str(self.data_dir / "applogs"),
               "KAFKA_HEAP_OPTS": f"-Xmx{self.heap} -Xms{self.heap}"}
        if not fresh:
            return self._launch(cfg, env, timeout)
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        subprocess.run([str(KAFKA_HOME / "bin/kafka-storage.sh"), "format", "-t", cluster_id, "-c", str(cfg)],
                       check=True, env=env, capture_output=True)
        return self._launch(cfg, env, timeout)

    def _launch(self, cfg, env, timeout):
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([str(KAFKA_HOME / "bin/kafka-server-start.sh"), str(cfg)],
                                     stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            self.wait_serving(self.port, timeout, "kafka")
        except RuntimeError:
            self.kill()
            raise
        return self

    def stop(self, timeout: float = 30.0):
        return super().stop(timeout)    # a JVM takes longer to shut down than kbroker


def make_broker(kind: str, data_dir: Path, kbroker_overrides: dict | None = None,
                kafka_overrides: dict | None = None, env: dict | None = None):
    if kind == "kafka":
        return KafkaProcess(data_dir / "kafka", kafka_overrides)
    if kind == "tansu":
        if not TANSU.exists():
            subprocess.run(["bash", str(REPO / "scripts/fetch-peer.sh")], check=True)
        return BrokerProcess(data_dir / "tansu", kind="tansu")
    b = BrokerProcess(data_dir / "kbroker", overrides=kbroker_overrides, kind="kbroker")
    if env:
        os.environ.update(env)   # BrokerProcess passes our environment on
    return b


def write_report(lines: list[str], out: str = "") -> str:
    """Print a benchmark's markdown report and write it to ``out`` (if given)."""
    text = "\n".join(lines) + "\n"
    print(text)
    if out:
        Path(out).write_text(text)
    return text


def open_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def rss_mb(pid: int) -> float:
    """Resident memory of a process and its children (Kafka runs under a shell wrapper)."""
    total = 0
    pids = [pid]
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        pids += [int(k) for k in kids]
    except OSError:
        pass
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024
