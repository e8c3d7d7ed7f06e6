import asyncio
import inspect

import pytest

from kbroker.clock import FakeClock
from kbroker.config import BrokerConfig
from kbroker.handlers.context import RequestContext
from kbroker.server import KafkaServer
from kbroker.wire.primitives import Writer


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
    loop = asyncio.new_event_loop()
    cfg = BrokerConfig.load(None, [f"log.dirs={tmp_path / 'data'}", "listeners=PLAINTEXT://127.0.0.1:9092"])
    server = KafkaServer(cfg, FakeClock())
    loop.run_until_complete(server.start(listen=False))
    yield Harness(server, loop)
    loop.run_until_complete(server.shutdown())
    loop.close()
