"""Controller listener security: Kafka's validation of the controller listener set-up, the
SASL mechanism for controller connections, the client side a node builds for them, and the
controller's CLUSTER_ACTION rule for its senders."""
import ssl
import uuid
from types import SimpleNamespace

import pytest

from kbroker.config import BrokerConfig, ConfigError
from kbroker.kraft.image import MetadataImage
from kbroker.security import acls as A
from kbroker.security import controller_link as CL
from kbroker.security.manager import SecurityManager

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="ctl" '
        'password="ctl-secret" user_ctl="ctl-secret";')
SCRAM_JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="ctl" password="s2";'
VOTERS = "controller.quorum.voters=1@127.0.0.1:9093"


def load(*overrides):
    return BrokerConfig.load(None, list(overrides), embedded_defaults=False)


def combined(*extra):
    return load("node.id=1", "process.roles=broker,controller", VOTERS, "log.dirs=/tmp/x",
                "listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
                "controller.listener.names=CONTROLLER", *extra)


def broker_only(*extra):
    return load("node.id=2", "process.roles=broker", VOTERS, "log.dirs=/tmp/x",
                "listeners=PLAINTEXT://127.0.0.1:9094", *extra)


SASL_SSL_CTRL = ("listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_SSL",
                 "listener.name.controller.sasl.enabled.mechanisms=PLAIN",
                 f"listener.name.controller.plain.sasl.jaas.config={JAAS}")


def test_plaintext_controller_listener_needs_nothing_more():
    assert CL.controller_protocol(combined()) == "PLAINTEXT"
    assert CL.client_security(combined()) == (None, None)
    assert CL.controller_protocol(broker_only("controller.listener.names=CONTROLLER")) == "PLAINTEXT"


def test_broker_only_needs_controller_listener_names():
    with pytest.raises(ConfigError, match="must contain at least one value when running KRaft with just the broker role"):
        broker_only()


def test_broker_only_must_not_listen_on_the_controller_listener():
    with pytest.raises(ConfigError, match="must not contain a value appearing in the 'listeners'"):
        broker_only("controller.listener.names=CONTROLLER",
                    "listeners=PLAINTEXT://127.0.0.1:9094,CONTROLLER://127.0.0.1:9095")


def test_broker_only_controller_listener_must_be_mapped():
    # an explicit map without the controller listener: Kafka's error
    with pytest.raises(ConfigError, match="Controller listener with name CTRL defined in controller.listener.names "
                                          "not found in listener.security.protocol.map"):
        broker_only("controller.listener.names=CTRL", "listener.security.protocol.map=PLAINTEXT:PLAINTEXT")
    # the default map and nothing but PLAINTEXT in use: the controller listener is PLAINTEXT
    assert CL.controller_protocol(broker_only("controller.listener.names=CTRL")) == "PLAINTEXT"
    # the default map, SSL in use: no implicit mapping (Kafka)
    with pytest.raises(ConfigError, match="Controller listener with name CTRL"):
        broker_only("controller.listener.names=CTRL", "listeners=SSL://127.0.0.1:9094",
                    "ssl.keystore.location=/nonexistent")


def test_controller_listener_names_must_all_be_listeners_of_a_controller():
    with pytest.raises(ConfigError, match="must only contain values appearing in the 'listeners' configuration "
                                          "when running the KRaft controller role"):
        combined("controller.listener.names=CONTROLLER,OTHER")


def test_sasl_controller_listener_refuses_the_unset_gssapi_default():
    with pytest.raises(ConfigError, match="sasl.mechanism.controller.protocol is Kafka's default, GSSAPI"):
        combined(*SASL_SSL_CTRL)
    with pytest.raises(ConfigError, match="sasl.mechanism.controller.protocol is OAUTHBEARER"):
        combined(*SASL_SSL_CTRL, "sasl.mechanism.controller.protocol=OAUTHBEARER")


def test_sasl_controller_mechanism_must_be_enabled_on_the_controller_listener():
    with pytest.raises(ConfigError, match="sasl.mechanism.controller.protocol must be included in "
                                          "sasl.enabled.mechanisms when SASL is used for controller communication"):
        combined(*SASL_SSL_CTRL, "sasl.mechanism.controller.protocol=SCRAM-SHA-256",
                 f"listener.name.controller.scram-sha-256.sasl.jaas.config={SCRAM_JAAS}")
    # a broker-only node does not serve the listener: its enabled mechanisms are not its concern
    cfg = broker_only("controller.listener.names=CONTROLLER", *SASL_SSL_CTRL,
                      "sasl.mechanism.controller.protocol=SCRAM-SHA-256",
                      f"listener.name.controller.scram-sha-256.sasl.jaas.config={SCRAM_JAAS}")
    assert CL.controller_protocol(cfg) == "SASL_SSL"


