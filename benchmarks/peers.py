"""The three brokers a scale/stall benchmark runs side by side: kbroker, Apache Kafka 4.0
(``../shared/reference-kafka``, one combined broker+controller node) and Tansu (the Rust
peer, ``scripts/fetch-peer.sh``, in-memory storage). Each listens on 127.0.0.1 on a free
port with its data in a temp dir, and is stopped by the PID we started."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from compat_tests.brokers import REPO, TANSU, BrokerProcess, free_port  # noqa: E402
from kbroker.broker.storage import random_uuid, uuid_to_str  # noqa: E402

KAFKA_HOME = REPO.parent.parent / "shared" / "reference-kafka"
if not KAFKA_HOME.exists():
    KAFKA_HOME = REPO.parent / "shared" / "reference-kafka"
class _Names(dict):
    def __missing__(self, kind: str) -> str:   # a "kbroker+NAME=VALUE" variant names itself
        return kind


NAMES = _Names({"kbroker": "kbroker", "kafka": "Kafka", "tansu": "Tansu"})


def new_cluster_id() -> str:
    """A random cluster id that kafka-storage.sh takes (one starting with '-' reads as a flag)."""
    return uuid_to_str(random_uuid())


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

    def start(self, timeout: float = 90.0, fresh: bool = True, *, cluster_id: str | None = None,
              wait: bool = True) -> "KafkaProcess":
        """``fresh=False``: restart on the existing data (no format). ``wait=False``: return
        once launched (a node of a cluster serves only once a quorum is up)."""
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
        if fresh:
            cluster_id = cluster_id or new_cluster_id()
            subprocess.run([str(KAFKA_HOME / "bin/kafka-storage.sh"), "format", "-t", cluster_id, "-c", str(cfg)],
                           check=True, env=env, capture_output=True)
        return self._launch(cfg, env, timeout, wait)

    def _launch(self, cfg, env, timeout, wait=True):
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([str(KAFKA_HOME / "bin/kafka-server-start.sh"), str(cfg)],
                                     stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        if wait:
            self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 90.0) -> None:
        try:
            self.wait_serving(self.port, timeout, "kafka")
        except RuntimeError:
            self.kill()
            raise

    def stop(self, timeout: float = 30.0):
        return super().stop(timeout)    # a JVM takes longer to shut down than kbroker


class KafkaCluster:
    """N Kafka 4.0 nodes on loopback, each a combined broker+controller (the reference-kafka
    README's three nodes), one cluster id; kill -9 and restart a node as KBrokerCluster does."""

    def __init__(self, base_dir: Path, n: int = 3, overrides: dict | None = None, heap: str = "512m") -> None:
        self.nodes = {i: KafkaProcess(Path(base_dir) / f"kafka{i}", heap=heap) for i in range(1, n + 1)}
        voters = ",".join(f"{i}@127.0.0.1:{k.cport}" for i, k in self.nodes.items())
        for i, k in self.nodes.items():
            k.overrides = {"node.id": str(i), "controller.quorum.voters": voters, **(overrides or {})}
        self.cluster_id = new_cluster_id()

    @property
    def bootstrap(self) -> str:
        return ",".join(k.bootstrap for k in self.nodes.values())

    def start(self, timeout: float = 120.0) -> "KafkaCluster":
        for k in self.nodes.values():
            k.start(timeout, cluster_id=self.cluster_id, wait=False)
        for k in self.nodes.values():
            k.wait_ready(timeout)
        return self

    def kill(self, node_id: int) -> None:
        self.nodes[node_id].kill()

    def restart(self, node_id: int, timeout: float = 120.0) -> None:
        self.nodes[node_id].start(timeout, fresh=False)

    def close(self) -> None:
        for k in self.nodes.values():
            if k.proc is not None and k.proc.poll() is None:
                k.proc.terminate()
        for k in self.nodes.values():
            k.stop()


def make_broker(kind: str, data_dir: Path, kbroker_overrides: dict | None = None,
                kafka_overrides: dict | None = None, env: dict | None = None):
    if kind == "kafka":
        return KafkaProcess(data_dir / "kafka", kafka_overrides)
    if kind == "tansu":
        if not TANSU.exists():
            subprocess.run(["bash", str(REPO / "scripts/fetch-peer.sh")], check=True)
        return BrokerProcess(data_dir / "tansu", kind="tansu")
    # "kbroker+NAME=VALUE+...": a kbroker with those settings alone (an A/B run of one
    # switch): a dotted NAME is a broker config (kbroker+log.zero.fill.ahead=false), any
    # other an environment variable of its process (kbroker+KBROKER_AIO_FSYNC=0)
    own = dict(part.split("=", 1) for part in kind.split("+")[1:])
    own_env = {k: v for k, v in own.items() if "." not in k}
    own_config = {k: v for k, v in own.items() if "." in k}
    b = BrokerProcess(data_dir / kind.replace("=", "_"), overrides={**(kbroker_overrides or {}), **own_config},
                      kind="kbroker", env=own_env)
    if env:
        os.environ.update(env)   # BrokerProcess passes our environment on
    return b


def produce_waiting(p, topic: str, value: bytes, *, wait_s: float = 0.01, **kwargs) -> None:
    """``p.produce`` (a confluent-kafka Producer), serving delivery reports for ``wait_s`` and
    trying again while the producer's local queue is full."""
    while True:
        try:
            p.produce(topic, value, **kwargs)
            return
        except BufferError:
            p.poll(wait_s)


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


def process_tree(pid: int) -> list[int]:
    """A broker process and its children (Kafka runs under a shell wrapper)."""
    try:
        return [pid, *(int(k) for k in Path(f"/proc/{pid}/task/{pid}/children").read_text().split())]
    except OSError:
        return [pid]


def pin(pid: int, cpus: set[int]) -> None:
    """Run a broker (every thread of it and its children) on ``cpus`` only; threads it
    starts later inherit the mask."""
    for p in process_tree(pid):
        for tid in os.listdir(f"/proc/{p}/task"):
            try:
                os.sched_setaffinity(int(tid), cpus)
            except ProcessLookupError:   # (a thread that just ended)
                pass


def rss_mb(pid: int) -> float:
    """Resident memory of a process and its children."""
    total = 0
    for p in process_tree(pid):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads) and its children, in seconds."""
    total = 0.0
    for p in process_tree(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / _TICK
        except OSError:
            pass
    return total


def axis_table(rows: dict, kinds: list[str], xs: list, xlabel: str, metrics: list) -> list[str]:
    """Markdown rows of one scaling axis: a line per (x, metric), a column per broker, then
    kbroker / Kafka when both ran. ``rows[x][kind][key]``; ``metrics``: (key, label, format,
    higher_is_better). Ratios above 1.0 always mean kbroker is better."""
    ratio = "kafka" in kinds and "kbroker" in kinds
    L = [f"| {xlabel} | metric | " + " | ".join(NAMES[k] for k in kinds) + (" | kbroker / Kafka |" if ratio else " |"),
         "|---:|---|" + "---:|" * (len(kinds) + ratio)]
    for x in xs:
        for key, label, fmt, higher in metrics:
            cells = [fmt.format(rows[x][k][key]) if isinstance(rows[x].get(k, {}).get(key), (int, float)) else "n/a"
                     for k in kinds]
            if ratio:
                a, b = rows[x].get("kbroker", {}).get(key), rows[x].get("kafka", {}).get(key)
                ok = isinstance(a, (int, float)) and isinstance(b, (int, float)) and a and b
                cells.append(f"{(a / b) if higher else (b / a):.2f}x" if ok else "n/a")
            L.append(f"| {x} | {label} | " + " | ".join(cells) + " |")
    return L


def plot_axis(path: str, rows: dict, kinds: list[str], xs: list, xlabel: str, panels: list) -> None:
    """One panel per metric, a line per broker along the scaling axis (log x).
    ``panels``: (key, title, log_y)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 4))
    for ax, (key, title, log_y) in zip(axes, panels):
        plotted = False
        for k in kinds:
            have = [x for x in xs if isinstance(rows[x].get(k, {}).get(key), (int, float))]
            ax.plot(have, [rows[x][k][key] for x in have], marker="o", label=NAMES[k])
            plotted |= any(rows[x][k][key] > 0 for x in have)
        ax.set_xscale("log")
        ax.set_xticks(xs, [str(x) for x in xs], minor=False)   # the measured points, not 10^k
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        if log_y and plotted:   # a panel no broker reported stays linear (log of nothing fails)
            ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_title(title)
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
