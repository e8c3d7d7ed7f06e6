"""The per-request context handed to handlers."""

from __future__ import annotations

from typing import Any


class RequestContext:
    __slots__ = ("broker", "conn", "api_key", "api_version", "correlation_id", "client_id",
                 "now_ms", "listener_name")

    def __init__(self, broker: Any, conn: Any, api_key: int, api_version: int,
                 correlation_id: int, client_id: str | None, now_ms: int,
                 listener_name: str) -> None:
        self.broker = broker
        self.conn = conn
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id
        self.now_ms = now_ms
        self.listener_name = listener_name
