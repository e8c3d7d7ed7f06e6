"""Steps readers (``Message.read_steps``): a request with arrays of structs decodes to the
same object as ``read``, pausing every few hundred array elements, and bad bytes raise the
same CodecError."""

import random
import uuid

import pytest

from kbroker.slices import run_to_end
from kbroker.wire.codegen.emit_python import STEP_ELEMENTS
from kbroker.wire.errors import CodecError
from kbroker.wire.generated.fetch_request import FetchRequest
from kbroker.wire.primitives import Reader
from wire_strategies import all_versions, message_class, messages, protocol_available, random_struct

pytestmark = pytest.mark.skipif(not protocol_available(), reason="kafka-protocol schemas not found")

STEPPED = [m for m in (messages() if protocol_available() else ()) if message_class(m)._steps is not None]


def _steps(cls, data, version):
    """(the object, the reader's end position, how many pauses)."""
    r = Reader(memoryview(data), 0)
    gen = cls.read_steps(r, version)
    pauses = 0
    try:
        while True:
            assert next(gen) is None
            pauses += 1
    except StopIteration as done:
        return done.value, r.pos, pauses


def test_requests_with_arrays_of_structs_have_steps_readers():
    names = {m.name for m in STEPPED}
    assert {"FetchRequest", "ProduceRequest", "ListOffsetsRequest", "OffsetCommitRequest"} <= names
    assert all(m.kind == "request" for m in STEPPED)
    assert "FetchResponse" not in names and "ApiVersionsRequest" not in names


@pytest.mark.parametrize("msg", STEPPED, ids=lambda m: m.name)
def test_steps_reader_decodes_what_read_decodes(msg):
    cls = message_class(msg)
    rng = random.Random(msg.name)
    for v in all_versions(msg):
        for _ in range(4):
            data = random_struct(msg, msg.struct, v, rng).encode(v)
            want_r = Reader(memoryview(data), 0)
            want = cls.read(want_r, v)
            got, pos, _ = _steps(cls, data, v)
            assert got == want and pos == want_r.pos == len(data), f"{msg.name} v{v}"
            # cut short anywhere: the same answer from both, most often the same error
            cut = data[:rng.randrange(len(data))]
            try:
                want = cls.read(Reader(memoryview(cut), 0), v)
            except CodecError as e:
                with pytest.raises(CodecError) as got_e:
                    _steps(cls, cut, v)
                assert str(got_e.value) == str(e)
            else:
                assert _steps(cls, cut, v)[0] == want


@pytest.mark.parametrize("version", [4, 11, 13, 17])
def test_a_fetch_of_ten_thousand_partitions_pauses_between_its_partitions(version):
    T = FetchRequest.FetchTopic
    req = FetchRequest(max_wait_ms=500, min_bytes=1, max_bytes=1 << 20, session_id=0, session_epoch=-1,
                       topics=[T(topic=f"t{t}", topic_id=uuid.UUID(int=t + 1),
                                 partitions=[T.FetchPartition(partition=p, fetch_offset=p * 7, partition_max_bytes=1 << 20)
                                             for p in range(1000)]) for t in range(10)],
                       forgotten_topics_data=[], rack_id="")
    data = req.encode(version)
    got, pos, pauses = _steps(FetchRequest, data, version)
    assert pos == len(data)
    assert got == FetchRequest.read(Reader(memoryview(data), 0), version)
    assert got.topics[9].partitions[999].fetch_offset == 999 * 7
    assert pauses == 10 * (1000 // STEP_ELEMENTS)        # a pause after every 128 partitions
    assert run_to_end(FetchRequest.read_steps(Reader(memoryview(data), 0), version)) == got
