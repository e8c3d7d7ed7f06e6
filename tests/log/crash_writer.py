"""Subprocess for the SIGKILL crash test: appends batches in a loop and prints each
acknowledged last offset on stdout (after append returned). Every record's value is its
own offset, so the parent can check the reopened log record by record.

usage: python crash_writer.py LOG_DIR PREALLOCATE(true|false|zerofill) COMPRESSION(0..4)

zerofill: flush.messages=1, whose active segment gets zeros written ahead of the appends
(kbroker.log.fill_ahead; nothing fsyncs here, the page cache outlives the process).
"""

import sys

from kbroker.log.config import LogConfig
from kbroker.log.log_manager import LogManager
from kbroker.wire.records import BatchBuilder


def main() -> None:
    d, prealloc, compression = sys.argv[1], sys.argv[2], int(sys.argv[3])
    cfg = LogConfig.from_props({"segment.bytes": "32768", "preallocate": str(prealloc == "true").lower(),
                                "index.interval.bytes": "1024", "file.delete.delay.ms": "0",
                                "segment.index.bytes": "4096",
                                **({"flush.messages": "1"} if prealloc == "zerofill" else {})})
    lm = LogManager([d], cfg)
    log = lm.get_or_create("crash", 0)
    out = sys.stdout
    i = 0
    while True:
        i += 1
        n = 1 + i % 7
        b = BatchBuilder(compression=compression)
        start = log.log_end_offset
        for j in range(n):
            b.append(key=b"k%d" % (j % 3), value=b"%d" % (start + j) + b"." * (i % 200),
                     timestamp=1000 + i)
        info = log.append(bytearray(b.build()), 1000 + i, leader_epoch=1 + i // 500)
        log.high_watermark = log.log_end_offset
        out.write("%d\n" % info.last_offset)
        out.flush()
        if i % 64 == 0:
            lm.run_flush(1000 + i)  # fsync rolled segments, advance + checkpoint recovery points


if __name__ == "__main__":
    main()
