"""SaslHandshake (17): pick the SASL mechanism (kbroker.security.authenticator)."""

from kbroker.security.authenticator import handshake

API_KEY = 17
MIN_VERSION = 0
MAX_VERSION = 1


def handle(ctx, request):
    return handshake(ctx, request)
