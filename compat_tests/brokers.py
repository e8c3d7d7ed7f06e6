"""Start and stop real broker processes for compat tests.

Every broker listens on 127.0.0.1 on a free port, keeps its data in a temp dir, and is
stopped by the PID we started. KBROKER_COMPAT_PEER=tansu runs the same tests against the
Tansu peer instead, which is how we check that a test fails for the right reasons.
"""
from __future__ import annotations

import concurrent.futures
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

from compat_tests import raw_wire

REPO = Path(__file__).resolve().parent.parent
DEPS = REPO / ".deps"
TANSU = DEPS / "tansu" / "tansu"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _api_versions_ok(port: int, host: str = "127.0.0.1", ssl_context=None) -> bool:
    """True once the broker answers an ApiVersions v0 request (over TLS with ``ssl_context``)."""
    try:
        with socket.create_connection((host, port), timeout=1) as raw, \
                (ssl_context.wrap_socket(raw, server_hostname=host) if ssl_context else raw) as s:
            s.sendall(raw_wire.request(18, 0, 1, client_id=b"probe"))
            head = s.recv(8)
            return len(head) == 8 and struct.unpack(">i", head[4:8])[0] == 1
    except OSError:
        return False


class BrokerProcess:
    """One broker process: kbroker by default, or the Tansu peer."""

    # Every broker runs in its own session, as a service would (and as benchmarks/peers.py
    # starts Kafka): with the kernel's autogroup scheduling a session is one CPU group, so a
    # broker does not split its share of the cores with the clients a test or benchmark runs.
    host = "127.0.0.1"    # a ClusterNode may listen on another loopback address
    probe_ssl = None      # an ssl.SSLContext when the probed listener is SSL / SASL_SSL

    def __init__(self, data_dir: Path, port: int | None = None, overrides: dict | None = None,
                 kind: str | None = None, node_id: int = 1, env: dict | None = None):
        self.kind = kind or os.environ.get("KBROKER_COMPAT_PEER", "kbroker")
        self.env = dict(env or {})   # added to this process's environment only
        self.data_dir = Path(data_dir)
        self.port = port or free_port(self.host)
        self.overrides = dict(overrides or {})
        self.node_id = node_id
        self.proc: subprocess.Popen | None = None
        self.log_path = self.data_dir / f"{self.kind}-{self.port}.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        if self.kind == "tansu":
            url = f"tcp://127.0.0.1:{self.port}"
            return [str(TANSU), "broker", "--listener-url", url, "--advertised-listener-url", url,
                    "--storage-engine", "memory://tansu/", "--silent"]
        props = {
            "node.id": str(self.node_id),
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{free_port()}",
            "log.dirs": str(self.data_dir / "logs"),
        }
        props.update(self.overrides)
        cmd = [sys.executable, "-m", "kbroker", "serve"]
        for k, v in props.items():
            cmd += ["--override", f"{k}={v}"]
        return cmd

    def start(self, timeout: float = 30.0) -> "BrokerProcess":
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                     cwd=self.data_dir, env={**os.environ, "PYTHONPATH": str(REPO), **self.env},
                                     start_new_session=True)
        try:
            self.wait_serving(self.port, timeout, self.kind)
        except RuntimeError:
            self.kill()    # a no-op if it already exited
            raise
        return self

    def wait_serving(self, port: int, timeout: float, what: str) -> None:
        """Return once the process answers ApiVersions on ``port``; RuntimeError with the
        log's tail if it exits first or stays silent for ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{what} exited with {self.proc.returncode}:\n{self.tail()}")
            if _api_versions_ok(port, self.host, self.probe_ssl):
                return
            time.sleep(0.05)
        raise RuntimeError(f"{what} did not answer within {timeout}s:\n{self.tail()}")

    def tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM, then SIGKILL if it does not exit in time. Returns the exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def kill(self) -> None:
        """SIGKILL: the crash tests' way to stop a broker."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


# ---------------------------------------------------------------------------------------------
# Clusters: N kbroker nodes on loopback, formatted with one cluster id.

