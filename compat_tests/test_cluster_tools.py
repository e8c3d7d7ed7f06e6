"""Cluster tools with real processes: a dynamic quorum (``format --standalone`` +
``controller.quorum.bootstrap.servers``) grows from one voter to three with
``kbroker metadata-quorum add-controller`` while topics are being created, and shrinks back
with ``remove-controller``; ``describe --status / --replication`` show it; ``kbroker cluster
up N`` starts a usable cluster and Ctrl-C stops it."""

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.brokers import REPO, KBrokerCluster

pytestmark = pytest.mark.timeout(300)
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
_quiet = logging.getLogger("compat.cluster_tools.librdkafka")
_quiet.setLevel(logging.CRITICAL)


def quorum(*args, timeout=60) -> str:
    p = subprocess.run([sys.executable, "-m", "kbroker", "metadata-quorum", *args], capture_output=True,
                       text=True, env=ENV, timeout=timeout)
    assert p.returncode == 0, p.stderr
    return p.stdout


def voters(bootstrap_controller: str) -> list[int]:
    out = quorum("--bootstrap-controller", bootstrap_controller, "describe", "--status")
    line = next(l for l in out.splitlines() if l.startswith("CurrentVoters:"))
    return sorted(v["id"] for v in json.loads(line.split(":", 1)[1]))


def test_quorum_grows_from_one_to_three_voters_under_load_and_shrinks_back(tmp_path):
    c = KBrokerCluster(tmp_path, 3)
    first = c.nodes[1]
    boot = f"127.0.0.1:{first.controller_port}"
    c.overrides.update({"controller.quorum.voters": "", "controller.quorum.bootstrap.servers": boot})
    for n in c.nodes.values():
        n.format(*(["--standalone"] if n.node_id == 1 else []))
    try:
        c.start(format=False)
        assert voters(boot) == [1]
        # load: topics created one after another for the whole change
        admin = AdminClient({"bootstrap.servers": c.bootstrap, "logger": _quiet})
        acked, stop = [], threading.Event()

        def load():
            i = 0
            while not stop.is_set():
                name = f"load{i}"
                try:
                    admin.create_topics([NewTopic(name, 1, 1)], request_timeout=30)[name].result(timeout=40)
                    acked.append(name)
                except Exception:   # noqa: BLE001 - a refused create is not acknowledged
                    pass
                i += 1
        t = threading.Thread(target=load, daemon=True)
        t.start()
        for n in (2, 3):
            props = tmp_path / f"node{n}.properties"
            props.write_text("\n".join(f"{k}={v}" for k, v in c.nodes[n].properties().items()))
            out = quorum("--bootstrap-controller", boot, "--command-config", str(props), "add-controller")
            assert f"Added KRaft controller {n}" in out
        assert voters(boot) == [1, 2, 3]
        rep = quorum("--bootstrap-controller", boot, "describe", "--replication")
        assert rep.splitlines()[0].split() == ["NodeId", "DirectoryId", "LogEndOffset", "Lag",
                                               "LastFetchTimestamp", "LastCaughtUpTimestamp", "Status"]
        assert sorted(l.split()[-1] for l in rep.splitlines()[1:]) == ["Follower", "Follower", "Leader"]
        for n in (3, 2):
            dir_id = next(l.split("=", 1)[1] for l in
                          (c.nodes[n].data_dir / "logs" / "meta.properties").read_text().splitlines()
                          if l.startswith("directory.id="))
            quorum("--bootstrap-controller", boot, "remove-controller", "--controller-id", str(n),
                   "--controller-directory-id", dir_id)
        assert voters(boot) == [1]
        stop.set()
        t.join(60)
        assert len(acked) >= 3
        md = AdminClient({"bootstrap.servers": f"127.0.0.1:{first.port}", "logger": _quiet}).list_topics(timeout=20)
        assert set(acked) <= set(md.topics)          # nothing acknowledged was lost
    finally:
        c.close()


def test_cluster_up_prints_bootstrap_servers_and_stops_on_ctrl_c(tmp_path):
    data = tmp_path / "cl"
    p = subprocess.Popen([sys.executable, "-m", "kbroker", "cluster", "up", "2", "--data-dir", str(data)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ENV)
    try:
        bootstrap = None
        deadline = time.monotonic() + 120
        while bootstrap is None and time.monotonic() < deadline:
            line = p.stdout.readline()
            assert line, "cluster up exited early"
            if line.startswith("bootstrap servers:"):
                bootstrap = line.split(":", 1)[1].strip()
        assert bootstrap and len(bootstrap.split(",")) == 2
        admin = AdminClient({"bootstrap.servers": bootstrap, "logger": _quiet})
        admin.create_topics([NewTopic("up", 2, 1)], request_timeout=30)["up"].result(timeout=40)
        assert sorted(admin.list_topics(timeout=20).brokers) == [1, 2]
        p.send_signal(signal.SIGINT)
        assert p.wait(60) == 0
        assert "cluster stopped" in p.stdout.read()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)
