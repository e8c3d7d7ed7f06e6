"""``kbroker acls`` (kafka-acls.sh): --add / --remove / --list ACL bindings with Kafka's flags
(--allow-principal, --deny-principal, --allow-host, --deny-host, --operation, --topic, --group,
--cluster, --transactional-id, --delegation-token, --user-principal, --resource-pattern-type,
--producer, --consumer, --principal, --force) through CreateAcls / DescribeAcls / DeleteAcls."""

from __future__ import annotations

from kbroker.security import acls as A
from kbroker.tools.client import _check
from kbroker.tools.common import add_bootstrap, client, run

OPERATIONS = {name.replace("_", "").lower(): op for op, name in A.OP_NAMES.items()}
PATTERNS = {"literal": A.P_LITERAL, "prefixed": A.P_PREFIXED, "match": A.P_MATCH, "any": A.P_ANY}
PATTERN_NAMES = {A.P_LITERAL: "LITERAL", A.P_PREFIXED: "PREFIXED", A.P_MATCH: "MATCH", A.P_ANY: "ANY"}
PERMISSIONS = {A.ALLOW: "ALLOW", A.DENY: "DENY"}


def add_parser(sub) -> None:
    p = sub.add_parser("acls", help="add, remove and list ACLs (like kafka-acls.sh)")
    add_bootstrap(p)
    act = p.add_mutually_exclusive_group(required=True)
    act.add_argument("--add", action="store_true")
    act.add_argument("--remove", action="store_true")
    act.add_argument("--list", action="store_true")
    for flag in ("--topic", "--group", "--transactional-id", "--delegation-token", "--user-principal"):
        p.add_argument(flag, action="append", default=[])
    p.add_argument("--cluster", action="store_true")
    p.add_argument("--resource-pattern-type", default=None, choices=sorted(PATTERNS), type=str.lower)
    p.add_argument("--allow-principal", action="append", default=[])
    p.add_argument("--deny-principal", action="append", default=[])
    p.add_argument("--allow-host", action="append", default=[])
    p.add_argument("--deny-host", action="append", default=[])
    p.add_argument("--operation", action="append", default=[])
    p.add_argument("--principal", action="append", default=[], help="with --list: only these principals' ACLs")
    p.add_argument("--producer", action="store_true", help="WRITE, DESCRIBE, CREATE on the topics")
    p.add_argument("--consumer", action="store_true", help="READ, DESCRIBE on the topics, READ on the groups")
    p.add_argument("--idempotent", action="store_true")
    p.add_argument("--force", action="store_true", help="no confirmation (kbroker never asks)")
    p.set_defaults(tool_main=lambda args: run(_main, args))


def _resources(args) -> list[tuple[int, str]]:
    out = [(A.R_TOPIC, t) for t in args.topic] + [(A.R_GROUP, g) for g in args.group]
    out += [(A.R_TRANSACTIONAL_ID, t) for t in args.transactional_id]
    out += [(A.R_DELEGATION_TOKEN, t) for t in args.delegation_token] + [(A.R_USER, u) for u in args.user_principal]
    if args.cluster:
        out.append((A.R_CLUSTER, A.CLUSTER_NAME))
    return out


def _operation(name: str) -> int:
    op = OPERATIONS.get(name.replace("_", "").replace("-", "").lower())
    if op is None:
        raise SystemExit(f"Invalid operation {name}: one of {', '.join(sorted(A.OP_NAMES.values()))}")
    return op


def _ops_for(args, rtype: int) -> list[int]:
    """The operations to add/remove on a resource of ``rtype`` (--producer/--consumer expand)."""
    ops = [_operation(o) for o in args.operation]
    if args.producer:
        ops += {A.R_TOPIC: [A.WRITE, A.DESCRIBE, A.CREATE], A.R_TRANSACTIONAL_ID: [A.WRITE, A.DESCRIBE],
                A.R_CLUSTER: [A.IDEMPOTENT_WRITE] if args.idempotent else []}.get(rtype, [])
    if args.consumer:
        ops += {A.R_TOPIC: [A.READ, A.DESCRIBE], A.R_GROUP: [A.READ]}.get(rtype, [])
    return list(dict.fromkeys(ops))


def _entries(args) -> list[tuple[str, str, int]]:
    """(principal, host, permission) for every --allow/--deny principal and host."""
    out = []
    for principals, hosts, perm in ((args.allow_principal, args.allow_host, A.ALLOW),
                                    (args.deny_principal, args.deny_host, A.DENY)):
        for pr in principals:
            for h in hosts or ["*"]:
                out.append((pr, h, perm))
    return out