class ClusterNode(BrokerProcess):
    """One node of a KBrokerCluster: a BrokerProcess with a controller listener, static
    voters and a data dir formatted for the cluster before its first start."""

    def __init__(self, cluster: "KBrokerCluster", node_id: int, roles: str):
        self.host = cluster.hosts[node_id] if cluster.hosts else "127.0.0.1"
        super().__init__(cluster.base_dir / f"node{node_id}", overrides=cluster.overrides, node_id=node_id)
        self.cluster = cluster
        self.roles = roles
        self.controller_port = free_port(self.host) if "controller" in roles else None
        self.log_path = self.data_dir / "kbroker.log"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def properties(self) -> dict:
        listeners = []
        if "broker" in self.roles:
            listeners.append(f"PLAINTEXT://{self.host}:{self.port}")
        if self.controller_port:
            listeners.append(f"CONTROLLER://{self.host}:{self.controller_port}")
        props = {
            "node.id": str(self.node_id), "process.roles": self.roles,
            "listeners": ",".join(listeners), "controller.listener.names": "CONTROLLER",
            "controller.quorum.voters": self.cluster.voters(),
            "log.dirs": str(self.data_dir / "logs"),
        }
        props.update(self.cluster.overrides)
        return props

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", *self.cluster.launcher(self), "serve"]
        for k, v in self.properties().items():
            cmd += ["--override", f"{k}={v}"]
        return cmd

    def format(self, *extra: str) -> None:
        """kbroker format with the cluster id (extra: --standalone, --initial-controllers ...)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "kbroker", "format", "-t", self.cluster.cluster_id, "-g", *extra]
        for k, v in self.properties().items():
            cmd += ["--override", f"{k}={v}"]
        subprocess.run(cmd, check=True, capture_output=True, cwd=self.data_dir,
                       env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60)

    def start(self, timeout: float = 60.0, wait: bool = True) -> "ClusterNode":
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.wait(5)       # just killed: let it go
            except subprocess.TimeoutExpired:
                # a second process would fail on the locked dirs, and this handle would lose
                # the running one (never stopped: a leaked broker)
                raise RuntimeError(f"node {self.node_id} is already running (pid {self.proc.pid})") from None
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                     cwd=self.data_dir, env={**os.environ, "PYTHONPATH": str(REPO), **self.env},
                                     start_new_session=True)
        if wait:
            self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 60.0) -> None:
        port = self.port if "broker" in self.roles else self.controller_port
        self.wait_serving(port, timeout, f"node {self.node_id}")

    def signal(self, sig: int) -> None:
        """SIGKILL / SIGSTOP / SIGCONT this node's process (by the PID we started)."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
            if sig == signal.SIGKILL:
                self.proc.wait(10)


