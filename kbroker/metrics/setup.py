"""Wiring for the broker: ``attach(server)`` at start-up, ``await detach(server)`` at shutdown."""

from __future__ import annotations


async def attach(server) -> None:
    port = server.config["metrics.port"]
    if port is None or port < 0:
        return
    from kbroker.metrics.collector import BrokerCollector
    from kbroker.metrics.endpoint import MetricsEndpoint
    from kbroker.metrics.loop_lag import LoopLagFamilies
    probe = getattr(server, "loop_probe", None)
    telemetry = server.client_telemetry
    collector = BrokerCollector(server, server.request_metrics, telemetry=telemetry,
                                loop_lag=LoopLagFamilies(probe) if probe is not None else None)
    endpoint = MetricsEndpoint(server.config["metrics.host"], port, [collector])
    await endpoint.start()
    server.metrics_endpoint = endpoint
    server._metrics_parts = (endpoint,)


async def detach(server) -> None:
    for part in reversed(getattr(server, "_metrics_parts", ())):
        await part.stop()


def register_apis(server) -> None:
    """KIP-714: advertise GetTelemetrySubscriptions/PushTelemetry only when configured (with
    the metrics endpoint that shows what clients push). Call before dispatchers copy the specs."""
    prefixes = server.config["client.telemetry.metrics"]
    port = server.config["metrics.port"]
    if not prefixes or port is None or port < 0:
        return
    from kbroker.handlers import registry
    from kbroker.metrics.telemetry import ClientTelemetry
    server.client_telemetry = ClientTelemetry(prefixes, server.config["client.telemetry.push.interval.ms"])
    server.api_specs.update(registry.load(("get_telemetry_subscriptions", "push_telemetry")))
    server.api_versions_cache.clear()
