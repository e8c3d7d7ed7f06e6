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

    # -- security (kbroker.security): one call per check in the handlers -----------------------

    @property
    def principal(self) -> str:
        from kbroker.security.manager import principal_of
        return principal_of(self.conn)

    def authorize(self, op: int, resource_type: int, name: str) -> bool:
        """Kafka's authorize(): may this request's principal do ``op`` on the resource?
        (Always True without an authorizer.) Codes: ``kbroker.security.acls``."""
        sec = getattr(self.broker, "security", None)
        return True if sec is None else sec.authorize(self.conn, op, resource_type, name)

    def authorized(self, op: int, resource_type: int, names):
        """The subset of ``names`` the principal may ``op`` (a set)."""
        sec = getattr(self.broker, "security", None)
        if sec is None or sec.authorizer is None:
            return set(names)
        return {n for n in names if sec.authorize(self.conn, op, resource_type, n)}

    def authorize_any(self, op: int, resource_type: int) -> bool:
        sec = getattr(self.broker, "security", None)
        return True if sec is None else sec.authorize_any(self.conn, op, resource_type)
