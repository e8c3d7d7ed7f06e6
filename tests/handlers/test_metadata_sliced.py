"""An all-topics Metadata response for a large cluster is built in slices: the loop serves
others meanwhile, and the bytes are those of the one-go encoding at every version."""

import asyncio
import functools

from kbroker.handlers import metadata
from kbroker.handlers.context import RequestContext
from kbroker.slices import run_in_slices, run_to_end
from kbroker.wire.generated.metadata_request import MetadataRequest
from kbroker.wire.primitives import Writer

from test_handlers import create
from tests.loop_ticks import with_ticker


def _encode(resp, version):
    w = Writer()
    resp.encode_into(w, version)
    return bytes(w)


def test_stitched_encoding_matches_every_version(broker):
    for i in range(3):
        assert create(broker, f"m{i}", 2 + i).topics[0].error_code == 0
    server = broker.server
    image = server.image
    for v in range(0, 13):
        for include_ops, cluster_ops in ((False, False), (v >= 8, 8 <= v <= 10)):
            sliced = run_to_end(metadata._build_steps(server, image, "PLAINTEXT", v, cluster_ops, include_ops))
            whole = metadata._response(metadata.MetadataResponse, server, image, "PLAINTEXT", v, cluster_ops,
                                       [metadata.topic_response(t, v, include_ops)
                                        for t in image.topics_by_name.values()])
            assert _encode(sliced, v) == _encode(whole, v), v


def test_large_all_topics_metadata_yields_to_other_work(broker, monkeypatch):
    for i in range(6):
        assert create(broker, f"big{i}", 4).topics[0].error_code == 0
    monkeypatch.setattr(metadata, "SLICED_BUILD_PARTITIONS", 10)
    monkeypatch.setattr(metadata, "run_in_slices", functools.partial(run_in_slices, slice_s=0))
    server = broker.server
    spec = server.api_specs[3]

    def ctx():
        return RequestContext(server, None, 3, 12, 1, "test", server.clock.now_ms(), "PLAINTEXT")

    async def main():
        out = spec.handle(ctx(), MetadataRequest(topics=None))
        second = spec.handle(ctx(), MetadataRequest(topics=None))   # shares the build
        assert asyncio.iscoroutine(out)
        (resp, resp2), ticks = await with_ticker(asyncio.gather(out, second))
        return ticks, resp, resp2

    ticks, resp, resp2 = broker.loop.run_until_complete(main())
    assert ticks >= 6            # the loop ran other work between the topics
    assert resp is resp2
    assert sum(len(t.partitions) for t in resp.topics if t.name.startswith("big")) == 24
    # now cached: answered at once
    assert spec.handle(ctx(), MetadataRequest(topics=None)) is resp


def test_a_large_topic_is_built_and_encoded_a_few_partitions_a_step(broker, monkeypatch):
    """One topic of 1,000 partitions was one step to build and one to encode (~3 ms of loop):
    now each step covers at most STEP_PARTITIONS partitions, and the bytes do not change."""
    assert create(broker, "wide", 10).topics[0].error_code == 0
    monkeypatch.setattr(metadata, "STEP_PARTITIONS", 3)
    server = broker.server
    image = server.image
    for v in range(0, 13):
        for include_ops, cluster_ops in ((False, False), (v >= 8, 8 <= v <= 10)):
            steps = metadata._build_steps(server, image, "PLAINTEXT", v, cluster_ops, include_ops)
            n = 0
            try:
                while True:
                    next(steps)
                    n += 1
            except StopIteration as done:
                sliced = done.value
            whole = metadata._response(metadata.MetadataResponse, server, image, "PLAINTEXT", v, cluster_ops,
                                       [metadata.topic_response(t, v, include_ops)
                                        for t in image.topics_by_name.values()])
            assert _encode(sliced, v) == _encode(whole, v), v
            assert n >= 2 * 4, (v, n)      # 10 partitions, 3 a step: 4 to build, 4 to encode


def test_named_topics_of_many_partitions_are_built_in_slices(broker, monkeypatch):
    """A consumer asks for its own topics (ten of 1,000 partitions held the loop 13 ms in one
    go): above SLICED_BUILD_PARTITIONS the named topics are built and encoded in slices too,
    in the requested order, with the errors of unknown or invalid names in place."""
    from kbroker.wire.generated.metadata_request import MetadataRequest as Req
    for i in range(3):
        assert create(broker, f"named{i}", 5).topics[0].error_code == 0
    monkeypatch.setattr(metadata, "SLICED_BUILD_PARTITIONS", 6)
    monkeypatch.setattr(metadata, "STEP_PARTITIONS", 2)
    monkeypatch.setattr(metadata, "run_in_slices", functools.partial(run_in_slices, slice_s=0))
    server = broker.server
    spec = server.api_specs[3]
    names = ["named2", "no-such-topic", "named0", "bad/name", "named2", "named1"]

    def request(v):
        return Req(topics=[Req.MetadataRequestTopic(name=n) for n in names], allow_auto_topic_creation=False)

    for v in (4, 9, 12):   # (below v4 a missing topic is auto-created)
        ctx = RequestContext(server, None, 3, v, 1, "test", server.clock.now_ms(), "PLAINTEXT")

        async def main():
            out = spec.handle(ctx, request(v))
            assert asyncio.iscoroutine(out), v
            return await with_ticker(out)
        resp, ticks = broker.loop.run_until_complete(main())
        assert ticks >= 5, (v, ticks)       # 15 partitions, 2 a step, built then encoded
        assert [(t.name, t.error_code, len(t.partitions)) for t in resp.topics] == [
            ("named2", 0, 5), ("no-such-topic", 3, 0), ("named0", 0, 5), ("bad/name", 17, 0), ("named1", 0, 5)]
        monkeypatch.setattr(metadata, "SLICED_BUILD_PARTITIONS", 10_000)
        whole = spec.handle(ctx, request(v))
        monkeypatch.setattr(metadata, "SLICED_BUILD_PARTITIONS", 6)
        assert not asyncio.iscoroutine(whole)
        assert _encode(resp, v) == _encode(whole, v), v
