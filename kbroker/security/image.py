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

    def records(self) -> list:
        """Records that rebuild this state from nothing (metadata snapshots)."""
        from kbroker.security.scram import MECHANISMS
        from kbroker.wire.generated.access_control_entry_record import AccessControlEntryRecord
        from kbroker.wire.generated.client_quota_record import ClientQuotaRecord
        from kbroker.wire.generated.delegation_token_record import DelegationTokenRecord
        from kbroker.wire.generated.user_scram_credential_record import UserScramCredentialRecord
        out: list = []
        for (name, mech), c in sorted(self.scram.items()):
            out.append(UserScramCredentialRecord(name=name, mechanism=MECHANISMS[mech][0], salt=c.salt,
                                                 stored_key=c.stored_key, server_key=c.server_key, iterations=c.iterations))
        for acl_id, a in sorted(self.acls.by_id.items(), key=lambda kv: str(kv[0])):
            out.append(AccessControlEntryRecord(id=acl_id, resource_type=a.resource_type, resource_name=a.resource_name,
                                                pattern_type=a.pattern_type, principal=a.principal, host=a.host,
                                                operation=a.operation, permission_type=a.permission))
        for entity, values in sorted(self.quotas.items(), key=lambda kv: str(kv[0])):
            ents = [ClientQuotaRecord.EntityData(entity_type=t, entity_name=n) for t, n in entity]
            for k, v in sorted(values.items()):
                out.append(ClientQuotaRecord(entity=ents, key=k, value=v, remove=False))
        for tid, t in sorted(self.tokens.items()):
            out.append(DelegationTokenRecord(owner=t.owner, requester=t.requester, renewers=list(t.renewers),
                                             issue_timestamp=t.issue_ms, max_timestamp=t.max_ms,
                                             expiration_timestamp=t.expiry_ms, token_id=tid))
        return out