class KBrokerCluster:
    """N nodes on loopback (combined broker+controller by default), one cluster id.

        with KBrokerCluster(tmp_path, 3) as c:
            c.bootstrap                     # "127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3"
            c.active_controller()           # node id of the Raft leader (DescribeQuorum)
            c.kill(2); c.restart(2)         # kill -9 / start again on the same dirs and ports
            c.stop_signal(3); c.cont(3)     # SIGSTOP / SIGCONT
    """

    def __init__(self, base_dir: Path, n: int = 3, *, roles: "str | dict[int, str]" = "broker,controller",
                 overrides: dict | None = None, cluster_id: str = "kbrokerclusterAAAAAAAAA",
                 hosts: "dict[int, str] | None" = None):
        """``roles``: process.roles of every node, or {node id: roles}. ``hosts``: {node id:
        loopback address} to give each node its own (compat_tests/cluster_faults/harness.py)."""
        self.base_dir = Path(base_dir)
        self.hosts = hosts
        self.cluster_id = cluster_id[:22]
        self.overrides = {"controller.quorum.election.timeout.ms": "500",
                          "controller.quorum.fetch.timeout.ms": "1000",
                          "broker.session.timeout.ms": "4000", "broker.heartbeat.interval.ms": "500",
                          **(overrides or {})}
        self.nodes = {i: ClusterNode(self, i, roles if isinstance(roles, str) else roles[i])
                      for i in range(1, n + 1)}

    def launcher(self, node: ClusterNode) -> list[str]:
        """What ``python -m`` runs for a node (a subclass may wrap kbroker)."""
        return ["kbroker"]

    def voters(self) -> str:
        return ",".join(f"{n.node_id}@{n.host}:{n.controller_port}" for n in self.nodes.values() if n.controller_port)

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes.values() if "broker" in n.roles)

    def format_all(self) -> None:
        """kbroker format on every node, side by side (each is a Python start-up of its own,
        ~1 s on 2 cores)."""
        with concurrent.futures.ThreadPoolExecutor(len(self.nodes)) as pool:
            list(pool.map(lambda n: n.format(), self.nodes.values()))

    def start(self, timeout: float = 90.0, *, format: bool = True) -> "KBrokerCluster":
        """Format (unless already done) and start every node; wait until all answer."""
        if format:
            self.format_all()
        for n in self.nodes.values():
            n.start(wait=False)
        for n in self.nodes.values():
            n.wait_ready(timeout)
        return self

    def kill(self, node_id: int) -> None:
        self.nodes[node_id].signal(signal.SIGKILL)

    def stop_signal(self, node_id: int) -> None:
        self.nodes[node_id].signal(signal.SIGSTOP)

    def cont(self, node_id: int) -> None:
        self.nodes[node_id].signal(signal.SIGCONT)

    def restart(self, node_id: int, wait: bool = True, timeout: float = 60.0) -> None:
        n = self.nodes[node_id]
        if n.proc is not None and n.proc.poll() is None:
            n.stop()
        n.start(wait=wait, timeout=timeout)

    def describe_quorum(self, node_id: int | None = None, timeout: float = 5.0):
        """A DescribeQuorum answer from a live controller (None if none answers)."""
        import asyncio

        from kbroker.net.client import ClientError, KafkaClient
        from kbroker.wire import registry as wire

        async def ask(host, port):
            c = KafkaClient(host, port, request_timeout_ms=int(timeout * 1000))
            try:
                Req = wire.REQUESTS[55]
                return await c.send(Req(topics=[Req.TopicData(topic_name="__cluster_metadata",
                                                              partitions=[Req.TopicData.PartitionData(partition_index=0)])]))
            except ClientError:
                return None
            finally:
                await c.close()
        ids = [node_id] if node_id is not None else list(self.nodes)
        for i in ids:
            n = self.nodes[i]
            if n.pid is None or not n.controller_port:
                continue
            r = asyncio.run(ask(n.host, n.controller_port))
            if r is not None and r.topics and r.topics[0].partitions[0].error_code == 0:
                return r
        return None

    def wait_brokers_known(self, timeout: float = 30.0) -> None:
        """Wait until every broker lists every broker in its Metadata. A node answers as soon
        as it serves, but learns its peers' registrations (and their unfencing) from the
        metadata log a moment later, so right after start() a node may list only some."""
        import asyncio

        from kbroker.net.client import ClientError, KafkaClient
        from kbroker.wire import registry as wire

        brokers = sorted(i for i, n in self.nodes.items() if "broker" in n.roles)

        async def seen(n) -> list:
            c = KafkaClient(n.host, n.port, request_timeout_ms=5000, connect_timeout_ms=5000)
            try:
                r = await c.send(wire.REQUESTS[3](topics=[]))
                return sorted(b.node_id for b in r.brokers)
            except (ClientError, OSError, asyncio.TimeoutError):
                return []
            finally:
                await c.close()
        deadline = time.monotonic() + timeout
        for i in brokers:
            while (got := asyncio.run(seen(self.nodes[i]))) != brokers:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"node {i} lists brokers {got}, expected {brokers}")
                time.sleep(0.1)

    def active_controller(self, timeout: float = 30.0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            r = self.describe_quorum()
            if r is not None:
                return r.topics[0].partitions[0].leader_id
            time.sleep(0.1)
        raise RuntimeError("no active controller")

    def close(self) -> None:
        """SIGTERM every live node at once (one by one, the last ones would wait for a
        quorum that is already gone), SIGKILL what has not exited after 20 s."""
        live = [n for n in self.nodes.values() if n.proc is not None and n.proc.poll() is None]
        for n in live:
            n.signal(signal.SIGCONT)
            n.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 20
        for n in live:
            try:
                n.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                n.kill()

    def __enter__(self) -> "KBrokerCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
