"""``kbroker delete-records`` (kafka-delete-records.sh): --offset-json-file with
``{"partitions": [{"topic": "t", "partition": 0, "offset": 3}], "version": 1}``
(offset -1 means the high watermark)."""

from __future__ import annotations

import json

from kbroker.wire.errors import error_name
from kbroker.tools.common import add_bootstrap, client, run


def add_parser(sub) -> None:
    p = sub.add_parser("delete-records", help="move log start offsets forward (like kafka-delete-records.sh)")
    add_bootstrap(p)
    p.add_argument("--offset-json-file", required=True)
    p.set_defaults(tool_main=lambda args: run(_main, args))


def _main(args) -> int:
    with open(args.offset_json_file, encoding="utf-8") as f:
        plan = json.load(f)
    offsets = {(e["topic"], int(e["partition"])): int(e["offset"]) for e in plan.get("partitions", [])}
    if not offsets:
        raise SystemExit("Offset json file contains no partitions")
    print("Executing records delete operation")
    with client(args) as c:
        results = c.delete_records(offsets)
    print("Records delete operation completed:")
    failed = 0
    for (t, p), (code, low) in sorted(results.items()):
        if code:
            failed += 1
            print(f"partition: {t}-{p}\terror: {error_name(code)}")
        else:
            print(f"partition: {t}-{p}\tlow_watermark: {low}")
    return 1 if failed else 0
