"""Record batches as each stock client really sends them, under every codec, decode with our
own kbroker.wire.records to exactly the records the client was given (issue 2).

The broker stores batches as received, so after producing we read the partition's segment
files directly: what is on disk is what the client compressed and framed.
"""
from __future__ import annotations

import glob
import os

import pytest

from compat_tests.clients import CODECS, Rec, driver
from compat_tests.test_client_roundtrip import CLIENTS, require
from kbroker.wire.records import iter_batches

CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def records_for(client_name: str, codec: str) -> list[Rec]:
    # Compressible values, so that no client decides compression is not worth it.
    text = client_name == "kcat"
    out = []
    for i in range(60):
        value = (f"{codec}-{i}-" * 40).encode()
        if text:
            out.append(Rec(f"key{i % 4}".encode(), value, 0, (("codec", codec.encode()),)))
        else:
            out.append(Rec(f"key{i % 4}".encode(), value, 1_700_000_000_000 + i,
                           (("codec", codec.encode()), ("i", str(i).encode()))))
    return out


def stored_batches(broker, topic):
    files = sorted(glob.glob(os.path.join(broker.data_dir, "logs", f"{topic}-0", "*.log")))
    assert files, f"no segment files for {topic}"
    for path in files:
        with open(path, "rb") as f:
            data = f.read()
        yield from iter_batches(data.rstrip(b"\0") if data.endswith(b"\0" * 64) else data)


@pytest.mark.parametrize("client_name", CLIENTS)
def test_client_batches_decode_with_our_codec(shared_broker, client_name):
    require(client_name)
    client = driver(client_name, shared_broker.bootstrap)
    for codec in CODECS:
        topic = f"batches-{client_name.replace('.', '-')}-{codec}"
        client.create_topic(topic, 1)
        sent = records_for(client_name, codec)
        client.produce(topic, sent, codec)

        batches = list(stored_batches(shared_broker, topic))
        assert batches
        assert {b.compression for b in batches} == {CODEC_IDS[codec]}, \
            f"{client_name} did not send {codec} batches"
        got = [r for b in batches for r in b.records()]
        assert [r.offset for r in got] == list(range(len(sent)))
        for s, r in zip(sent, got):
            assert (r.key, r.value) == (s.key, s.value)
            assert tuple((k, v) for k, v in r.headers) == s.headers
            if s.timestamp:
                assert r.timestamp == s.timestamp
