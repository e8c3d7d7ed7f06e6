"""Start and stop real broker processes for compat tests.

Every broker listens on 127.0.0.1 on a free port, keeps its data in a temp dir, and is
stopped by the PID we started. KBROKER_COMPAT_PEER=tansu runs the same tests against the
Tansu peer instead, which is how we check that a test fails for the right reasons.
"""
from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEPS = REPO / ".deps"
TANSU = DEPS / "tansu" / "tansu"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _api_versions_ok(port: int) -> bool:
    """True once the broker answers an ApiVersions v0 request."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            client_id = b"probe"
            body = struct.pack(">hhih", 18, 0, 1, len(client_id)) + client_id
            s.sendall(struct.pack(">i", len(body)) + body)
            head = s.recv(8)
            return len(head) == 8 and struct.unpack(">i", head[4:8])[0] == 1
    except OSError:
        return False


class BrokerProcess:
    """One broker process: kbroker by default, or the Tansu peer."""

    def __init__(self, data_dir: Path, port: int | None = None, overrides: dict | None = None,
                 kind: str | None = None, node_id: int = 1):
        self.kind = kind or os.environ.get("KBROKER_COMPAT_PEER", "kbroker")
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
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
                                     cwd=self.data_dir, env={**os.environ, "PYTHONPATH": str(REPO)})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.kind} exited with {self.proc.returncode}:\n{self.tail()}")
            if _api_versions_ok(self.port):
                return self
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"{self.kind} did not answer within {timeout}s:\n{self.tail()}")

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