def binding_text(rtype: int, name: str, pattern: int) -> str:
    return (f"ResourcePattern(resourceType={A.RESOURCE_NAMES.get(rtype, rtype)}, name={name}, "
            f"patternType={PATTERN_NAMES.get(pattern, pattern)})")


def acl_text(principal: str, host: str, op: int, perm: int) -> str:
    return (f"(principal={principal}, host={host}, operation={A.OP_NAMES.get(op, op)}, "
            f"permissionType={PERMISSIONS.get(perm, perm)})")


def _main(args) -> int:
    resources = _resources(args)
    if args.producer and args.idempotent and not any(r == A.R_CLUSTER for r, _ in resources):
        resources.append((A.R_CLUSTER, A.CLUSTER_NAME))
    if args.consumer and not args.group and (args.add or args.remove):
        raise SystemExit("--consumer needs --group")
    with client(args) as c:
        if args.list:
            return _list(c, args, resources)
        if not resources:
            raise SystemExit("You must specify one of: --topic, --cluster, --group, --transactional-id, "
                             "--delegation-token, --user-principal")
        entries = _entries(args)
        if args.add and not entries:
            raise SystemExit("You must specify one of: --allow-principal, --deny-principal when trying to add ACLs.")
        pattern = PATTERNS[args.resource_pattern_type or "literal"]
        if args.add:
            from kbroker.wire.generated.create_acls_request import CreateAclsRequest as C
            creations = [C.AclCreation(resource_type=rt, resource_name=name, resource_pattern_type=pattern,
                                       principal=pr, host=h, operation=op, permission_type=perm)
                         for rt, name in resources for op in _ops_for(args, rt) for pr, h, perm in entries]
            if not creations:
                raise SystemExit("No operation given (--operation, --producer or --consumer)")
            for rt, name in resources:
                print(f"Adding ACLs for resource `{binding_text(rt, name, pattern)}`: ")
                for pr, h, perm in entries:
                    for op in _ops_for(args, rt):
                        print(" \t" + acl_text(pr, h, op, perm))
                print()
            for r in c.call(C(creations=creations), 3).results:
                _check(r.error_code, "CreateAcls", r.error_message)
        else:
            from kbroker.wire.generated.delete_acls_request import DeleteAclsRequest as D
            pattern = PATTERNS[args.resource_pattern_type or "literal"]
            filters = []
            for rt, name in resources:
                ops = _ops_for(args, rt) or [A.OP_ANY]
                who = entries or [(None, None, A.PERM_ANY)]
                filters += [D.DeleteAclsFilter(resource_type_filter=rt, resource_name_filter=name,
                                               pattern_type_filter=pattern, principal_filter=pr, host_filter=h,
                                               operation=op, permission_type=perm)
                            for op in ops for pr, h, perm in who]
            resp = c.call(D(filters=filters), 3)
            for fr in resp.filter_results:
                _check(fr.error_code, "DeleteAcls", fr.error_message)
                for m in fr.matching_acls:
                    print(f"Removed ACL {acl_text(m.principal, m.host, m.operation, m.permission_type)} from "
                          f"`{binding_text(m.resource_type, m.resource_name, m.pattern_type)}`")
        return 0


def _list(c, args, resources) -> int:
    from kbroker.wire.generated.describe_acls_request import DescribeAclsRequest as Q
    pattern = PATTERNS[args.resource_pattern_type or "any"]
    filters = [(rt, name) for rt, name in resources] or [(A.R_ANY, None)]
    principals = args.principal or [None]
    for rt, name in filters:
        for pr in principals:
            resp = c.call(Q(resource_type_filter=rt, resource_name_filter=name, pattern_type_filter=pattern,
                            principal_filter=pr, host_filter=None, operation=A.OP_ANY,
                            permission_type=A.PERM_ANY), 3)
            _check(resp.error_code, "DescribeAcls", resp.error_message)
            for res in resp.resources:
                who = f" for principal `{pr}`" if pr else ""
                print(f"Current ACLs{who} for resource `{binding_text(res.resource_type, res.resource_name, res.pattern_type)}`: ")
                for a in res.acls:
                    print(" \t" + acl_text(a.principal, a.host, a.operation, a.permission_type))
                print()
    return 0
