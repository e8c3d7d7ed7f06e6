"""TLS for SSL and SASL_SSL listeners: Kafka's ``ssl.*`` configs, a connection over ``ssl.SSLObject``.

The plain :class:`~kbroker.net.connection.Connection` drives its socket itself (``sendfile``
for fetches, see its docstring), so TLS is done the same way: a memory-BIO ``SSLObject``
between the socket and the frame decoder. The handshake advances one step per readable event
(never blocks the loop); received ciphertext is decrypted and handed to the decoder; queued
response chunks (file regions read with ``pread``, since records must pass through the cipher)
are encrypted into a bounded ciphertext buffer written with ``send``. PLAINTEXT connections
keep the zero-copy path; only TLS connections pay for the copies.

Keystores and truststores are PEM, as Kafka's ``ssl.keystore.type=PEM``:
``ssl.keystore.location`` (key + certificate chain in one file, key optionally encrypted with
``ssl.key.password``) or ``ssl.keystore.certificate.chain`` + ``ssl.keystore.key`` inline;
``ssl.truststore.location`` or ``ssl.truststore.certificates`` inline.
"""

from __future__ import annotations

import logging
import os
import ssl
import tempfile
from typing import Callable

from kbroker.config import ConfigError
from kbroker.net.connection import Connection, _Region
from kbroker.security.principal import ssl_principal_name

log = logging.getLogger("kbroker.security")

_OUT_HIGH = 1024 * 1024        # stop encrypting while this much ciphertext waits for the socket
_REGION_CHUNK = 256 * 1024     # file regions are read and encrypted in pieces of this size
_RECV = 256 * 1024

_PROTOCOLS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


def build_server_context(get: Callable[[str], str | None]) -> ssl.SSLContext:
    """An SSLContext from Kafka's ssl.* configs; ``get(name)`` returns the raw value (listener
    prefix already applied) or None."""
    ktype = (get("ssl.keystore.type") or "PEM").upper()
    ttype = (get("ssl.truststore.type") or "PEM").upper()
    if ktype != "PEM" or ttype != "PEM":
        raise ConfigError("kbroker reads PEM keystores and truststores only: set ssl.keystore.type=PEM "
                          "and ssl.truststore.type=PEM (convert JKS/PKCS12 with keytool/openssl)")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    enabled = [p.strip() for p in (get("ssl.enabled.protocols") or "TLSv1.2,TLSv1.3").split(",") if p.strip()]
    versions = [_PROTOCOLS[p] for p in enabled if p in _PROTOCOLS]
    if not versions:
        raise ConfigError(f"ssl.enabled.protocols {enabled}: kbroker supports TLSv1.2 and TLSv1.3")
    ctx.minimum_version = min(versions)
    ctx.maximum_version = max(versions)
    ciphers = get("ssl.cipher.suites")
    if ciphers:
        ctx.set_ciphers(":".join(c.strip() for c in ciphers.split(",")))
    password = get("ssl.key.password") or None
    location = get("ssl.keystore.location")
    chain, key = get("ssl.keystore.certificate.chain"), get("ssl.keystore.key")
    if location:
        ctx.load_cert_chain(location, password=password)
    elif chain and key:
        # load_cert_chain reads files only: a private temp file, removed at once
        fd, path = tempfile.mkstemp(suffix=".pem")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(key.strip() + "\n" + chain.strip() + "\n")
            ctx.load_cert_chain(path, password=password)
        finally:
            os.unlink(path)
    else:
        raise ConfigError("an SSL listener needs ssl.keystore.location or ssl.keystore.certificate.chain "
                          "and ssl.keystore.key")
    tloc, tcerts = get("ssl.truststore.location"), get("ssl.truststore.certificates")
    if tloc:
        ctx.load_verify_locations(cafile=tloc)
    elif tcerts:
        ctx.load_verify_locations(cadata=tcerts)
    auth = (get("ssl.client.auth") or "none").lower()
    if auth not in ("none", "requested", "required"):
        raise ConfigError(f"Invalid value {auth} for configuration ssl.client.auth: String must be one of: "
                          "required, requested, none")
    if auth != "none" and not (tloc or tcerts):
        raise ConfigError(f"ssl.client.auth={auth} needs a truststore (ssl.truststore.location)")
    ctx.verify_mode = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL,
                       "required": ssl.CERT_REQUIRED}[auth]
    return ctx


