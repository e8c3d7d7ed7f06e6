"""`kbroker acls` and `kbroker configs --entity-type users|clients` against a broker, checked
both ways with Apache Kafka's own kafka-acls.sh and kafka-configs.sh: what one tool writes the
other reads."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from compat_tests.brokers import REPO, BrokerProcess
from compat_tests.test_ops_kafka_tools import _wave


@pytest.fixture(scope="module")
def sbroker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("sectools") / "broker", overrides={
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS"}).start()
    yield b
    b.stop()


def kb(b, *args) -> str:
    p = subprocess.run([sys.executable, "-m", "kbroker", *args[:1], "--bootstrap-server", b.bootstrap, *args[1:]],
                       capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def test_acls_and_client_configs_both_ways(sbroker, tmp_path):
    b = sbroker
    # -- written by kbroker's tools ---------------------------------------------------------
    out = kb(b, "acls", "--add", "--allow-principal", "User:alice", "--operation", "Read", "--operation", "Write",
             "--topic", "orders", "--resource-pattern-type", "prefixed")
    assert "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=PREFIXED)`" in out
    kb(b, "acls", "--add", "--consumer", "--allow-principal", "User:bob", "--topic", "t1", "--group", "g1")
    kb(b, "acls", "--add", "--deny-principal", "User:eve", "--deny-host", "10.0.0.1", "--operation", "All", "--cluster")
    kb(b, "configs", "--alter", "--entity-type", "users", "--entity-name", "alice",
       "--add-config", "SCRAM-SHA-512=[iterations=8192,password=alice-pw]")
    kb(b, "configs", "--alter", "--entity-type", "users", "--entity-name", "alice", "--add-config", "producer_byte_rate=1048576")
    kb(b, "configs", "--alter", "--entity-type", "clients", "--entity-default", "--add-config", "consumer_byte_rate=2048")
    kb(b, "configs", "--alter", "--user", "alice", "--client", "app", "--add-config", "request_percentage=50")
    # -- read (and more written) by Kafka's tools, in one wave of JVMs -------------------------
    acls = ["kafka-acls.sh", "--bootstrap-server", b.bootstrap]
    configs = ["kafka-configs.sh", "--bootstrap-server", b.bootstrap]
    res = _wave({"list": acls + ["--list"],
                 "add": acls + ["--add", "--allow-principal", "User:carol", "--operation", "Describe",
                                "--transactional-id", "tx-1"],
                 "user": configs + ["--describe", "--entity-type", "users", "--entity-name", "alice"],
                 "client": configs + ["--describe", "--entity-type", "clients", "--entity-default"],
                 "both": configs + ["--describe", "--entity-type", "users", "--entity-name", "alice",
                                    "--entity-type", "clients", "--entity-name", "app"],
                 "set": configs + ["--alter", "--entity-type", "users", "--entity-name", "bob",
                                   "--add-config", "SCRAM-SHA-256=[iterations=4096,password=bob-pw]"],
                 "setq": configs + ["--alter", "--entity-type", "clients", "--entity-name", "kc",
                                    "--add-config", "consumer_byte_rate=4096"]}, tmp_path)
    listed = res["list"]
    for text in ("name=orders, patternType=PREFIXED", "principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW",
                 "name=t1, patternType=LITERAL", "principal=User:bob, host=*, operation=READ",
                 "name=g1, patternType=LITERAL", "resourceType=CLUSTER",
                 "principal=User:eve, host=10.0.0.1, operation=ALL, permissionType=DENY"):
        assert text in listed, (text, listed)
    assert "producer_byte_rate=1048576" in res["user"] and "SCRAM-SHA-512=iterations=8192" in res["user"], res["user"]
    assert "consumer_byte_rate=2048" in res["client"], res["client"]
    assert "request_percentage=50" in res["both"], res["both"]
    # -- what Kafka's tools wrote, read by kbroker's ----------------------------------------
    ours = kb(b, "acls", "--list")
    assert "principal=User:carol, host=*, operation=DESCRIBE, permissionType=ALLOW" in ours, ours
    assert "resourceType=TRANSACTIONAL_ID, name=tx-1" in ours
    only_bob = kb(b, "acls", "--list", "--principal", "User:bob")
    assert "User:bob" in only_bob and "User:alice" not in only_bob
    out = kb(b, "configs", "--describe", "--entity-type", "users", "--entity-name", "bob")
    assert "SCRAM credential configs for user-principal 'bob' are SCRAM-SHA-256=iterations=4096" in out, out
    out = kb(b, "configs", "--describe", "--client", "kc")
    assert "Quota configs for client-id 'kc' are consumer_byte_rate=4096.0" in out, out
    # -- removals by kbroker's tools, seen by Kafka's ---------------------------------------
    out = kb(b, "acls", "--remove", "--allow-principal", "User:alice", "--operation", "Write", "--topic", "orders",
             "--resource-pattern-type", "prefixed", "--force")
    assert "operation=WRITE" in out
    kb(b, "configs", "--alter", "--entity-type", "users", "--entity-name", "alice", "--delete-config", "SCRAM-SHA-512")
    kb(b, "configs", "--alter", "--entity-type", "users", "--entity-name", "alice", "--delete-config", "producer_byte_rate")
    res = _wave({"list": acls + ["--list", "--topic", "orders", "--resource-pattern-type", "prefixed"],
                 "user": configs + ["--describe", "--entity-type", "users", "--entity-name", "alice"]}, tmp_path)
    assert "operation=READ" in res["list"] and "operation=WRITE" not in res["list"], res["list"]
    assert "SCRAM-SHA-512" not in res["user"] and "producer_byte_rate" not in res["user"], res["user"]
