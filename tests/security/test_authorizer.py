"""StandardAuthorizer semantics (Kafka's AuthorizerTest/StandardAuthorizerTest cases)."""
import uuid

from kbroker.security import acls as A

ALICE, BOB = "User:alice", "User:bob"


def _auth(*acls, supers=(), allow=False):
    store = A.AclStore()
    for a in acls:
        store.add(uuid.uuid4(), a)
    return A.Authorizer(store, set(supers), allow)


def acl(rtype, name, op, perm=A.ALLOW, principal=ALICE, pattern=A.P_LITERAL, host="*"):
    return A.Acl(rtype, name, pattern, principal, host, op, perm)


def test_no_acl_found_rule_and_super_users():
    assert not _auth().authorize(ALICE, "1.2.3.4", A.READ, A.R_TOPIC, "t")
    assert _auth(allow=True).authorize(ALICE, "1.2.3.4", A.READ, A.R_TOPIC, "t")
    assert _auth(supers=[ALICE]).authorize(ALICE, "h", A.ALTER, A.R_CLUSTER, A.CLUSTER_NAME)
    # some ACL on the resource (for another principal): allow.everyone does not apply
    assert not _auth(acl(A.R_TOPIC, "t", A.READ, principal=BOB), allow=True).authorize(ALICE, "h", A.READ, A.R_TOPIC, "t")


def test_literal_prefixed_wildcard():
    a = _auth(acl(A.R_TOPIC, "orders", A.READ), acl(A.R_TOPIC, "logs-", A.WRITE, pattern=A.P_PREFIXED),
              acl(A.R_GROUP, "*", A.READ))
    assert a.authorize(ALICE, "h", A.READ, A.R_TOPIC, "orders")
    assert not a.authorize(ALICE, "h", A.READ, A.R_TOPIC, "orders2")
    assert a.authorize(ALICE, "h", A.WRITE, A.R_TOPIC, "logs-app")
    assert not a.authorize(ALICE, "h", A.WRITE, A.R_TOPIC, "log")
    assert a.authorize(ALICE, "h", A.READ, A.R_GROUP, "any-group")
    assert not a.authorize(BOB, "h", A.READ, A.R_GROUP, "any-group")


def test_deny_wins_and_all():
    a = _auth(acl(A.R_TOPIC, "*", A.OP_ALL), acl(A.R_TOPIC, "secret", A.READ, A.DENY))
    assert a.authorize(ALICE, "h", A.READ, A.R_TOPIC, "public")
    assert not a.authorize(ALICE, "h", A.READ, A.R_TOPIC, "secret")
    assert a.authorize(ALICE, "h", A.WRITE, A.R_TOPIC, "secret")
    # a DENY on READ does not deny DESCRIBE (implication is for ALLOW only)
    assert a.authorize(ALICE, "h", A.DESCRIBE, A.R_TOPIC, "secret")
    everyone_denied = _auth(acl(A.R_TOPIC, "t", A.READ), acl(A.R_TOPIC, "t", A.OP_ALL, A.DENY, principal="User:*"))
    assert not everyone_denied.authorize(ALICE, "h", A.READ, A.R_TOPIC, "t")


def test_implied_operations():
    for op in (A.READ, A.WRITE, A.DELETE, A.ALTER):
        assert _auth(acl(A.R_TOPIC, "t", op)).authorize(ALICE, "h", A.DESCRIBE, A.R_TOPIC, "t")
    assert not _auth(acl(A.R_TOPIC, "t", A.CREATE)).authorize(ALICE, "h", A.DESCRIBE, A.R_TOPIC, "t")
    assert _auth(acl(A.R_TOPIC, "t", A.ALTER_CONFIGS)).authorize(ALICE, "h", A.DESCRIBE_CONFIGS, A.R_TOPIC, "t")
    assert not _auth(acl(A.R_TOPIC, "t", A.DESCRIBE)).authorize(ALICE, "h", A.READ, A.R_TOPIC, "t")


def test_hosts():
    a = _auth(acl(A.R_TOPIC, "t", A.READ, host="10.0.0.1"))
    assert a.authorize(ALICE, "10.0.0.1", A.READ, A.R_TOPIC, "t")
    assert not a.authorize(ALICE, "10.0.0.2", A.READ, A.R_TOPIC, "t")


def test_authorize_any_for_idempotent_producers():
    assert _auth(acl(A.R_TOPIC, "x-", A.WRITE, pattern=A.P_PREFIXED)).authorize_any(ALICE, "h", A.WRITE, A.R_TOPIC)
    assert not _auth(acl(A.R_TOPIC, "x", A.READ)).authorize_any(ALICE, "h", A.WRITE, A.R_TOPIC)
    assert not _auth(acl(A.R_TOPIC, "x", A.WRITE), acl(A.R_TOPIC, "*", A.WRITE, A.DENY)).authorize_any(
        ALICE, "h", A.WRITE, A.R_TOPIC)


def test_filters():
    prefixed = acl(A.R_TOPIC, "logs-", A.WRITE, pattern=A.P_PREFIXED)
    literal = acl(A.R_TOPIC, "logs-app", A.READ)
    match = A.AclFilter(A.R_TOPIC, "logs-app", A.P_MATCH)
    assert match.matches(prefixed) and match.matches(literal)
    assert not A.AclFilter(A.R_TOPIC, "logs-app", A.P_LITERAL).matches(prefixed)
    assert A.AclFilter(principal=ALICE, operation=A.READ).matches(literal)
    assert not A.AclFilter(principal=BOB).matches(literal)
    assert A.validate_acl(acl(A.R_CLUSTER, "other", A.ALTER))
    assert A.validate_acl(acl(A.R_TOPIC, "t", A.READ, principal="alice"))
    assert A.validate_acl(acl(A.R_TOPIC, "t", A.READ)) is None


def test_security_state_survives_a_metadata_snapshot():
    from kbroker.kraft.image import MetadataImage
    from kbroker.kraft.image_snapshot import encode_image, load_image
    from kbroker.security.controller_ops import alter_scram, create_acls
    from kbroker.security.scram import salted_password

    class C:
        image = MetadataImage()
    for op in (alter_scram([], [("alice", 2, 4096, b"salt", salted_password("sha512", "pw", b"salt", 4096))]),
               create_acls([acl(A.R_TOPIC, "t", A.READ)])):
        for r in op(C, 0).records:
            C.image.apply(r)
    back = load_image(encode_image(C.image))
    assert back.security.scram == C.image.security.scram and back.security.scram
    assert back.security.acls.by_id == C.image.security.acls.by_id and back.security.acls.by_id
