"""The metrics HTTP endpoint: ``GET /metrics`` in Prometheus text format, served on the
broker's event loop (a scrape reads broker state from the thread that owns it), on its own
port (``metrics.port``), never on a client listener."""

from __future__ import annotations

import asyncio
import logging

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

log = logging.getLogger("kbroker.metrics")


class MetricsEndpoint:
    def __init__(self, host: str, port: int, collectors) -> None:
        self.host = host
        self.port = port
        self.registry = CollectorRegistry(auto_describe=False)
        for c in collectors:
            self.registry.register(c)
        self._server: asyncio.AbstractServer | None = None

    @property
    def bound_port(self) -> int:
        return self._server.sockets[0].getsockname()[1] if self._server else self.port

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port)
        log.info("metrics endpoint on http://%s:%d/metrics", self.host, self.bound_port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), 10)
            while (await asyncio.wait_for(reader.readline(), 10)) not in (b"\r\n", b"\n", b""):
                pass
            parts = line.decode("latin-1").split()
            if len(parts) >= 2 and parts[0] == "GET" and parts[1].split("?")[0] in ("/metrics", "/"):
                body = generate_latest(self.registry)
                head = f"HTTP/1.1 200 OK\r\nContent-Type: {CONTENT_TYPE_LATEST}\r\n"
            else:
                body = b"not found\n"
                head = "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\n"
            writer.write(f"{head}Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
            await writer.drain()
        except (asyncio.TimeoutError, ConnectionError):
            pass
        except Exception:
            log.exception("metrics scrape failed")
        finally:
            writer.close()
