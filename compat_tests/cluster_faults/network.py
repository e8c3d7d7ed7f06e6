"""Cut or slow the links between chosen nodes of a loopback cluster.

Each node of a fault-harness cluster has its own loopback address and its outbound
connections leave from it (node_main.py), so a link is a pair of addresses:

* ``Network.cut(a, b)`` drops every packet between the address sets ``a`` and ``b`` with an
  nftables table of our own (``kbroker_faults_<pid>``), in the input hook so that senders see
  silence, as across a real partition, not an immediate error;
* ``Network.slow(a, b, rate_kbit)`` throttles those packets with an htb class on ``lo``.

Both are context managers that remove what they added in ``finally``; ``Network()`` also
removes what a dead run left behind (tables and qdiscs of processes that no longer exist).
The test client itself connects from 127.0.0.1, which no node uses, so it is never cut off.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess

TABLE_PREFIX = "kbroker_faults_"
QDISC_HANDLE = "fa17"                                  # ours on lo (hex), at most one at a time
QDISC_OWNER = "/tmp/kbroker-faults-lo-qdisc.pid"        # the pid that added it


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=check)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def missing_tools() -> list[str]:
    return [t for t in ("nft", "tc") if shutil.which(t) is None]


class Network:
    def __init__(self) -> None:
        self.table = f"{TABLE_PREFIX}{os.getpid()}"
        self._rules = 0
        self.remove_stale()

    # -- cleanup --------------------------------------------------------------------------------

    @staticmethod
    def remove_stale() -> None:
        tables = _run("nft", "list", "tables").stdout
        for name in re.findall(rf"table inet ({TABLE_PREFIX}(\d+))", tables):
            if not _alive(int(name[1])):
                _run("nft", "delete", "table", "inet", name[0], check=False)
        try:
            owner = int(open(QDISC_OWNER).read().strip() or 0)
        except (OSError, ValueError):
            return
        if not _alive(owner):
            Network._del_qdisc()

    @staticmethod
    def _del_qdisc() -> None:
        if f"qdisc htb {QDISC_HANDLE}:" in _run("tc", "qdisc", "show", "dev", "lo").stdout:
            _run("tc", "qdisc", "del", "dev", "lo", "root", check=False)
        with contextlib.suppress(OSError):
            os.unlink(QDISC_OWNER)

    def close(self) -> None:
        _run("nft", "delete", "table", "inet", self.table, check=False)

    # -- faults ---------------------------------------------------------------------------------

    @contextlib.contextmanager
    def cut(self, a: "list[str] | str", b: "list[str] | str"):
        """Drop all traffic between the addresses ``a`` and ``b`` (both ways) inside the block."""
        a, b = _addrs(a), _addrs(b)
        handles = []
        try:
            if self._rules == 0:
                _run("nft", "add", "table", "inet", self.table)
                _run("nft", "add", "chain", "inet", self.table, "input",
                     "{ type filter hook input priority -10 ; policy accept ; }")
            self._rules += 1
            for src, dst in ((a, b), (b, a)):
                out = _run("nft", "--echo", "--handle", "add", "rule", "inet", self.table, "input",
                           "ip", "saddr", _set(src), "ip", "daddr", _set(dst), "drop").stdout
                handles.append(re.search(r"# handle (\d+)", out).group(1))
            yield
        finally:
            self._rules -= 1
            if self._rules <= 0:
                self._rules = 0
                self.close()
            else:
                for h in handles:
                    _run("nft", "delete", "rule", "inet", self.table, "input", "handle", h, check=False)

    @contextlib.contextmanager
    def slow(self, a: "list[str] | str", b: "list[str] | str", rate_kbit: int = 256):
        """Throttle every packet between ``a`` and ``b`` to ``rate_kbit`` inside the block (an
        htb class; queueing behind it is the delay: this kernel has no netem); other loopback
        traffic goes through an unthrottled class."""
        if "qdisc noqueue 0:" not in _run("tc", "qdisc", "show", "dev", "lo").stdout:
            raise RuntimeError("lo already has a queueing discipline: another slow() is active")
        h = QDISC_HANDLE
        try:
            with open(QDISC_OWNER, "w") as f:
                f.write(str(os.getpid()))
            _run("tc", "qdisc", "add", "dev", "lo", "root", "handle", f"{h}:", "htb", "default", "1")
            _run("tc", "class", "add", "dev", "lo", "parent", f"{h}:", "classid", f"{h}:1", "htb",
                 "rate", "100gbit", "quantum", "200000")
            _run("tc", "class", "add", "dev", "lo", "parent", f"{h}:", "classid", f"{h}:2", "htb",
                 "rate", f"{rate_kbit}kbit", "ceil", f"{rate_kbit}kbit", "quantum", "1514")
            for src, dst in [(x, y) for x in _addrs(a) for y in _addrs(b)] + \
                            [(y, x) for x in _addrs(a) for y in _addrs(b)]:
                _run("tc", "filter", "add", "dev", "lo", "parent", f"{h}:", "protocol", "ip", "prio",
                     "1", "u32", "match", "ip", "src", f"{src}/32", "match", "ip", "dst", f"{dst}/32",
                     "flowid", f"{h}:2")
            yield
        finally:
            self._del_qdisc()


def _addrs(x) -> list[str]:
    return [x] if isinstance(x, str) else list(x)


def _set(addrs: list[str]) -> str:
    return "{ " + ", ".join(addrs) + " }"
