"""ACL model and Kafka's StandardAuthorizer rules.

Codes are Kafka's (``ResourceType``, ``PatternType``, ``AclOperation``, ``AclPermissionType``).
``authorize(acls, principal, host, op, resource_type, name)``:

1. a super user is allowed everything;
2. the ACLs that apply to the resource: LITERAL with the same name or ``*``, PREFIXED whose
   name is a prefix of it; among them the ones for this principal (or ``User:*``) and host
   (or ``*``);
3. any matching DENY for the operation (or ALL) denies; else any matching ALLOW for it, ALL,
   or an operation that implies it (READ, WRITE, DELETE, ALTER imply DESCRIBE; ALTER_CONFIGS
   implies DESCRIBE_CONFIGS) allows;
4. if no ACL at all applies to the resource, ``allow.everyone.if.no.acl.found`` decides;
   otherwise it is denied.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

# ResourceType
R_ANY, R_TOPIC, R_GROUP, R_CLUSTER, R_TRANSACTIONAL_ID, R_DELEGATION_TOKEN, R_USER = 1, 2, 3, 4, 5, 6, 7
RESOURCE_NAMES = {2: "TOPIC", 3: "GROUP", 4: "CLUSTER", 5: "TRANSACTIONAL_ID", 6: "DELEGATION_TOKEN", 7: "USER"}
CLUSTER_NAME = "kafka-cluster"
# PatternType
P_ANY, P_MATCH, P_LITERAL, P_PREFIXED = 1, 2, 3, 4
# AclOperation
(OP_ANY, OP_ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS,
 ALTER_CONFIGS, IDEMPOTENT_WRITE, CREATE_TOKENS, DESCRIBE_TOKENS) = range(1, 15)
OP_NAMES = {2: "ALL", 3: "READ", 4: "WRITE", 5: "CREATE", 6: "DELETE", 7: "ALTER", 8: "DESCRIBE",
            9: "CLUSTER_ACTION", 10: "DESCRIBE_CONFIGS", 11: "ALTER_CONFIGS", 12: "IDEMPOTENT_WRITE",
            13: "CREATE_TOKENS", 14: "DESCRIBE_TOKENS"}
# AclPermissionType
PERM_ANY, DENY, ALLOW = 1, 2, 3
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"

_IMPLIED_BY = {DESCRIBE: (READ, WRITE, DELETE, ALTER), DESCRIBE_CONFIGS: (ALTER_CONFIGS,)}


@dataclass(frozen=True)
class Acl:
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int


@dataclass(frozen=True)
class AclFilter:
    """DescribeAcls/DeleteAcls filters: ANY (1) codes and None strings match everything;
    pattern MATCH finds every ACL that would apply to the named resource."""
    resource_type: int = R_ANY
    resource_name: str | None = None
    pattern_type: int = P_ANY
    principal: str | None = None
    host: str | None = None
    operation: int = OP_ANY
    permission: int = PERM_ANY

    def matches(self, a: Acl) -> bool:
        if self.resource_type != R_ANY and self.resource_type != a.resource_type:
            return False
        if self.pattern_type == P_MATCH:
            if self.resource_name is not None and not _applies(a, self.resource_name):
                return False
            if a.pattern_type not in (P_LITERAL, P_PREFIXED):
                return False
        else:
            if self.pattern_type != P_ANY and self.pattern_type != a.pattern_type:
                return False
            if self.resource_name is not None and self.resource_name != a.resource_name:
                return False
        if self.principal is not None and self.principal != a.principal:
            return False
        if self.host is not None and self.host != a.host:
            return False
        if self.operation != OP_ANY and self.operation != a.operation:
            return False
        return self.permission == PERM_ANY or self.permission == a.permission

    def is_unknown(self) -> bool:
        return 0 in (self.resource_type, self.pattern_type, self.operation, self.permission)


def _applies(a: Acl, name: str) -> bool:
    if a.pattern_type == P_LITERAL:
        return a.resource_name == name or a.resource_name == WILDCARD
    if a.pattern_type == P_PREFIXED:
        return name.startswith(a.resource_name)
    return False


def validate_acl(a: Acl) -> str | None:
    """Why CreateAcls refuses this binding (None: acceptable)."""
    if a.resource_type not in RESOURCE_NAMES:
        return "Invalid resource type"
    if a.pattern_type not in (P_LITERAL, P_PREFIXED):
        return "Invalid pattern type, only LITERAL and PREFIXED are allowed"
    if a.operation not in OP_NAMES:
        return "Invalid operation"
    if a.permission not in (DENY, ALLOW):
        return "Invalid permission type"
    if not a.resource_name:
        return "Resource name must not be empty"
    if a.resource_type == R_CLUSTER and a.resource_name != CLUSTER_NAME:
        return "The only valid name for the CLUSTER resource is kafka-cluster"
    if ":" not in a.principal:
        return f"Could not parse principal from `{a.principal}` (no colon is present separating the principal type from the principal name)"
    if not a.host:
        return "Host must not be empty"
    return None


class AclStore:
    """The ACLs of the metadata image, by id (AccessControlEntryRecord ids)."""

    def __init__(self) -> None:
        self.by_id: dict[uuid.UUID, Acl] = {}
        self._by_type: dict[int, dict[uuid.UUID, Acl]] = {}

    def add(self, acl_id: uuid.UUID, a: Acl) -> None:
        self.remove(acl_id)
        self.by_id[acl_id] = a
        self._by_type.setdefault(a.resource_type, {})[acl_id] = a

    def remove(self, acl_id: uuid.UUID) -> Acl | None:
        a = self.by_id.pop(acl_id, None)
        if a is not None:
            self._by_type[a.resource_type].pop(acl_id, None)
        return a

    def find(self, acl: Acl) -> uuid.UUID | None:
        for i, a in self._by_type.get(acl.resource_type, {}).items():
            if a == acl:
                return i
        return None

    def for_resource(self, resource_type: int, name: str):
        for a in self._by_type.get(resource_type, {}).values():
            if _applies(a, name):
                yield a

    def any_for_type(self, resource_type: int) -> bool:
        return bool(self._by_type.get(resource_type))


class Authorizer:
    def __init__(self, acls: AclStore, super_users: set[str], allow_if_no_acl: bool) -> None:
        self.acls = acls
        self.super_users = super_users
        self.allow_if_no_acl = allow_if_no_acl

    def authorize(self, principal: str, host: str, op: int, resource_type: int, name: str) -> bool:
        if principal in self.super_users:
            return True
        found = False
        allowed = False
        implied = _IMPLIED_BY.get(op, ())
        for a in self.acls.for_resource(resource_type, name):
            found = True
            if a.principal != principal and a.principal != WILDCARD_PRINCIPAL:
                continue
            if a.host != WILDCARD and a.host != host:
                continue
            if a.permission == DENY:
                if a.operation == op or a.operation == OP_ALL:
                    return False
            elif a.operation == op or a.operation == OP_ALL or a.operation in implied:
                allowed = True
        if not found:
            return self.allow_if_no_acl
        return allowed

    def authorize_any(self, principal: str, host: str, op: int, resource_type: int) -> bool:
        """Is ``op`` allowed on at least one resource of this type (Kafka's
        authorizeByResourceType, used by InitProducerId for idempotent producers)?"""
        if principal in self.super_users:
            return True
        denied_prefix, denied_literal = [], set()
        for a in self.acls._by_type.get(resource_type, {}).values():
            if (a.permission == DENY and (a.operation in (op, OP_ALL))
                    and a.principal in (principal, WILDCARD_PRINCIPAL) and a.host in (WILDCARD, host)):
                if a.pattern_type == P_LITERAL and a.resource_name == WILDCARD:
                    return False
                if a.pattern_type == P_PREFIXED:
                    denied_prefix.append(a.resource_name)
                else:
                    denied_literal.add(a.resource_name)
        for a in self.acls._by_type.get(resource_type, {}).values():
            if (a.permission == ALLOW and a.operation in (op, OP_ALL)
                    and a.principal in (principal, WILDCARD_PRINCIPAL) and a.host in (WILDCARD, host)):
                if a.pattern_type == P_LITERAL and a.resource_name in denied_literal:
                    continue
                if any(a.resource_name.startswith(p) for p in denied_prefix):
                    continue
                return True
        return False
