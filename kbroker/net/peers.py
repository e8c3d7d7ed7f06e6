"""Clients to the other brokers of the cluster, one ``KafkaClient`` per broker, addressed
through the metadata image on the inter-broker listener with that listener's TLS and SASL
(replica fetchers, coordinators sending WriteTxnMarkers, leaders asking a transaction
coordinator to verify a produce)."""

from __future__ import annotations

import asyncio

from kbroker.net.client import KafkaClient
from kbroker.replication.leader_hints import endpoint


def inter_broker_listener(cfg) -> str | None:
    """``inter.broker.listener.name``, else the first listener that is not a controller's."""
    name = cfg["inter.broker.listener.name"]
    if name:
        return name
    ctrl = set(cfg.controller_listener_names)
    for ep in cfg.listeners:
        if ep.listener_name not in ctrl:
            return ep.listener_name
    return None


class PeerClients:
    def __init__(self, server, client_id: str, request_timeout_ms: int = 30_000) -> None:
        from kbroker.security.client_auth import listener_client_security

        self.server = server
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.listener = inter_broker_listener(server.config)
        self._ssl, self._sasl = listener_client_security(server.config, self.listener)
        self._clients: dict[int, KafkaClient] = {}

    def get(self, broker_id: int) -> KafkaClient | None:
        """The client to ``broker_id``; None while the image has no live endpoint for it.
        A broker that came back on another address gets a new client."""
        ep = endpoint(self.server.image, broker_id, self.listener)
        if ep is None:
            return None
        c = self._clients.get(broker_id)
        if c is None or (c.host, c.port) != (ep[0], ep[1]):
            if c is not None:   # the old one fails its sends
                asyncio.get_running_loop().create_task(c.close())
            c = self._clients[broker_id] = KafkaClient(
                ep[0], ep[1], client_id=self.client_id, request_timeout_ms=self.request_timeout_ms,
                ssl=self._ssl, sasl=self._sasl)
        return c

    async def send(self, broker_id: int, request, timeout_ms: int | None = None):
        """Send to ``broker_id``; raises ``ConnectionError`` when it has no live endpoint and
        ``kbroker.net.client.ClientError`` when the request fails."""
        c = self.get(broker_id)
        if c is None:
            raise ConnectionError(f"broker {broker_id} has no live endpoint")
        return await c.send(request, timeout_ms=timeout_ms)

    async def close(self) -> None:
        for c in self._clients.values():
            try:
                await c.close()
            except Exception:
                pass
        self._clients.clear()
