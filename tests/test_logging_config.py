import io
import json
import logging

import pytest

from kbroker.logging_config import isr_change, parse_levels, setup


@pytest.fixture
def restore_logging():
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.getLogger("kbroker.net").setLevel(logging.NOTSET)


def test_parse_levels():
    assert parse_levels("WARNING,kbroker.net=DEBUG") == (logging.WARNING, {"kbroker.net": logging.DEBUG})
    with pytest.raises(ValueError):
        parse_levels("LOUD")


def test_kafka_layout_and_per_logger_levels(restore_logging):
    out = io.StringIO()
    setup("WARNING,kbroker.net=DEBUG", "kafka", out)
    logging.getLogger("kbroker.net").debug("hello %d", 1)
    logging.getLogger("kbroker.other").info("hidden")
    lines = out.getvalue().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("[") and lines[0].endswith("] DEBUG hello 1 (kbroker.net)")


def test_json_layout_and_state_change_line(restore_logging):
    out = io.StringIO()
    setup("INFO", "json", out)
    isr_change("t", 0, [1, 2, 3], [1, 2], "replica 3 lagged")
    rec = json.loads(out.getvalue())
    assert rec["logger"] == "kbroker.state.change" and rec["level"] == "INFO"
    assert rec["message"] == "Partition t-0: ISR shrink from [1,2,3] to [1,2] (replica 3 lagged)"
