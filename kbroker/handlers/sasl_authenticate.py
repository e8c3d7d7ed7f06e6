"""SaslAuthenticate (36): one SASL token each way (kbroker.security.authenticator)."""

from kbroker.security.authenticator import authenticate

API_KEY = 36
MIN_VERSION = 0
MAX_VERSION = 2


def handle(ctx, request):
    return authenticate(ctx, request)
