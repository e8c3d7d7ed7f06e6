"""DescribeConfigs (32), versions 0-4: topic and broker configs with their sources, synonyms
(v1+), types and documentation (v3+); broker loggers. Values come from the broker's image
(committed ConfigRecords) and its server.properties (``kbroker.broker.config_catalog``)."""

from __future__ import annotations

import logging

from kbroker.broker.config_catalog import (DEFAULT_CONFIG, DYNAMIC_BROKER_LOGGER_CONFIG, BrokerLayers,
                                           broker_entries, topic_entries)
from kbroker.broker.config_changes import BROKER_LOGGER_RESOURCE
from kbroker.kraft.controller import validate_topic_name
from kbroker.kraft.image import BROKER_RESOURCE, TOPIC_RESOURCE
from kbroker.wire.errors import Errors
from kbroker.wire.generated.describe_configs_response import DescribeConfigsResponse

API_KEY = 32
MIN_VERSION = 0
MAX_VERSION = 4

_Result = DescribeConfigsResponse.DescribeConfigsResult
_Config = _Result.DescribeConfigsResourceResult
_Synonym = _Config.DescribeConfigsSynonym


class _Fail(Exception):
    def __init__(self, code: int, message: str | None) -> None:
        super().__init__(message)
        self.code, self.message = code, message


def _entries(broker, res):
    name = res.resource_name
    if res.resource_type == TOPIC_RESOURCE:
        err = validate_topic_name(name)
        if err:
            raise _Fail(Errors.INVALID_TOPIC_EXCEPTION, err)
        if broker.image.topic(name) is None:
            raise _Fail(Errors.UNKNOWN_TOPIC_OR_PARTITION, None)
        layers = BrokerLayers.of(broker.config, broker.image)
        return topic_entries(broker.image.topic_configs(name), layers, broker.log_config_for(name))
    if res.resource_type == BROKER_RESOURCE:
        layers = BrokerLayers.of(broker.config, broker.image)
        if not name:
            return broker_entries(layers, per_broker=False)
        if _broker_id(name) != broker.node_id:
            raise _Fail(Errors.INVALID_REQUEST,
                        f"Unexpected broker id, expected {broker.node_id} or empty string, but received {name}")
        return broker_entries(layers, per_broker=True)
    if res.resource_type == BROKER_LOGGER_RESOURCE:
        if not name:
            raise _Fail(Errors.INVALID_REQUEST, "Broker id must not be empty")
        if _broker_id(name) != broker.node_id:
            raise _Fail(Errors.INVALID_REQUEST, f"Unexpected broker id, expected {broker.node_id} but received {name}")
        return _logger_entries()
    raise _Fail(Errors.INVALID_REQUEST, f"Unsupported resource type: {res.resource_type}")


def _broker_id(name: str) -> int:
    try:
        return int(name)
    except ValueError:
        raise _Fail(Errors.INVALID_REQUEST, f"Broker id must be an integer, but it is: {name}") from None


def _logger_entries():
    """Python loggers stand in for Kafka's log4j loggers: the root and every kbroker logger,
    with their effective level in log4j's names."""
    from kbroker.broker.config_catalog import Entry
    names = ["root"] + sorted(n for n in logging.root.manager.loggerDict if n.startswith("kbroker"))
    out = []
    for n in names:
        lg = logging.getLogger() if n == "root" else logging.getLogger(n)
        level = logging.getLevelName(lg.getEffectiveLevel())
        out.append(Entry(n, {"WARNING": "WARN", "CRITICAL": "FATAL"}.get(level, level), DYNAMIC_BROKER_LOGGER_CONFIG))
    return out


def _to_wire(e, include_synonyms: bool, include_docs: bool, version: int) -> _Config:
    syns = [_Synonym(name=n, value=v, source=s) for n, v, s in e.synonyms] if include_synonyms else []
    return _Config(name=e.name, value=e.value, read_only=e.read_only,
                   is_default=version == 0 and e.source == DEFAULT_CONFIG,   # a v0-only field
                   config_source=e.source,
                   is_sensitive=e.sensitive, synonyms=syns, config_type=e.config_type,
                   documentation=e.documentation if include_docs else None)


def handle(ctx, req):
    v = ctx.api_version
    include_synonyms = v >= 1 and req.include_synonyms
    include_docs = v >= 3 and req.include_documentation
    results = []
    for res in req.resources:
        keys = res.configuration_keys
        try:
            entries = _entries(ctx.broker, res)
        except _Fail as f:
            results.append(_Result(error_code=f.code, error_message=f.message, resource_type=res.resource_type,
                                   resource_name=res.resource_name, configs=[]))
            continue
        if keys:
            wanted = set(keys)
            entries = [e for e in entries if e.name in wanted]
        results.append(_Result(error_code=0, error_message=None, resource_type=res.resource_type,
                               resource_name=res.resource_name,
                               configs=[_to_wire(e, include_synonyms, include_docs, v) for e in entries]))
    return DescribeConfigsResponse(throttle_time_ms=0, results=results)
