"""``kbroker configs`` (kafka-configs.sh) for topics and brokers: --describe [--all],
--alter --add-config k=v,... --delete-config k,... (users/clients: kbroker.tools.client_configs)."""

from __future__ import annotations

from kbroker.tools import client_configs
from kbroker.tools.client import BROKER_RESOURCE, TOPIC_RESOURCE
from kbroker.tools.common import add_bootstrap, client, run

SOURCES = {0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
           4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG",
           7: "CLIENT_METRICS_CONFIG", 8: "GROUP_CONFIG"}
ENTITY_TYPES = {"topics": TOPIC_RESOURCE, "brokers": BROKER_RESOURCE}
DYNAMIC = {1, 2, 3}


def add_parser(sub) -> None:
    p = sub.add_parser("configs", help="describe and alter topic/broker configs (like kafka-configs.sh)")
    add_bootstrap(p)
    act = p.add_mutually_exclusive_group(required=True)
    act.add_argument("--describe", action="store_true")
    act.add_argument("--alter", action="store_true")
    p.add_argument("--entity-type", choices=sorted(ENTITY_TYPES) + client_configs.ENTITY_TYPES)
    p.add_argument("--entity-name")
    p.add_argument("--entity-default", action="store_true")
    p.add_argument("--topic", help="shorthand for --entity-type topics --entity-name TOPIC")
    p.add_argument("--broker", help="shorthand for --entity-type brokers --entity-name ID")
    p.add_argument("--broker-defaults", action="store_true")
    p.add_argument("--all", action="store_true", help="with --describe: every config, not only dynamic ones")
    p.add_argument("--add-config", help="k1=v1,k2=[v1,v2,v2],k3=v3")
    p.add_argument("--add-config-file")
    p.add_argument("--delete-config", help="k1,k2")
    client_configs.add_arguments(p)   # users / clients: quotas and SCRAM credentials
    p.set_defaults(tool_main=lambda args: run(_main, args))


def split_configs(text: str | None) -> dict[str, str]:
    """Kafka's --add-config syntax: commas separate entries except inside [...]."""
    out: dict[str, str] = {}
    if not text:
        return out
    depth, cur, parts = 0, "", []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    for part in filter(None, parts):
        k, eq, v = part.partition("=")
        if not eq:
            raise SystemExit(f"Invalid entity config: all configs to be added must be in the format \"key=val\": {part}")
        v = v.strip()
        out[k.strip()] = v[1:-1] if v.startswith("[") and v.endswith("]") else v
    return out


def _entity(args) -> tuple[str, int, str]:
    if args.topic:
        return "topic", TOPIC_RESOURCE, args.topic
    if args.broker:
        return "broker", BROKER_RESOURCE, args.broker
    if args.broker_defaults:
        return "brokers", BROKER_RESOURCE, ""
    if not args.entity_type:
        raise SystemExit("--entity-type (or --topic/--broker) is required")
    rtype = ENTITY_TYPES[args.entity_type]
    if args.entity_default:
        return "brokers", rtype, ""
    if args.entity_name is None:
        raise SystemExit("--entity-name or --entity-default is required")
    return args.entity_type.rstrip("s"), rtype, args.entity_name


def _main(args) -> int:
    if client_configs.handles(args):
        with client(args) as c:
            return client_configs.main(c, args)
    kind, rtype, name = _entity(args)
    with client(args) as c:
        if args.describe:
            names = [name]
            if rtype == TOPIC_RESOURCE and not name:
                names = sorted(c.topics())
            for n in names:
                _describe(c, kind, rtype, n, args.all)
            return 0
        add = split_configs(args.add_config)
        if args.add_config_file:
            from kbroker.config import parse_properties
            with open(args.add_config_file, encoding="utf-8") as f:
                add.update(parse_properties(f.read()))
        delete = [k.strip() for k in (args.delete_config or "").split(",") if k.strip()]
        if not add and not delete:
            raise SystemExit("At least one of --add-config or --delete-config must be specified with --alter")
        c.alter_configs(rtype, name, add, delete)
        if name:
            print(f"Completed updating config for {kind} {name}.")
        else:
            print("Completed updating default config for brokers in the cluster.")
        return 0


def _describe(c, kind, rtype, name, all_) -> None:
    entries = c.describe_configs(rtype, name)
    if not name:
        print("Default configs for brokers in the cluster are:")
    else:
        print(f"{'All' if all_ else 'Dynamic'} configs for {kind} {name} are:")
    for e in sorted(entries, key=lambda e: e.name):
        if not all_ and e.config_source not in DYNAMIC:
            continue
        value = "null" if e.value is None else e.value
        syn = ", ".join(f"{SOURCES.get(s.source, s.source)}:{s.name}={s.value}" for s in e.synonyms or ())
        print(f"  {e.name}={value} sensitive={str(e.is_sensitive).lower()} synonyms={{{syn}}}")
