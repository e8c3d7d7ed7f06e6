"""The tools' pure parts: Java's partitioner, Kafka's --add-config syntax, the console
producer's line format, the console consumer's default formatter."""
import pytest

from kbroker.tools.configs import split_configs
from kbroker.tools.console_consumer import Formatter
from kbroker.tools.console_producer import LineParser
from kbroker.tools.partitioner import Partitioner, murmur2, partition_for_key
from kbroker.wire.records import Record


@pytest.mark.parametrize("data,expected", [
    (b"21", -973932308), (b"foobar", -790332482), (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829), (b"abc", 479470107),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971)])
def test_murmur2_matches_kafka_utils(data, expected):
    # the vectors of Kafka's UtilsTest.testMurmur2
    assert murmur2(data) == expected


def test_partitioner_keyed_and_sticky():
    p = Partitioner(3)
    assert p(b"21") == partition_for_key(b"21", 3) == (-973932308 & 0x7FFFFFFF) % 3
    first = p(None)
    assert p(None) == first
    p.next_batch()
    assert p(None) != first


def test_add_config_syntax():
    assert split_configs("a=1,b=[x,y],c=") == {"a": "1", "b": "x,y", "c": ""}
    with pytest.raises(SystemExit):
        split_configs("novalue")


def test_line_parser_headers_key_timestamp_null():
    lp = LineParser({"parse.key": "true", "parse.headers": "true", "parse.timestamp": "true", "null.marker": "NULL"})
    assert lp.parse("123\th1:a,h2:b\tk\tv") == (123, [("h1", b"a"), ("h2", b"b")], b"k", b"v")
    assert lp.parse("5\tNO_HEADERS\tNULL\tv") == (5, [], None, b"v")
    with pytest.raises(ValueError):
        LineParser({"parse.key": "true"}).parse("no separator")


def test_default_formatter_order_matches_kafka():
    f = Formatter({"print.timestamp": "true", "print.partition": "true", "print.offset": "true",
                   "print.headers": "true", "print.key": "true"}, "default")

    class B:
        timestamp_type = 0
    rec = Record(offset=7, timestamp=99, key=None, value=b"v", headers=[("h", b"x")])
    assert f.format("t", 2, B(), rec) == "CreateTime:99\tPartition:2\tOffset:7\th:x\tnull\tv\n"
