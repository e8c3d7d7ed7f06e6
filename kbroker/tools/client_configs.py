"""``kbroker configs`` for users and clients (kafka-configs.sh's --entity-type users|clients,
--user/--client/--user-defaults/--client-defaults): client quotas through
DescribeClientQuotas / AlterClientQuotas, and SCRAM credentials (users only) through
DescribeUserScramCredentials / AlterUserScramCredentials, with Kafka's
``SCRAM-SHA-512=[iterations=8192,password=...]`` syntax."""

from __future__ import annotations

import os

from kbroker.security.scram import MECHANISM_BY_ID, MECHANISMS, salted_password
from kbroker.tools.client import _check, alter_client_quotas, describe_client_quotas

ENTITY_TYPES = ["clients", "users"]
_TYPE = {"users": "user", "clients": "client-id"}
EXACT, DEFAULT, ANY = 0, 1, 2


def add_arguments(p) -> None:
    p.add_argument("--user", help="shorthand for --entity-type users --entity-name USER")
    p.add_argument("--client", help="shorthand for --entity-type clients --entity-name CLIENT")
    p.add_argument("--user-defaults", action="store_true")
    p.add_argument("--client-defaults", action="store_true")


def handles(args) -> bool:
    return bool(args.entity_type in _TYPE or args.user or args.client or args.user_defaults or args.client_defaults)


def _entity(args) -> dict[str, tuple[int, str | None]]:
    """{entity type: (match type, name)} from the flags."""
    out: dict[str, tuple[int, str | None]] = {}
    if args.entity_type in _TYPE:
        if args.entity_default:
            out[_TYPE[args.entity_type]] = (DEFAULT, None)
        elif args.entity_name is not None:
            out[_TYPE[args.entity_type]] = (EXACT, args.entity_name)
        else:
            out[_TYPE[args.entity_type]] = (ANY, None)
    if args.user is not None:
        out["user"] = (EXACT, args.user)
    if args.user_defaults:
        out["user"] = (DEFAULT, None)
    if args.client is not None:
        out["client-id"] = (EXACT, args.client)
    if args.client_defaults:
        out["client-id"] = (DEFAULT, None)
    return out


def describe_text(entity: dict[str, str | None]) -> str:
    parts = []
    for t, label in (("user", "user-principal"), ("client-id", "client-id")):
        if t in entity:
            parts.append(f"the default {label}" if entity[t] is None else f"{label} '{entity[t]}'")
    return ", ".join(parts)


def _number(v: float) -> str:
    return repr(float(v))


def main(c, args) -> int:
    ent = _entity(args)
    if args.describe:
        comps = [(t, m, n) for t, (m, n) in ent.items()]
        for entity, values in describe_client_quotas(c, comps, strict=True):
            print(f"Quota configs for {describe_text(entity)} are "
                  + ", ".join(f"{k}={_number(v)}" for k, v in sorted(values.items())))
        user = ent.get("user")
        if user and user[0] == EXACT and "client-id" not in ent:
            _describe_scram(c, user[1])
        return 0
    if any(m == ANY for m, _ in ent.values()):
        raise SystemExit("--entity-name or --entity-default is required with --alter")
    from kbroker.tools.configs import split_configs
    add = split_configs(args.add_config)
    delete = [k.strip() for k in (args.delete_config or "").split(",") if k.strip()]
    if not add and not delete:
        raise SystemExit("At least one of --add-config or --delete-config must be specified with --alter")
    scram_add = {k: v for k, v in add.items() if k in MECHANISMS}
    scram_del = [k for k in delete if k in MECHANISMS]
    if (scram_add or scram_del) and (len(scram_add) + len(scram_del) < len(add) + len(delete)):
        raise SystemExit(f"Cannot alter both quota and SCRAM credential configs simultaneously for "
                         f"'{args.entity_type or 'users'}' using --bootstrap-server.")
    if scram_add or scram_del:
        user = ent.get("user")
        if user is None or user[0] != EXACT or "client-id" in ent:
            raise SystemExit("SCRAM credentials are only for a named user (--entity-type users --entity-name NAME)")
        _alter_scram(c, user[1], scram_add, scram_del)
    quotas = {k: float(v) for k, v in add.items() if k not in MECHANISMS}
    remove = [k for k in delete if k not in MECHANISMS]
    if quotas or remove:
        alter_client_quotas(c, {t: n for t, (_, n) in ent.items()}, quotas, remove)
    entity = {t: n for t, (_, n) in ent.items()}
    print(f"Completed updating config for {describe_text(entity)}.")
    return 0


def _describe_scram(c, user: str) -> None:
    from kbroker.wire.generated.describe_user_scram_credentials_request import DescribeUserScramCredentialsRequest as D
    resp = c.call(D(users=[D.UserName(name=user)]), 0)
    for r in resp.results or ():
        if r.error_code or not r.credential_infos:
            continue
        print(f"SCRAM credential configs for user-principal '{user}' are "
              + ", ".join(f"{MECHANISM_BY_ID.get(i.mechanism, i.mechanism)}=iterations={i.iterations}"
                          for i in r.credential_infos))


def _alter_scram(c, user: str, add: dict[str, str], delete: list[str]) -> None:
    from kbroker.wire.generated.alter_user_scram_credentials_request import AlterUserScramCredentialsRequest as U
    ups = []
    for mech, spec in add.items():
        opts = dict(p.split("=", 1) for p in spec.split(",") if "=" in p)
        if "password" not in opts:
            raise SystemExit(f"{mech}: a password is required ({mech}=[iterations=8192,password=...])")
        iterations = int(opts.get("iterations", 4096))
        salt = os.urandom(32)
        alg = MECHANISMS[mech][1]
        ups.append(U.ScramCredentialUpsertion(name=user, mechanism=MECHANISMS[mech][0], iterations=iterations, salt=salt,
                                              salted_password=salted_password(alg, opts["password"], salt, iterations)))
    dels = [U.ScramCredentialDeletion(name=user, mechanism=MECHANISMS[m][0]) for m in delete]
    for r in c.call(U(deletions=dels, upsertions=ups), 0).results:
        _check(r.error_code, f"AlterUserScramCredentials {r.user}", r.error_message)
