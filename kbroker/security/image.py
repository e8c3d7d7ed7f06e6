"""The security part of the metadata image: SCRAM credentials, ACLs, client quotas,
delegation tokens, replayed from their metadata records (``MetadataImage`` hands it every
record type it does not handle itself)."""

from __future__ import annotations

from dataclasses import dataclass, field

from kbroker.security.acls import Acl, AclStore
from kbroker.security.scram import MECHANISM_BY_ID, ScramCredential


@dataclass
class DelegationToken:
    token_id: str
    owner: str
    requester: str
    renewers: list[str]
    issue_ms: int
    max_ms: int
    expiry_ms: int
    hmac: bytes = b""


@dataclass
class SecurityImage:
    scram: dict[tuple[str, str], ScramCredential] = field(default_factory=dict)   # (user, mechanism)
    acls: AclStore = field(default_factory=AclStore)
    # quota entity: tuple of (entity type, name or None for the default), sorted -> {key: value}
    quotas: dict[tuple, dict[str, float]] = field(default_factory=dict)
    tokens: dict[str, DelegationToken] = field(default_factory=dict)

    HANDLES = frozenset({"UserScramCredentialRecord", "RemoveUserScramCredentialRecord",
                         "AccessControlEntryRecord", "RemoveAccessControlEntryRecord",
                         "ClientQuotaRecord", "DelegationTokenRecord", "RemoveDelegationTokenRecord"})

    def apply(self, r) -> None:
        name = type(r).__name__
        if name == "UserScramCredentialRecord":
            mech = MECHANISM_BY_ID.get(r.mechanism)
            if mech:
                self.scram[(r.name, mech)] = ScramCredential(bytes(r.salt), bytes(r.stored_key),
                                                             bytes(r.server_key), r.iterations)
        elif name == "RemoveUserScramCredentialRecord":
            self.scram.pop((r.name, MECHANISM_BY_ID.get(r.mechanism, "")), None)
        elif name == "AccessControlEntryRecord":
            self.acls.add(r.id, Acl(r.resource_type, r.resource_name, r.pattern_type, r.principal,
                                    r.host, r.operation, r.permission_type))
        elif name == "RemoveAccessControlEntryRecord":
            self.acls.remove(r.id)
        elif name == "ClientQuotaRecord":
            key = tuple(sorted((e.entity_type, e.entity_name) for e in r.entity))
            if r.remove:
                q = self.quotas.get(key)
                if q is not None:
                    q.pop(r.key, None)
                    if not q:
                        del self.quotas[key]
            else:
                self.quotas.setdefault(key, {})[r.key] = r.value
        elif name == "DelegationTokenRecord":
            old = self.tokens.get(r.token_id)
            self.tokens[r.token_id] = DelegationToken(
                r.token_id, r.owner, r.requester, list(r.renewers), r.issue_timestamp,
                r.max_timestamp, r.expiration_timestamp, old.hmac if old else b"")
        elif name == "RemoveDelegationTokenRecord":
            self.tokens.pop(r.token_id, None)

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.scram.get((user, mechanism))
