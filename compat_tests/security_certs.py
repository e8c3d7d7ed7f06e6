"""Test certificates, made at test time (never committed): a CA, the broker's certificate
for localhost/127.0.0.1, client certificates signed by the CA, and a rogue CA with a client
certificate the broker must refuse."""
from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
import ipaddress


def _name(cn: str, ou: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "kbroker-test")]
    if ou:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, ou))
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attrs)


def _key():
    return ec.generate_private_key(ec.SECP256R1())


def _cert(subject, issuer, pub, signer, *, ca=False, san=None):
    now = datetime.datetime.now(datetime.timezone.utc)
    b = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(pub)
         .serial_number(x509.random_serial_number())
         .not_valid_before(now - datetime.timedelta(minutes=5))
         .not_valid_after(now + datetime.timedelta(days=2))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if san:
        b = b.add_extension(x509.SubjectAlternativeName(san), critical=False)
    return b.sign(signer, hashes.SHA256())


def _pem_key(k) -> bytes:
    return k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                           serialization.NoEncryption())


def _pem(c) -> bytes:
    return c.public_bytes(serialization.Encoding.PEM)


@dataclass
class Certs:
    dir: Path
    ca: Path                 # the CA certificate (truststore for both sides)
    server: Path             # broker key + certificate chain in one PEM (ssl.keystore.location)
    client_cert: Path        # CN=alice,OU=clients signed by the CA
    client_key: Path
    client_pem: Path         # key + certificate in one file (kafka-python, aiokafka)
    rogue_cert: Path         # CN=mallory from an untrusted CA
    rogue_key: Path

    @property
    def client_dn(self) -> str:
        return "CN=alice,OU=clients,O=kbroker-test"


def make_certs(d: Path) -> Certs:
    d.mkdir(parents=True, exist_ok=True)
    ca_key = _key()
    ca_name = _name("kbroker test CA")
    ca = _cert(ca_name, ca_name, ca_key.public_key(), ca_key, ca=True)
    srv_key = _key()
    srv = _cert(_name("localhost"), ca_name, srv_key.public_key(), ca_key,
                san=[x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    cli_key = _key()
    cli = _cert(_name("alice", "clients"), ca_name, cli_key.public_key(), ca_key)
    rogue_ca_key = _key()
    rogue_name = _name("rogue CA")
    rogue_key = _key()
    rogue = _cert(_name("mallory", "clients"), rogue_name, rogue_key.public_key(), rogue_ca_key)
    files = {
        "ca.pem": _pem(ca), "server.pem": _pem_key(srv_key) + _pem(srv) + _pem(ca),
        "client-cert.pem": _pem(cli), "client-key.pem": _pem_key(cli_key),
        "client.pem": _pem_key(cli_key) + _pem(cli),
        "rogue-cert.pem": _pem(rogue), "rogue-key.pem": _pem_key(rogue_key),
    }
    for name, data in files.items():
        (d / name).write_bytes(data)
        (d / name).chmod(0o600)
    return Certs(d, d / "ca.pem", d / "server.pem", d / "client-cert.pem", d / "client-key.pem",
                 d / "client.pem", d / "rogue-cert.pem", d / "rogue-key.pem")
