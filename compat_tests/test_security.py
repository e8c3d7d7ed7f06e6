"""TLS and SASL with real clients: confluent-kafka, kafka-python, aiokafka and the Java client
over SASL_SSL with SCRAM-SHA-512, over mutual TLS and over SASL_PLAINTEXT with PLAIN; wrong
passwords and untrusted certificates are refused, the connection is closed, and the broker keeps
serving everyone else. Certificates are made at test time (compat_tests/security_certs.py)."""
from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
import struct

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (AdminClient, NewTopic, ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialDeletion, UserScramCredentialUpsertion)

from compat_tests import raw_wire
from compat_tests.brokers import REPO, BrokerProcess, free_port
from compat_tests.clients.java import available as java_available
from compat_tests.security_certs import make_certs
from compat_tests.security_clients import MODES, Target, roundtrip

CLIENTS = ["confluent-kafka", "kafka-python", "aiokafka", "java-4.3.0"]
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    d = tmp_path_factory.mktemp("secure")
    certs = make_certs(d / "certs")
    ports = {"SSL": free_port(), "SASL_SSL": free_port(), "SASL_PLAINTEXT": free_port()}
    b = BrokerProcess(d / "broker")
    b.overrides.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{b.port}," + ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items())
                     + f",CONTROLLER://127.0.0.1:{free_port()}",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs.server),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs.ca),
        "listener.name.ssl.ssl.client.auth": "required",
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-512,SCRAM-SHA-256",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
    })
    # alice's SCRAM credential comes from `kbroker format --add-scram` (kafka-storage.sh's syntax)
    fmt = [sys.executable, "-m", "kbroker", "format", "--add-scram", "SCRAM-SHA-512=[name=alice,iterations=8192,password=alice-secret]"]
    fmt += b.command()[4:]   # the same --override list serve gets
    (d / "broker").mkdir(parents=True, exist_ok=True)
    subprocess.run(fmt, check=True, cwd=d / "broker", env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True)
    b.start()
    b.ports, b.certs, b.admin = ports, certs, AdminClient({"bootstrap.servers": b.bootstrap})
    yield b
    b.stop()


def _target(b, mode, **kw) -> Target:
    listener = {"sasl_ssl_scram512": "SASL_SSL", "mtls": "SSL", "sasl_plaintext_plain": "SASL_PLAINTEXT"}[mode]
    return Target(mode, f"127.0.0.1:{b.ports[listener]}", b.certs, **kw)


def _topic(b, name):
    b.admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    return name


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("client", CLIENTS)
def test_client_roundtrip(secure, client, mode):
    if client.startswith("java") and not java_available("4.3.0"):
        pytest.fail("kafka-clients 4.3.0 jars missing: run scripts/fetch-java-clients.sh")   # installed by scripts/test.sh
    topic = _topic(secure, f"sec-{client}-{mode}".replace(".", "_"))
    values = [f"{client}-{mode}-{i}".encode() * 20 for i in range(200)]
    assert roundtrip(client, _target(secure, mode), topic, values) == values