def test_sasl_controller_client_needs_its_own_credentials():
    with pytest.raises(ConfigError, match="needs this node's own username and password for PLAIN"):
        combined("listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
                 "listener.name.controller.sasl.enabled.mechanisms=PLAIN", "sasl.mechanism.controller.protocol=PLAIN",
                 'listener.name.controller.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.'
                 'PlainLoginModule required user_ctl="x";')


def test_client_security_follows_the_controller_listener(tmp_path):
    from compat_tests.security_certs import make_certs
    certs = make_certs(tmp_path)
    cfg = broker_only("controller.listener.names=CONTROLLER", *SASL_SSL_CTRL,
                      "sasl.mechanism.controller.protocol=PLAIN", f"ssl.truststore.location={certs.ca}",
                      f"listener.name.controller.ssl.keystore.location={certs.server}")
    ctx, sasl = CL.client_security(cfg)
    assert isinstance(ctx, ssl.SSLContext) and ctx.verify_mode == ssl.CERT_REQUIRED
    assert (sasl.mechanism, sasl.username, sasl.password) == ("PLAIN", "ctl", "ctl-secret")
    # the inter-broker mechanism is another setting
    cfg2 = broker_only("controller.listener.names=CONTROLLER", *SASL_SSL_CTRL,
                       "sasl.mechanism.controller.protocol=SCRAM-SHA-512",
                       f"listener.name.controller.scram-sha-512.sasl.jaas.config={SCRAM_JAAS}")
    assert CL.client_security(cfg2)[1].mechanism == "SCRAM-SHA-512"
    assert CL.client_security(cfg2)[1].password == "s2"


def _ctx(listener, principal):
    conn = SimpleNamespace(state={"principal": principal}, peer="127.0.0.1:5000", listener_name=listener)
    return SimpleNamespace(conn=conn, listener_name=listener)


def test_controller_listener_senders_need_cluster_action():
    cfg = combined("authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                   "super.users=User:admin")
    image = MetadataImage()
    server = SimpleNamespace(security=SecurityManager(cfg, image), control=SimpleNamespace(implicit_listener=None))
    BROKER_REGISTRATION, VOTE, API_VERSIONS = 62, 52, 18
    assert CL.authorized(server, _ctx("CONTROLLER", "User:admin"), VOTE)
    assert not CL.authorized(server, _ctx("CONTROLLER", "User:broker"), BROKER_REGISTRATION)
    assert not CL.authorized(server, _ctx("CONTROLLER", "User:ANONYMOUS"), VOTE)
    assert CL.authorized(server, _ctx("CONTROLLER", "User:ANONYMOUS"), API_VERSIONS)
    # an ACL granting CLUSTER_ACTION, added to the image's current ACLs
    image.security.acls.add(uuid.uuid4(), A.Acl(A.R_CLUSTER, A.CLUSTER_NAME, A.P_LITERAL, "User:broker", "*",
                                                A.CLUSTER_ACTION, A.ALLOW))
    assert CL.authorized(server, _ctx("CONTROLLER", "User:broker"), BROKER_REGISTRATION)
    assert CL.authorized(server, _ctx("CONTROLLER", "User:broker"), VOTE)
    # DescribeQuorum needs DESCRIBE (CLUSTER_ACTION does not imply it); UnregisterBroker ALTER
    assert not CL.authorized(server, _ctx("CONTROLLER", "User:broker"), CL.DESCRIBE_QUORUM)
    assert not CL.authorized(server, _ctx("CONTROLLER", "User:broker"), CL.UNREGISTER_BROKER)
    # kbroker's own loopback controller listener (none configured) is not checked
    server.control.implicit_listener = "CONTROLLER_INTERNAL"
    assert CL.authorized(server, _ctx("CONTROLLER_INTERNAL", "User:ANONYMOUS"), BROKER_REGISTRATION)


def test_no_authorizer_allows_everyone():
    server = SimpleNamespace(security=SecurityManager(combined(), MetadataImage()),
                             control=SimpleNamespace(implicit_listener=None))
    assert CL.authorized(server, _ctx("CONTROLLER", "User:ANONYMOUS"), 62)
