"""Run ``python -m kbroker`` as if on a machine of its own: ``python -m
compat_tests.cluster_faults.node_main <address> serve ...``.

Every loopback connection the node opens leaves from ``<address>`` (its listeners' address)
instead of the kernel's default 127.0.0.1, as it would from a separate host. That is what
lets the fault harness cut or slow the link between two chosen nodes by address alone
(compat_tests/cluster_faults/network.py); the broker code itself is unchanged."""

from __future__ import annotations

import asyncio
import ipaddress
import runpy
import sys


def _is_loopback_v4(host) -> bool:
    try:
        return isinstance(host, str) and ipaddress.IPv4Address(host).is_loopback
    except ValueError:
        return False


def bind_outbound_to(address: str) -> None:
    original = asyncio.BaseEventLoop.create_connection

    async def create_connection(self, protocol_factory, host=None, port=None, *, local_addr=None, **kw):
        if local_addr is None and kw.get("sock") is None and _is_loopback_v4(host):
            local_addr = (address, 0)
        return await original(self, protocol_factory, host, port, local_addr=local_addr, **kw)

    asyncio.BaseEventLoop.create_connection = create_connection


if __name__ == "__main__":
    bind_outbound_to(sys.argv[1])
    sys.argv = ["kbroker", *sys.argv[2:]]
    runpy.run_module("kbroker", run_name="__main__", alter_sys=True)
