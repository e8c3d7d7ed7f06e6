import base64

import pytest

from kbroker.security.sasl import SaslFailed, ScramMechanism
from kbroker.security.scram import ScramClient, ScramError, ScramServer, make_credential


def test_rfc7677_vector():
    """RFC 7677 section 3: user 'user', password 'pencil'."""
    cred = make_credential("SCRAM-SHA-256", "pencil", 4096, base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ=="))
    srv = ScramServer("SCRAM-SHA-256", lambda u: cred if u == "user" else None)
    srv._snonce = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
    first = srv.first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first == b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    final = srv.final(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                      b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_round_trip_and_wrong_password(mech):
    cred = make_credential(mech, "s3cret", 4096)
    lookup = {"alice": cred}.get
    cli = ScramClient(mech, "alice", "s3cret")
    srv = ScramServer(mech, lookup)
    assert cli.verify(srv.final(cli.final(srv.first(cli.first()))))
    bad = ScramClient(mech, "alice", "nope")
    srv = ScramServer(mech, lookup)
    with pytest.raises(ScramError):
        srv.final(bad.final(srv.first(bad.first())))


def test_unknown_user_fails_only_at_the_final_step():
    m = ScramMechanism("SCRAM-SHA-512", lambda u: None)
    cli = ScramClient("SCRAM-SHA-512", "ghost", "x")
    challenge = m.step(cli.first(), 0)          # a salt is offered as for a real user
    assert b"s=" in challenge and b"i=4096" in challenge
    with pytest.raises(SaslFailed):
        m.step(cli.final(challenge), 0)


def test_tampered_nonce_is_refused():
    cred = make_credential("SCRAM-SHA-256", "pw")
    srv = ScramServer("SCRAM-SHA-256", lambda u: cred)
    cli = ScramClient("SCRAM-SHA-256", "bob", "pw")
    sf = srv.first(cli.first())
    final = cli.final(sf).replace(b"r=", b"r=X", 1)
    with pytest.raises(ScramError):
        srv.final(final)


def test_add_scram_syntax_and_bootstrap_file(tmp_path):
    from kbroker.security import bootstrap
    from kbroker.security.scram import ScramClient
    r = bootstrap.parse_add_scram("SCRAM-SHA-512=[name=alice,password=alice-secret]")
    assert (r.name, r.mechanism, r.iterations) == ("alice", 2, 4096)
    r2 = bootstrap.parse_add_scram('SCRAM-SHA-256=[name="bob",iterations=8192,salt="c2FsdA==",password="p,w"]')
    assert (r2.name, r2.mechanism, r2.iterations, r2.salt) == ("bob", 1, 8192, b"salt")
    for bad in ("SCRAM-SHA-1=[name=a,password=b]", "SCRAM-SHA-512=[password=b]", "SCRAM-SHA-512=[name=a,iterations=10,password=b]"):
        with pytest.raises(ValueError):
            bootstrap.parse_add_scram(bad)
    bootstrap.write(str(tmp_path), [r, r2])
    assert (tmp_path / bootstrap.FILE).stat().st_mode & 0o777 == 0o600   # SCRAM keys: owner only
    back = bootstrap.read(str(tmp_path))
    assert back == [r, r2]
    # the stored credential authenticates the password it was made from
    cred = make_credential("SCRAM-SHA-256", "p,w", 8192, b"salt")
    assert (cred.stored_key, cred.server_key) == (bytes(r2.stored_key), bytes(r2.server_key))
    cli = ScramClient("SCRAM-SHA-256", "bob", "p,w")
    srv = ScramServer("SCRAM-SHA-256", lambda u: cred)
    assert cli.verify(srv.final(cli.final(srv.first(cli.first()))))
