"""docker/compose.yaml works (issue 14). No Docker engine here, so each service runs as a
local process with the compose file's own command (after the Dockerfile's ENTRYPOINT) and
environment; every service gets its own loopback address (127.0.R.N) standing in for its
container, so the compose ports stay as written.

Runs the one-node service (profile "single"). The three-node services (profile "cluster")
need the multi-voter quorum of the cluster work; until it lands the server refuses more than
one voter, and this test runs them once it does."""
from __future__ import annotations

import json
import os
import random
import re
import socket
import subprocess
import sys
import time
import urllib.request

import yaml
from confluent_kafka import Consumer, Producer, TopicPartition

from compat_tests.brokers import REPO
from compat_tests.ops_util import kbroker

T = 30
DOCKER = REPO / "docker"


def _entrypoint() -> list[str]:
    m = re.search(r"^ENTRYPOINT\s+(\[.*\])\s*$", (DOCKER / "Dockerfile").read_text(), re.M)
    assert m, "Dockerfile has no exec-form ENTRYPOINT"
    ep = json.loads(m.group(1))
    assert ep == ["kbroker"], ep
    return [sys.executable, "-m", "kbroker"]


def _localize(text: str, hosts: dict[str, str], me: str, data: str) -> str:
    for name, addr in sorted(hosts.items(), key=lambda kv: -len(kv[0])):
        text = re.sub(rf"\b{re.escape(name)}\b(?=:)", addr, text)
    return text.replace("0.0.0.0", me).replace("localhost", me).replace("/var/lib/kbroker", data)


def _start(services: list[str], tmp_path):
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    net = random.randint(2, 250)
    hosts = {name: f"127.0.{net}.{i + 1}" for i, name in enumerate(services)}
    procs = {}
    for name in services:
        svc = compose["services"][name]
        data = tmp_path / name
        data.mkdir()
        argv = _entrypoint() + [_localize(a, hosts, hosts[name], str(data)) for a in svc["command"]]
        env = {**os.environ, **{k: str(v) for k, v in (svc.get("environment") or {}).items()}, "PYTHONPATH": str(REPO)}
        log = open(tmp_path / f"{name}.log", "wb")
        procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=data)
    return compose, hosts, procs


def _wait_port(addr: str, port: int, proc, log_path) -> None:
    deadline = time.monotonic() + T
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"service exited {proc.returncode}:\n{log_path.read_text()[-3000:]}"
        try:
            socket.create_connection((addr, port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"{addr}:{port} never opened:\n{log_path.read_text()[-3000:]}")


def _container_port(mapping: str) -> int:
    return int(mapping.split(":")[-1])


def test_single_node_service_from_compose(tmp_path):
    compose, hosts, procs = _start(["kbroker"], tmp_path)
    try:
        svc = compose["services"]["kbroker"]
        addr = hosts["kbroker"]
        client_port, metrics_port = (_container_port(m) for m in svc["ports"])
        _wait_port(addr, client_port, procs["kbroker"], tmp_path / "kbroker.log")
        bs = f"{addr}:{client_port}"
        kbroker("topics", "--bootstrap-server", bs, "--create", "--topic", "dc", "--partitions", "2")
        p = Producer({"bootstrap.servers": bs})
        for i in range(50):
            p.produce("dc", value=b"v%d" % i, partition=i % 2)
        assert p.flush(T) == 0
        c = Consumer({"bootstrap.servers": bs, "group.id": "x"})
        assert sum(c.get_watermark_offsets(TopicPartition("dc", i), timeout=T)[1] for i in range(2)) == 50
        c.close()
        text = urllib.request.urlopen(f"http://{addr}:{metrics_port}/metrics", timeout=10).read().decode()
        assert 'kafka_server_brokertopicmetrics_messagesin_total{topic="dc"} 50.0' in text
        # --log-format=json from the compose command: every line is a JSON object
        lines = (tmp_path / "kbroker.log").read_text().splitlines()
        assert lines and all(json.loads(line)["logger"] for line in lines)
    finally:
        for proc in procs.values():
            proc.terminate()
            proc.wait(20)
    assert all(proc.returncode == 0 for proc in procs.values())


def test_cluster_services_are_three_combined_voters():
    """Until the cluster runs here: the three services agree on one voter set naming each
    other, each advertises its own name, and node ids and host ports are distinct."""
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    nodes = {n: s for n, s in compose["services"].items() if "cluster" in s.get("profiles", [])}
    assert sorted(nodes) == ["kbroker-1", "kbroker-2", "kbroker-3"]
    opts = {n: dict(a.removeprefix("--override=").split("=", 1) for a in s["command"] if a.startswith("--override="))
            for n, s in nodes.items()}
    voters = {o["controller.quorum.voters"] for o in opts.values()}
    assert voters == {"1@kbroker-1:9093,2@kbroker-2:9093,3@kbroker-3:9093"}
    assert sorted(o["node.id"] for o in opts.values()) == ["1", "2", "3"]
    for n, o in opts.items():
        assert f"@{n}:9093" in o["controller.quorum.voters"] and f"//{n}:9092" in o["advertised.listeners"]
    published = [m.split(":")[0] for s in nodes.values() for m in s["ports"]]
    assert len(published) == len(set(published))
    # the same command line parses as a broker config
    from kbroker.config import BrokerConfig
    for o in opts.values():
        cfg = BrokerConfig.load(None, [f"{k}={v}" for k, v in o.items()])
        assert len(cfg.voters) == 3 and cfg.is_broker and cfg.is_controller
