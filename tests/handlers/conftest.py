import inspect

import pytest

from kbroker.handlers.context import RequestContext
from kbroker.wire.primitives import Writer
from tests.offline_server import start_offline, stop_offline


class Harness:
    def __init__(self, server, loop):
        self.server = server
        self.loop = loop

    def call(self, api_key, version, request):
        spec = self.server.api_specs[api_key]
        ctx = RequestContext(self.server, None, api_key, version, 1, "test", self.server.clock.now_ms(), "PLAINTEXT")
        out = spec.handle(ctx, request)
        if inspect.isawaitable(out):
            out = self.loop.run_until_complete(out)
        if out is not None:
            # every response must encode at the request's version
            out.encode_into(Writer(), version)
        return out


@pytest.fixture
def broker(tmp_path):
    server = start_offline(tmp_path / "data")
    yield Harness(server, server.loop)
    stop_offline(server)