class TlsConnection(Connection):
    """A :class:`Connection` whose bytes pass through TLS (see the module docstring)."""

    __slots__ = ("_tls", "_in", "_out_bio", "_cipher", "_handshaken", "_on_handshake")

    def __init__(self, *args, ssl_context: ssl.SSLContext,
                 on_handshake: Callable[["TlsConnection", dict | None], None] | None = None, **kw) -> None:
        super().__init__(*args, **kw)
        self._recv_into = False
        self._in = ssl.MemoryBIO()
        self._out_bio = ssl.MemoryBIO()
        self._tls = ssl_context.wrap_bio(self._in, self._out_bio, server_side=True)
        self._cipher = bytearray()      # ciphertext not yet taken by the socket
        self._handshaken = False
        self._on_handshake = on_handshake

    # -- reading -----------------------------------------------------------------------------

    def _on_readable(self) -> None:
        if self._queued:    # waiting its turn (Connection._wait_turn)
            return
        if not self._budget.may_start():   # the iteration budget (kbroker/net/iteration_budget.py)
            self._wait_turn(reading=True)
            return
        try:
            data = self.sock.recv(_RECV)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self.close(f"read error: {e}" if not isinstance(e, (ConnectionResetError, BrokenPipeError)) else None)
            return
        if not data:
            self.close()
            return
        self._in.write(data)
        if not self._handshaken and not self._advance_handshake():
            return
        chunks = []
        peer_closed = False
        while True:
            try:
                chunk = self._tls.read(_RECV)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:   # close_notify
                self.close()
                return
            except ssl.SSLError as e:
                self.close(f"TLS error: {e}")
                return
            if not chunk:   # an SSLObject reports the peer's close_notify as an empty read
                peer_closed = True
                break
            chunks.append(chunk)
        self._pump_out()   # TLS 1.3 session tickets, alerts
        if chunks and not self._closed:
            # one read usually decrypts to one chunk: hand that bytes object on as it is
            plain = chunks[0] if len(chunks) == 1 else b"".join(chunks)
            self._received(len(plain), plain)
        if peer_closed:     # (else a client's TLS shutdown waits for us: 30 s in asyncio)
            self.close()

    def _advance_handshake(self) -> bool:
        try:
            self._tls.do_handshake()
        except ssl.SSLWantReadError:
            self._pump_out()
            return False
        except ssl.SSLError as e:
            self._pump_out()   # the alert, so the client learns why
            self._flush_cipher()
            log.warning("closing connection %s from %s: TLS handshake failed: %s", self.conn_id, self.peer,
                        getattr(e, "verify_message", None) or e.reason or e)
            self.close()
            return False
        self._handshaken = True
        self._pump_out()
        if self._on_handshake is not None:
            self._on_handshake(self, self._tls.getpeercert())
        return not self._closed

    @property
    def peer_certificate(self) -> dict | None:
        return self._tls.getpeercert() if self._handshaken else None

    # -- writing -----------------------------------------------------------------------------

    def _pending_output(self) -> bool:
        return bool(self._outbox or self._wq or self._cipher)

    def _on_writable(self) -> None:
        self._flush()
        if not self._closed and not self._wq and not self._cipher:
            self._after_progress()

    def _pump_out(self) -> None:
        if self._out_bio.pending:
            self._cipher += self._out_bio.read()
        self._flush_cipher()

    def _flush(self) -> None:
        """Encrypt queued chunks (while the ciphertext buffer is small) and write."""
        wq = self._wq
        while wq and len(self._cipher) < _OUT_HIGH and self._handshaken:
            head = wq[0]
            if type(head) is _Region:
                n = min(head.left, _REGION_CHUNK)
                try:
                    data = os.pread(head.fd, n, head.pos)
                except OSError as e:
                    self.close(f"reading a file region failed: {e}")
                    return
                if len(data) != n:
                    self.close("file region shorter than expected")
                    return
                head.pos += n
                head.left -= n
                if not head.left:
                    wq.popleft()
            else:
                data = head
                n = len(data) if not isinstance(data, memoryview) else data.nbytes
                wq.popleft()
            self._wq_bytes -= n
            try:
                self._tls.write(data)
            except ssl.SSLError as e:
                self.close(f"TLS error: {e}")
                return
            self._cipher += self._out_bio.read()
        self._flush_cipher()

    def _flush_cipher(self) -> None:
        if self._closed:
            return
        buf = self._cipher
        while buf:
            try:
                n = self.sock.send(buf)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as e:
                self.close(f"write error: {e}")
                return
            del buf[:n]
        if buf or (self._wq and self._handshaken):
            if not self._writing:
                self._writing = True
                self.loop.add_writer(self.fd, self._on_writable)
        elif self._writing:
            self._writing = False
            self.loop.remove_writer(self.fd)


def peer_principal_name(cert: dict | None, rules) -> str | None:
    """The mapped principal name of a verified client certificate (None: no certificate)."""
    if not cert or not cert.get("subject"):
        return None
    return ssl_principal_name(cert["subject"], rules)
