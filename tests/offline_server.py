"""A broker started in-process without listening, for tests that call its handlers directly
on a private event loop with a fake clock."""

from __future__ import annotations

import asyncio

from kbroker.clock import FakeClock
from kbroker.config import BrokerConfig
from kbroker.server import KafkaServer

PLAINTEXT = "listeners=PLAINTEXT://127.0.0.1:9092"


def start_offline(data_dir, *config: str, clock=None) -> KafkaServer:
    """``config`` are ``key=value`` lines after ``log.dirs``; give ``listeners=`` in it to
    replace the single PLAINTEXT listener. The server's loop is ``server.loop``; end it with
    ``stop_offline``."""
    if not any(c.startswith("listeners=") for c in config):
        config = (PLAINTEXT, *config)
    loop = asyncio.new_event_loop()
    server = KafkaServer(BrokerConfig.load(None, [f"log.dirs={data_dir}", *config]), clock or FakeClock())
    loop.run_until_complete(server.start(listen=False))
    server.loop = loop
    return server


def stop_offline(server: KafkaServer) -> None:
    server.loop.run_until_complete(server.shutdown())
    server.loop.close()
