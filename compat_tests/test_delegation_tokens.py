"""Delegation tokens end to end with Apache Kafka's own tools: alice (SCRAM-SHA-512) creates a
token with kafka-delegation-tokens.sh, Kafka's Java console producer authenticates with the
token (SCRAM, tokenauth=true) and writes as alice under the authorizer, the token is described
and renewed, a token-authenticated connection may not make tokens, and once expired the token
no longer authenticates."""
from __future__ import annotations

import base64
import os
import re
import socket
import subprocess
import sys

import pytest
from confluent_kafka import Consumer, TopicPartition, OFFSET_BEGINNING
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic,
                                   ResourcePatternType, ResourceType)

from compat_tests import raw_wire
from compat_tests.brokers import REPO, BrokerProcess, free_port
from compat_tests.test_ops_kafka_tools import KAFKA, _wave
from kbroker.security.scram import ScramClient

MECH = "SCRAM-SHA-512"


@pytest.fixture(scope="module")
def tbroker(tmp_path_factory):
    d = tmp_path_factory.mktemp("tokens")
    sasl = free_port()
    b = BrokerProcess(d / "broker")
    b.overrides.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{b.port},SASL_PLAINTEXT://127.0.0.1:{sasl},CONTROLLER://127.0.0.1:{free_port()}",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": MECH,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin;User:ANONYMOUS",
        "delegation.token.secret.key": "token-secret-for-tests",
    })
    fmt = [sys.executable, "-m", "kbroker", "format",
           "--add-scram", f"{MECH}=[name=alice,iterations=4096,password=alice-secret]",
           "--add-scram", f"{MECH}=[name=admin,iterations=4096,password=admin-secret]"] + b.command()[4:]
    (d / "broker").mkdir(parents=True, exist_ok=True)
    subprocess.run(fmt, check=True, cwd=d / "broker", env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True)
    b.start()
    b.sasl_port = sasl
    yield b
    b.stop()


def _props(path, user, password, tokenauth=False):
    extra = ' tokenauth="true"' if tokenauth else ""
    path.write_text(f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism={MECH}\n"
                    "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
                    f'username="{user}" password="{password}"{extra};\n')
    return str(path)


def _scram_token_auth(port: int, token_id: str, password: str) -> int:
    """SaslHandshake v1 + two SaslAuthenticate v2 rounds by hand: the final error code."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        assert raw_wire.sasl_handshake(s, MECH) == 0
        c = ScramClient(MECH, token_id, password, extensions={"tokenauth": "true"})
        err, server_first = raw_wire.sasl_authenticate(s, 2, c.first())
        if err:
            return err
        return raw_wire.sasl_authenticate(s, 3, c.final(server_first))[0]
    finally:
        s.close()


def test_token_lifecycle_with_kafka_tools(tbroker, tmp_path):
    b = tbroker
    sasl = f"127.0.0.1:{b.sasl_port}"
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("tok", 1, 1)])["tok"].result(30)
    fs = admin.create_acls([AclBinding(ResourceType.TOPIC, "tok", ResourcePatternType.LITERAL, "User:alice", "*",
                                       op, AclPermissionType.ALLOW) for op in (AclOperation.WRITE, AclOperation.DESCRIBE)])
    for f in fs.values():
        f.result(30)
    alice = _props(tmp_path / "alice.properties", "alice", "alice-secret")
    base = ["kafka-delegation-tokens.sh", "--bootstrap-server", sasl]
    out = _wave({"create": base + ["--create", "--max-life-time-period", "-1", "--command-config", alice]}, tmp_path)["create"]
    token_id = re.search(r"tokenId\s*:\s*(\S+)", out).group(1)
    row = next(line.split() for line in out.splitlines() if line.startswith(token_id))
    hmac_b64 = row[1]
    assert row[2] == "User:alice", out
    token = _props(tmp_path / "token.properties", token_id, hmac_b64, tokenauth=True)

    # a connection authenticated by a token may not create tokens (run beside the wave below)
    by_token = subprocess.Popen([str(KAFKA / "bin" / base[0]), *base[1:], "--create", "--max-life-time-period", "-1",
                                 "--command-config", token], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=tmp_path,
                                env={**os.environ, "KAFKA_HEAP_OPTS": "-Xmx256m", "LOG_DIR": str(tmp_path / "logs")})
    # the Java producer authenticates with the token and writes as alice (her ACLs apply)
    res = _wave({"produce": ["kafka-console-producer.sh", "--bootstrap-server", sasl, "--topic", "tok",
                             "--producer.config", token],
                 # (without --owner-principal Kafka 4's tool sends an empty owner list: no tokens)
                 "describe": base + ["--describe", "--owner-principal", "User:alice", "--command-config", alice],
                 "renew": base + ["--renew", "--hmac", hmac_b64, "--renew-time-period", "600000", "--command-config", alice]},
                tmp_path, inputs={"produce": b"by-token-1\nby-token-2\n"})
    out = by_token.communicate(timeout=180)[0].decode()
    assert by_token.returncode != 0 and "UnsupportedByAuthenticationException" in out, out
    assert token_id in res["describe"], res["describe"] + b.tail(60)
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "tok-check", "enable.auto.commit": False})
    c.assign([TopicPartition("tok", 0, OFFSET_BEGINNING)])
    got = []
    for _ in range(60):
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value())
        if len(got) == 2:
            break
    c.close()
    assert got == [b"by-token-1", b"by-token-2"]

    # the raw exchange works with the token, fails with a wrong HMAC, and after expiry
    assert _scram_token_auth(b.sasl_port, token_id, hmac_b64) == 0
    assert _scram_token_auth(b.sasl_port, token_id, base64.b64encode(b"x" * 64).decode()) != 0
    _wave({"expire": base + ["--expire", "--hmac", hmac_b64, "--expiry-time-period", "-1", "--command-config", alice]},
          tmp_path)
    assert _scram_token_auth(b.sasl_port, token_id, hmac_b64) != 0


def test_kbroker_tools_authenticate_with_command_config(tbroker, tmp_path):
    """`kbroker acls --command-config` speaks SCRAM (and with tokenauth, a token) like Kafka's
    tools: the super user lists ACLs, alice is refused the cluster operation, a wrong password
    is refused at authentication."""
    b = tbroker
    sasl = f"127.0.0.1:{b.sasl_port}"

    def acls(props):
        return subprocess.run([sys.executable, "-m", "kbroker", "acls", "--bootstrap-server", sasl, "--list",
                               "--command-config", props], capture_output=True, text=True, timeout=60,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    ok = acls(_props(tmp_path / "admin.properties", "admin", "admin-secret"))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    denied = acls(_props(tmp_path / "alice.properties", "alice", "alice-secret"))
    assert denied.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in denied.stderr, denied.stdout + denied.stderr
    wrong = acls(_props(tmp_path / "wrong.properties", "admin", "nope"))
    assert wrong.returncode == 1 and "authentication failed" in wrong.stderr.lower(), wrong.stdout + wrong.stderr
