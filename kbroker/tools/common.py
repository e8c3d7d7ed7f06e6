"""Shared by the tools: the --bootstrap-server flag, key=value lists, error exits."""

from __future__ import annotations

import sys

from kbroker.tools.client import KafkaError, ToolClient


def add_bootstrap(p) -> None:
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT",
                   help="the broker to connect to")
    p.add_argument("--command-config", help="client properties file (security.protocol, sasl.mechanism, "
                                            "sasl.jaas.config, ssl.truststore.location as PEM ...)")


def client(args) -> ToolClient:
    ssl = sasl = None
    if getattr(args, "command_config", None):
        from kbroker.config import parse_properties
        from kbroker.security.client_auth import from_client_properties
        with open(args.command_config, encoding="utf-8") as f:
            ssl, sasl = from_client_properties(parse_properties(f.read()))
    return ToolClient(args.bootstrap_server.split(",")[0], ssl=ssl, sasl=sasl)


def parse_kv(items, sep: str = ",") -> dict[str, str]:
    """``a=1,b=2`` (or repeated flags) -> {"a": "1", "b": "2"}."""
    out: dict[str, str] = {}
    for item in items or ():
        for kv in (item.split(sep) if sep else [item]):
            if not kv:
                continue
            k, eq, v = kv.partition("=")
            if not eq:
                raise SystemExit(f"Invalid config entry {kv!r}: expected key=value")
            out[k.strip()] = v
    return out


def run(fn, args) -> int:
    """Run a tool body; a Kafka error becomes a message and exit status 1, like Kafka's tools."""
    try:
        return fn(args) or 0
    except BrokenPipeError:
        # stdout closed early (`... | head`): stop quietly, as Unix tools do
        sys.stdout = None
        return 0
    except KafkaError as e:
        print(f"Error while executing {args.command}: {e}", file=sys.stderr)
        return 1
    except (ConnectionError, OSError) as e:
        print(f"Error: cannot reach {args.bootstrap_server}: {e}", file=sys.stderr)
        return 1
