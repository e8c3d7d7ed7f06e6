"""The harness's network faults on real sockets: a cut link carries nothing and heals, a
throttled link is slower than an untouched one in the same run, other addresses are never
affected, and every rule is gone afterwards (also those a killed run left behind)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from compat_tests.cluster_faults.harness import node_hosts
from compat_tests.cluster_faults.network import TABLE_PREFIX, Network, missing_tools

pytestmark = pytest.mark.skipif(bool(missing_tools()), reason=f"needs {missing_tools()} "
                                "(nftables, iproute2: scripts/test.sh installs them)")


class Echo:
    def __init__(self, host: str) -> None:
        self.sock = socket.socket()
        self.sock.bind((host, 0))
        self.sock.listen()
        self.addr = self.sock.getsockname()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._echo, args=(c,), daemon=True).start()

    @staticmethod
    def _echo(c) -> None:
        with c:
            while data := c.recv(65536):
                c.sendall(data)


def round_trip(src: str, dst: tuple, nbytes: int = 1, timeout: float = 5.0) -> float:
    """Seconds to connect from ``src`` and echo ``nbytes``; raises OSError if the link is cut."""
    with socket.socket() as s:
        s.bind((src, 0))
        s.settimeout(timeout)
        t0 = time.monotonic()
        s.connect(dst)
        s.sendall(b"x" * nbytes)
        got = 0
        while got < nbytes:
            chunk = s.recv(65536)
            if not chunk:
                raise OSError("closed")
            got += len(chunk)
        return time.monotonic() - t0


def our_tables() -> list[str]:
    return [t for t in subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout.split()
            if t.startswith(TABLE_PREFIX)]


def test_cut_drops_both_ways_and_heals_without_touching_others():
    h = node_hosts(3)
    net = Network()
    echo2, echo3 = Echo(h[2]), Echo(h[3])
    try:
        round_trip(h[1], echo2.addr)
        with net.cut(h[1], [h[2]]):
            assert net.table in our_tables()
            with pytest.raises(OSError):
                round_trip(h[1], echo2.addr, timeout=1.0)
            with pytest.raises(OSError):
                round_trip(h[2], Echo(h[1]).addr, timeout=1.0)
            round_trip(h[1], echo3.addr)            # another link
            round_trip("127.0.0.1", echo2.addr)     # the test client's own address
        assert net.table not in our_tables()
        round_trip(h[1], echo2.addr)
    finally:
        net.close()


def test_slow_throttles_only_the_chosen_link():
    h = node_hosts(3)
    net = Network()
    echo2 = Echo(h[2])
    n = 256 * 1024
    untouched = round_trip(h[3], echo2.addr, n)
    with net.slow([h[1]], [h[2]], rate_kbit=2000):
        slowed = round_trip(h[1], echo2.addr, n)
        other = round_trip(h[3], echo2.addr, n)
    after = round_trip(h[1], echo2.addr, n)
    # 2 x 256 KiB at 2 Mbit/s take at least 2 s; the same transfers elsewhere take ms
    assert slowed > 1.5 and slowed > 4 * max(untouched, other, after), (slowed, untouched, other, after)
    assert "htb" not in subprocess.run(["tc", "qdisc", "show", "dev", "lo"], capture_output=True, text=True).stdout


def test_rules_of_a_killed_run_are_removed_at_the_next_start():
    code = ("from compat_tests.cluster_faults.network import Network; import os, time\n"
            "n = Network(); c = n.cut('127.0.0.201', '127.0.0.202'); c.__enter__()\n"
            "print(n.table, flush=True); time.sleep(60)")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                         cwd=os.getcwd(), env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        table = p.stdout.readline().strip()
        assert table in our_tables()
    finally:
        p.kill()
        p.wait(10)
    assert table in our_tables()      # kill -9: nobody removed it
    Network().close()
    assert table not in our_tables()
