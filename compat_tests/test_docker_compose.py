"""docker/compose.yaml works (issue 14). No Docker engine here, so each service runs as a
local process with the compose file's own command (after the Dockerfile's ENTRYPOINT) and
environment; every service gets its own loopback address (127.0.R.N) standing in for its
container, so the compose ports stay as written.

Runs the one-node service (profile "single") and the three-node KRaft cluster (profile
"cluster": three combined broker + controller voters, each formatting its volume with the
compose file's cluster id through the services' `sh -c` entrypoint, where `kbroker` on PATH is
a shim for `python -m kbroker`): the quorum elects a leader, all three brokers register, and an
RF=3 topic takes and serves records through all three bootstrap addresses."""
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


def _shim(tmp_path) -> str:
    """A directory with a `kbroker` executable, as the image's pip install puts on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    shim = bin_dir / "kbroker"
    if shim.exists():   # never rewrite it under a service that is running it
        return str(bin_dir)
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m kbroker "$@"\n')
    shim.chmod(0o755)
    return str(bin_dir)


def _start(services: list[str], tmp_path):
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    net = random.randint(2, 250)
    hosts = {name: f"127.0.{net}.{i + 1}" for i, name in enumerate(services)}
    procs = {}
    for name in services:
        svc = compose["services"][name]
        data = tmp_path / name
        data.mkdir()
        env = {**os.environ, **{k: str(v) for k, v in (svc.get("environment") or {}).items()}, "PYTHONPATH": str(REPO)}
        if "entrypoint" in svc:   # compose's own entrypoint; `$$` is compose's escaped `$`
            entry = [a.replace("$$", "$") for a in svc["entrypoint"]]
            env["PATH"] = _shim(tmp_path) + os.pathsep + env.get("PATH", "")
        else:
            entry = _entrypoint()
        argv = entry + [_localize(a, hosts, hosts[name], str(data)) for a in svc["command"]]
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
    """The three services agree on one voter set naming each other, each advertises its own
    name, and node ids and host ports are distinct."""
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


def _poll(what: str, fn, procs, tmp_path, timeout: float = 90):
    """fn() until it returns something truthy; fails early if a service exits."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        for name, proc in procs.items():
            assert proc.poll() is None, f"{name} exited {proc.returncode}:\n{(tmp_path / f'{name}.log').read_text()[-3000:]}"
        try:
            got = fn()
            if got:
                return got
            last = got
        except Exception as e:   # noqa: BLE001 - not there yet
            last = e
        time.sleep(0.3)
    logs = "\n".join(f"--- {n}\n{(tmp_path / f'{n}.log').read_text()[-1500:]}" for n in procs)
    raise AssertionError(f"{what} not reached in {timeout}s (last: {last!r}):\n{logs}")


def _quorum_status(bs: str) -> dict:
    out = kbroker("metadata-quorum", "--bootstrap-server", bs, "describe", "--status", timeout=30).stdout.decode()
    return dict(line.split(":", 1) for line in out.splitlines() if ":" in line)


def test_three_node_cluster_from_compose(tmp_path):
    from confluent_kafka.admin import AdminClient
    names = ["kbroker-1", "kbroker-2", "kbroker-3"]
    compose, hosts, procs = _start(names, tmp_path)
    try:
        ports = {n: _container_port(compose["services"][n]["ports"][0]) for n in names}
        for n in names:
            _wait_port(hosts[n], ports[n], procs[n], tmp_path / f"{n}.log")
        bs = ",".join(f"{hosts[n]}:{ports[n]}" for n in names)

        def quorum_ready():
            st = {k.strip(): v.strip() for k, v in _quorum_status(bs).items()}
            return st if int(st["LeaderId"]) in (1, 2, 3) and len(re.findall(r'"id":\s*\d', st["CurrentVoters"])) == 3 else None
        st = _poll("a quorum of 3 voters with a leader", quorum_ready, procs, tmp_path)
        assert sorted(int(i) for i in re.findall(r'"id":\s*(\d+)', st["CurrentVoters"])) == [1, 2, 3]
        assert st["ClusterId"] == compose["services"]["kbroker-1"]["environment"]["KBROKER_CLUSTER_ID"]

        admin = AdminClient({"bootstrap.servers": bs})
        # all three register, each advertising its own EXTERNAL address to clients
        _poll("three registered brokers at their EXTERNAL addresses",
              lambda: {f"{b.host}:{b.port}" for b in admin.list_topics(timeout=10).brokers.values()} == set(bs.split(",")),
              procs, tmp_path)

        kbroker("topics", "--bootstrap-server", bs, "--create", "--topic", "dc3", "--partitions", "3",
                "--replication-factor", "3")

        def replicated():
            t = admin.list_topics("dc3", timeout=10).topics["dc3"]
            return (t.error is None and len(t.partitions) == 3 and
                    all(sorted(p.replicas) == [1, 2, 3] and sorted(p.isrs) == [1, 2, 3] for p in t.partitions.values()))
        _poll("dc3 with 3 replicas in sync per partition", replicated, procs, tmp_path)

        p = Producer({"bootstrap.servers": bs, "acks": "all", "enable.idempotence": True})
        errors = []
        for i in range(90):
            p.produce("dc3", value=b"v%d" % i, partition=i % 3,
                      on_delivery=lambda err, msg: err and errors.append(err))
        assert p.flush(60) == 0 and not errors, errors
        c = Consumer({"bootstrap.servers": bs, "group.id": "dc3g", "auto.offset.reset": "earliest"})
        c.subscribe(["dc3"])          # a group: its coordinator is the offsets partition's leader
        got, seen_errors = set(), []
        deadline = time.monotonic() + 60
        while len(got) < 90 and time.monotonic() < deadline:
            m = c.poll(1)
            if m is None:
                continue
            if m.error() is None:
                got.add(m.value())
            else:
                seen_errors.append(m.error())
        c.close()
        assert got == {b"v%d" % i for i in range(90)}, f"{len(got)} of 90 consumed, errors {seen_errors[-5:]}"
    finally:
        for proc in procs.values():
            proc.terminate()
        for proc in procs.values():
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
    assert all(proc.returncode == 0 for proc in procs.values()), \
        {n: (p.returncode, (tmp_path / f"{n}.log").read_text()[-1500:]) for n, p in procs.items() if p.returncode}
