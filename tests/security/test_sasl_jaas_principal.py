import base64
import json

import pytest

from kbroker.security.jaas import parse_jaas, plain_users
from kbroker.security.principal import NoMatchingRule, parse_mapping_rules, rfc2253, ssl_principal_name
from kbroker.security.sasl import OAuthBearerMechanism, PlainMechanism, SaslFailed


def test_jaas_plain_users_and_quoting():
    mods = parse_jaas('org.apache.kafka.common.security.plain.PlainLoginModule required '
                      'username="admin" password="a\\"b" user_admin="a\\"b" user_alice=alice-pw;')
    assert mods[0].class_name.endswith("PlainLoginModule") and mods[0].flag == "required"
    assert plain_users(mods) == {"admin": 'a"b', "alice": "alice-pw"}
    with pytest.raises(ValueError):
        parse_jaas('org.x.Module required user_a="x"')   # no ';'


def test_plain_mechanism():
    m = PlainMechanism({"alice": "pw"})
    assert m.step(b"\0alice\0pw", 0) == b"" and m.done and m.principal == "User:alice"
    for token in (b"\0alice\0bad", b"\0bob\0pw", b"carol\0alice\0pw", b"garbage"):
        with pytest.raises(SaslFailed):
            PlainMechanism({"alice": "pw"}).step(token, 0)


def _jws(claims, alg="none"):
    enc = lambda d: base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()  # noqa: E731
    return f"{enc({'alg': alg})}.{enc(claims)}."


def test_oauthbearer_unsecured():
    now = 1_700_000_000_000
    tok = _jws({"sub": "carol", "exp": now / 1000 + 60, "iat": now / 1000})
    m = OAuthBearerMechanism({})
    assert m.step(f"n,,\x01auth=Bearer {tok}\x01\x01".encode(), now) == b""
    assert m.principal == "User:carol" and m.lifetime_ms == 60_000
    expired = _jws({"sub": "carol", "exp": now / 1000 - 1})
    m = OAuthBearerMechanism({})
    assert b"invalid_token" in m.step(f"n,,\x01auth=Bearer {expired}\x01\x01".encode(), now)
    with pytest.raises(SaslFailed):
        m.step(b"\x01", now)
    m = OAuthBearerMechanism({"unsecuredValidatorRequiredScope": "kafka"})
    assert not m.done and b"invalid_token" in m.step(f"n,,\x01auth=Bearer {tok}\x01\x01".encode(), now)


SUBJECT = ((("countryName", "US"),), (("organizationName", "Acme, Inc"),), (("organizationalUnitName", "ServiceUsers"),),
           (("commonName", "kafka1"),))


def test_rfc2253_order_and_escaping():
    assert rfc2253(SUBJECT) == "CN=kafka1,OU=ServiceUsers,O=Acme\\, Inc,C=US"


def test_kafka_mapping_rules():
    rules = parse_mapping_rules("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
                                "RULE:^CN=(.*?),OU=(.*?),O=(.*?)$/$1@$2/L, DEFAULT")
    assert ssl_principal_name(SUBJECT, rules) == "kafka1"
    other = ((("organizationName", "X"),), (("organizationalUnitName", "Ops"),), (("commonName", "Bob"),))
    assert ssl_principal_name(other, rules) == "bob@ops"
    plain = ((("commonName", "z"),),)
    assert ssl_principal_name(plain, rules) == "CN=z"
    with pytest.raises(NoMatchingRule):
        ssl_principal_name(plain, parse_mapping_rules("RULE:^CN=(x)$/$1/U"))
    assert ssl_principal_name(((("commonName", "x"),),), parse_mapping_rules("RULE:^CN=(x)$/$1/U")) == "X"
