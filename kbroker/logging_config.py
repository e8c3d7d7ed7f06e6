"""Log lines for operators.

* Default: Kafka's log4j layout, ``[2024-05-01 12:00:00,123] INFO message (logger)``.
* ``--log-format json``: one JSON object a line (``ts``, ``level``, ``logger``, ``message``,
  ``exception``), for log shippers.
* Per-logger levels: ``--log-level INFO,kbroker.request.logger=DEBUG,kbroker.net=WARNING``.
* ``kbroker.request.logger`` logs every completed request at DEBUG (Kafka's
  kafka.request.logger); ``kbroker.state.change`` carries the state changes an operator
  follows (Kafka's state.change.logger): use the helpers below so the lines look alike."""

from __future__ import annotations

import json
import logging
import sys

KAFKA_FORMAT = "[%(asctime)s] %(levelname)s %(message)s (%(name)s)"
state_change = logging.getLogger("kbroker.state.change")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {"ts": self.formatTime(record), "level": record.levelname, "logger": record.name,
               "message": record.getMessage()}
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out)


def parse_levels(spec: str) -> tuple[int, dict[str, int]]:
    """``INFO,kbroker.net=DEBUG`` -> (root level, {logger: level})."""
    root = logging.INFO
    per: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, eq, level = part.rpartition("=")
        lv = logging.getLevelName(level.upper())
        if not isinstance(lv, int):
            raise ValueError(f"unknown log level {level!r}")
        if eq:
            per[name] = lv
        else:
            root = lv
    return root, per


def setup(levels: str = "INFO", fmt: str = "kafka", stream=None) -> None:
    root_level, per = parse_levels(levels)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(KAFKA_FORMAT))
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(root_level)
    for name, lv in per.items():
        logging.getLogger(name).setLevel(lv)


# -- state-change lines (the cluster helpers call these) --------------------------------------

def leader_change(topic: str, partition: int, leader: int, epoch: int, isr, cause: str = "",
                  level: int = logging.INFO) -> None:
    state_change.log(level, "Partition %s-%d: leader %d, leader epoch %d, ISR [%s]%s", topic, partition, leader, epoch,
                     ",".join(map(str, isr)), f" ({cause})" if cause else "")


def isr_change(topic: str, partition: int, old, new, cause: str = "") -> None:
    kind = "shrink" if len(new) < len(old) else "expand"
    state_change.info("Partition %s-%d: ISR %s from [%s] to [%s]%s", topic, partition, kind,
                      ",".join(map(str, old)), ",".join(map(str, new)), f" ({cause})" if cause else "")


def broker_fenced(broker_id: int, epoch: int, fenced: bool, cause: str = "") -> None:
    state_change.info("Broker %d (epoch %d) %s%s", broker_id, epoch, "fenced" if fenced else "unfenced",
                      f" ({cause})" if cause else "")