def _sasl_plain_exchange(port, user, password):
    """SaslHandshake v1 + SaslAuthenticate v2 by hand: (error code, closed afterwards)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        assert raw_wire.sasl_handshake(s, "PLAIN") == 0
        err, _ = raw_wire.sasl_authenticate(s, 2, b"\0" + user.encode() + b"\0" + password.encode())
        try:
            closed = s.recv(1) == b""
        except socket.timeout:
            closed = False
        return err, closed
    finally:
        s.close()


def test_wrong_password_is_refused_and_connection_closed(secure):
    port = secure.ports["SASL_PLAINTEXT"]
    assert _sasl_plain_exchange(port, "alice", "wrong") == (58, True)     # SASL_AUTHENTICATION_FAILED
    assert _sasl_plain_exchange(port, "nobody", "alice-secret") == (58, True)
    assert _sasl_plain_exchange(port, "alice", "alice-secret")[0] == 0


def test_request_before_authentication_closes_the_connection(secure):
    s = socket.create_connection(("127.0.0.1", secure.ports["SASL_PLAINTEXT"]), timeout=10)
    try:
        s.sendall(raw_wire.request(3, 1, 7, struct.pack(">i", -1)))   # Metadata v1, all topics
        assert s.recv(1) == b""
    finally:
        s.close()


@pytest.mark.parametrize("client", ["confluent-kafka", "java-4.3.0"])
def test_clients_with_wrong_password_fail(secure, client):
    bad = _target(secure, "sasl_ssl_scram512", password="not-the-password")
    topic = _topic(secure, f"sec-bad-{client}".replace(".", "_"))
    if client == "confluent-kafka":
        errors, delivered = _confluent_attempt(bad, topic)
        assert delivered == 0
        assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
    else:
        with pytest.raises(RuntimeError, match="SaslAuthenticationException"):
            roundtrip(client, bad, topic, [b"x"])
    # the broker still serves a good client on the same listener
    assert roundtrip("confluent-kafka", _target(secure, "sasl_ssl_scram512"), topic, [b"ok"]) == [b"ok"]


def _confluent_attempt(t, topic, seconds=6):
    """Try to produce one record: (client errors seen, records delivered)."""
    errors, delivered = [], []
    p = Producer({**t.confluent(), "error_cb": lambda e: errors.append(e), "message.timeout.ms": seconds * 1000})
    p.produce(topic, b"x", on_delivery=lambda e, m: delivered.append(e is None))
    p.flush(seconds + 5)
    return errors, sum(delivered)


def test_untrusted_certificate_is_refused(secure):
    certs = secure.certs
    ctx = ssl.create_default_context(cafile=str(certs.ca))
    ctx.load_cert_chain(str(certs.rogue_cert), str(certs.rogue_key))
    refused = False
    with socket.create_connection(("127.0.0.1", secure.ports["SSL"]), timeout=10) as raw:
        try:
            with ctx.wrap_socket(raw, server_hostname="localhost") as s:
                # TLS 1.3: the client finishes first; the server's alert arrives on the next read
                s.sendall(raw_wire.request(18, 0, 1))
                refused = s.recv(4) == b""
        except (ssl.SSLError, ConnectionError):
            refused = True
    assert refused
    # and through a real client: no record gets in, a trusted client still gets through
    topic = _topic(secure, "sec-rogue")
    errors, delivered = _confluent_attempt(_target(secure, "mtls", rogue=True), topic)
    assert delivered == 0 and errors
    assert roundtrip("confluent-kafka", _target(secure, "mtls"), topic, [b"ok"]) == [b"ok"]


def test_no_client_certificate_on_required_listener(secure):
    ctx = ssl.create_default_context(cafile=str(secure.certs.ca))
    with socket.create_connection(("127.0.0.1", secure.ports["SSL"]), timeout=10) as raw:
        try:
            with ctx.wrap_socket(raw, server_hostname="localhost") as s:
                s.sendall(raw_wire.request(18, 0, 1))
                assert s.recv(4) == b""
        except (ssl.SSLError, ConnectionError):
            pass


@pytest.mark.parametrize("version", ["TLSv1_2", "TLSv1_3"])
def test_tls_versions(secure, version):
    """TLS 1.2 and 1.3 (ssl.enabled.protocols' default) both complete and carry requests."""
    ctx = ssl.create_default_context(cafile=str(secure.certs.ca))
    ctx.minimum_version = ctx.maximum_version = getattr(ssl.TLSVersion, version)
    ctx.load_cert_chain(str(secure.certs.client_cert), str(secure.certs.client_key))
    with socket.create_connection(("127.0.0.1", secure.ports["SSL"]), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
            for corr in (1, 2):
                assert struct.unpack(">i", raw_wire.call(s, 18, 0, corr)[:4])[0] == corr
            assert s.version() == version.replace("_", ".")


def test_scram_credentials_api(secure):
    """AlterUserScramCredentials / DescribeUserScramCredentials through a stock admin client;
    the new user authenticates at once, a deleted one no longer does."""
    admin = secure.admin
    for f in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"carol-pw")]).values():
        f.result(30)
    desc = admin.describe_user_scram_credentials(["alice", "carol"]).result(30) \
        if hasattr(admin.describe_user_scram_credentials(["alice"]), "result") else \
        {u: f.result(30) for u, f in admin.describe_user_scram_credentials(["alice", "carol"]).items()}
    assert [(i.mechanism, i.iterations) for i in desc["alice"].scram_credential_infos] == [(ScramMechanism.SCRAM_SHA_512, 8192)]
    assert [i.iterations for i in desc["carol"].scram_credential_infos] == [4096]
    topic = _topic(secure, "sec-carol")
    carol = _target(secure, "sasl_ssl_scram512", user="carol", password="carol-pw")
    assert roundtrip("confluent-kafka", carol, topic, [b"c"]) == [b"c"]
    for f in admin.alter_user_scram_credentials([UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_512)]).values():
        f.result(30)
    errors, delivered = _confluent_attempt(carol, topic)
    assert delivered == 0 and any(e.code() == KafkaError._AUTHENTICATION for e in errors)
