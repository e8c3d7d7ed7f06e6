"""The handler registry: API key -> handler module, the single source of ApiVersions.

Each module in ``HANDLER_MODULES`` declares ``API_KEY``, ``MIN_VERSION``, ``MAX_VERSION`` and
``handle(ctx, request)`` (see ``kbroker.handlers``). ApiVersions advertises exactly these
ranges, so there is no second list to drift. A range wider than the schemas is an error at
import time.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

from kbroker.wire import registry as wire

HANDLER_MODULES: tuple[str, ...] = (
    "api_versions",
    "metadata",
    "produce",
    "fetch",
    "list_offsets",
    "create_topics",
    "delete_topics",
    "init_producer_id",
    # consumer groups (kbroker.groups); find_coordinator is listed with transactions
    "join_group",
    "sync_group",
    "heartbeat",
    "leave_group",
    "offset_commit",
    "offset_fetch",
    "offset_delete",
    "list_groups",
    "describe_groups",
    "delete_groups",
    "consumer_group_heartbeat",
    "consumer_group_describe",
    # transactions (kbroker.txn)
    "find_coordinator",
    "add_partitions_to_txn",
    "add_offsets_to_txn",
    "end_txn",
    "write_txn_markers",
    "describe_transactions",
    "list_transactions",
    "describe_producers",
    "txn_offset_commit",
    # admin: configs, partitions, records, cluster (kbroker.broker.config_catalog)
    "describe_configs",
    "alter_configs",
    "incremental_alter_configs",
    "create_partitions",
    "describe_topic_partitions",
    "delete_records",
    "describe_cluster",
    "describe_log_dirs",
    "offset_for_leader_epoch",
    "describe_quorum",           # forwarded to the active controller (kbroker.kraft)
    "update_features",           # forwarded to the active controller (kbroker.kraft)
    "elect_leaders",             # forwarded to the active controller (kraft.partition_admin)
    "alter_partition_reassignments",
    "list_partition_reassignments",
    # security (kbroker.security)
    "sasl_handshake",
    "sasl_authenticate",
    "describe_user_scram_credentials",
    "alter_user_scram_credentials",
    "create_acls",
    "describe_acls",
    "delete_acls",
    "describe_client_quotas",
    "alter_client_quotas",
    "create_delegation_token", "renew_delegation_token", "expire_delegation_token", "describe_delegation_token",
)


@dataclass(frozen=True)
class ApiSpec:
    api_key: int
    name: str
    min_version: int
    max_version: int
    handle: Callable[..., Any]
    request_cls: type
    response_cls: type


def load(modules: tuple[str, ...] = HANDLER_MODULES) -> dict[int, ApiSpec]:
    out: dict[int, ApiSpec] = {}
    for name in modules:
        mod = importlib.import_module(f"kbroker.handlers.{name}")
        key = mod.API_KEY
        lo, hi = mod.MIN_VERSION, mod.MAX_VERSION
        slo, shi = wire.VERSIONS[key]
        if not (slo <= lo <= hi <= shi):
            raise ValueError(f"handler {name}: versions {lo}-{hi} outside the schema's {slo}-{shi}")
        if key in out:
            raise ValueError(f"handler {name}: API key {key} registered twice")
        out[key] = ApiSpec(key, wire.api_name(key), lo, hi, mod.handle, wire.REQUESTS[key], wire.RESPONSES[key])
    return out
