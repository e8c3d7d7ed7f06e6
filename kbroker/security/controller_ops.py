"""Controller operations for security metadata: pure functions ``(controller, now_ms) ->
ControllerResult(records, response)`` that ``ControllerRuntime.submit`` runs, appends and
commits (SCRAM credentials, ACLs, client quotas). They read the controller's image only."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from kbroker.kraft.controller import ControllerResult
from kbroker.security import acls as A
from kbroker.security.scram import MAX_ITERATIONS, MECHANISM_BY_ID, MECHANISMS, MIN_ITERATIONS, credential_from_salted
from kbroker.wire.errors import Errors
from kbroker.wire.generated.access_control_entry_record import AccessControlEntryRecord
from kbroker.wire.generated.remove_access_control_entry_record import RemoveAccessControlEntryRecord
from kbroker.wire.generated.remove_user_scram_credential_record import RemoveUserScramCredentialRecord
from kbroker.wire.generated.user_scram_credential_record import UserScramCredentialRecord


@dataclass
class Outcome:
    error: int = 0
    message: str | None = None


# -- SCRAM ------------------------------------------------------------------------------------

def alter_scram(deletions, upsertions):
    """deletions: [(user, mechanism id)]; upsertions: [(user, mechanism id, iterations, salt,
    salted_password)]. Response: {user: Outcome} (Kafka: one result per user; any bad
    alteration of a user fails all of that user's)."""
    def op(c, now_ms):
        sec = c.image.security
        out: dict[str, Outcome] = {}
        per_user: dict[str, list] = {}
        seen: set[tuple[str, int]] = set()
        dup: set[str] = set()
        for kind, items in (("delete", deletions), ("upsert", upsertions)):
            for item in items:
                name, mech = item[0], item[1]
                if (name, mech) in seen:
                    dup.add(name)
                seen.add((name, mech))
                per_user.setdefault(name, []).append((kind, item))
        records = []
        for name, ops in per_user.items():
            if name in dup:
                out[name] = Outcome(Errors.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request")
                continue
            recs, bad = [], None
            for kind, item in ops:
                mech = MECHANISM_BY_ID.get(item[1])
                if not name:
                    bad = Outcome(Errors.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
                elif mech is None:
                    bad = Outcome(Errors.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
                elif kind == "delete":
                    if (name, mech) not in sec.scram:
                        bad = Outcome(Errors.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")
                    else:
                        recs.append(RemoveUserScramCredentialRecord(name=name, mechanism=item[1]))
                else:
                    _, _, iterations, salt, salted = item
                    if iterations < MIN_ITERATIONS:
                        bad = Outcome(Errors.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
                    elif iterations > MAX_ITERATIONS:
                        bad = Outcome(Errors.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
                    elif not salt or not salted:
                        bad = Outcome(Errors.UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty")
                    else:
                        cred = credential_from_salted(MECHANISMS[mech][1], bytes(salted), bytes(salt), iterations)
                        recs.append(UserScramCredentialRecord(name=name, mechanism=item[1], salt=cred.salt,
                                                              stored_key=cred.stored_key, server_key=cred.server_key,
                                                              iterations=iterations))
                if bad:
                    break
            out[name] = bad or Outcome()
            if not bad:
                records += recs
        return ControllerResult(records, out)
    return op


# -- ACLs -------------------------------------------------------------------------------------

def create_acls(bindings: list[A.Acl], new_id=uuid.uuid4):
    """Response: [Outcome] per binding. An existing identical ACL is not duplicated."""
    def op(c, now_ms):
        store = c.image.security.acls
        records, out, pending = [], [], set()
        for b in bindings:
            why = A.validate_acl(b)
            if why:
                out.append(Outcome(Errors.INVALID_REQUEST, why))
                continue
            if store.find(b) is None and b not in pending:
                pending.add(b)
                records.append(AccessControlEntryRecord(
                    id=new_id(), resource_type=b.resource_type, resource_name=b.resource_name,
                    pattern_type=b.pattern_type, principal=b.principal, host=b.host,
                    operation=b.operation, permission_type=b.permission))
            out.append(Outcome())
        return ControllerResult(records, out)
    return op


def delete_acls(filters: list[A.AclFilter]):
    """Response: per filter, (Outcome, [deleted Acl])."""
    def op(c, now_ms):
        store = c.image.security.acls
        records, out, gone = [], [], set()
        for f in filters:
            if f.is_unknown():
                out.append((Outcome(Errors.INVALID_REQUEST, "Invalid filter"), []))
                continue
            matched = []
            for acl_id, a in list(store.by_id.items()):
                if f.matches(a):
                    matched.append(a)
                    if acl_id not in gone:
                        gone.add(acl_id)
                        records.append(RemoveAccessControlEntryRecord(id=acl_id))
            out.append((Outcome(), matched))
        return ControllerResult(records, out)
    return op


# -- client quotas ----------------------------------------------------------------------------

QUOTA_KEYS = {"user": {"producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate"},
              "client-id": {"producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate"},
              "ip": {"connection_creation_rate"}}


def validate_quota(entity: list[tuple[str, str | None]], ops: list[tuple[str, float, bool]]) -> str | None:
    types = [t for t, _ in entity]
    if not entity or len(set(types)) != len(types):
        return "Invalid quota entity: empty or with a repeated entity type"
    if any(t not in QUOTA_KEYS for t in types):
        return f"Invalid quota entity type {[t for t in types if t not in QUOTA_KEYS][0]}"
    if "ip" in types and len(types) > 1:
        return "Invalid quota entity combination: ip quotas apply to ip alone"
    allowed = set.intersection(*(QUOTA_KEYS[t] for t in types))
    for key, value, remove in ops:
        if key not in allowed:
            return f"Invalid configuration key {key}"
        if not remove and (value <= 0 or (key.endswith("byte_rate") and value != int(value))):
            return f"Invalid value {value} for configuration {key}"
    return None


def alter_client_quotas(entries, validate_only: bool):
    """entries: [(entity [(type, name|None)], ops [(key, value, remove)])]; response: [Outcome]."""
    from kbroker.wire.generated.client_quota_record import ClientQuotaRecord

    def op(c, now_ms):
        records, out = [], []
        for entity, ops in entries:
            why = validate_quota(entity, ops)
            if why:
                out.append(Outcome(Errors.INVALID_REQUEST, why))
                continue
            out.append(Outcome())
            if validate_only:
                continue
            ents = [ClientQuotaRecord.EntityData(entity_type=t, entity_name=n) for t, n in entity]
            for key, value, remove in ops:
                records.append(ClientQuotaRecord(entity=ents, key=key, value=0.0 if remove else float(value), remove=remove))
        return ControllerResult(records, out)
    return op
