"""Command line: ``kbroker serve [server.properties] [--override key=value ...]``.

Like ``kafka-server-start.sh``: Kafka's property names and defaults. With no properties file
the embedded default runs: one node, broker and controller in one process, PLAINTEXT on
127.0.0.1:9092, data under ./data, storage formatted on first start.

Also ``kbroker format -c server.properties [-t CLUSTER_ID]`` (kafka-storage.sh format),
``kbroker random-uuid`` and ``kbroker groups ...`` (kafka-consumer-groups.sh, see kbroker.groups.cli).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from kbroker.config import BrokerConfig, ConfigError


def _setup_logging(level: str, fmt: str = "kafka") -> None:
    from kbroker.logging_config import setup
    try:
        setup(level, fmt)
    except ValueError as e:
        raise SystemExit(f"kbroker: --log-level: {e}")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kbroker", description="A Kafka-compatible broker.")
    p.add_argument("--log-level", default="INFO",
                   help="DEBUG, INFO, WARNING, ERROR (default INFO), then per-logger overrides: "
                        "INFO,kbroker.request.logger=DEBUG")
    p.add_argument("--log-format", choices=["kafka", "json"], default="kafka",
                   help="kafka: Kafka's log4j layout (default); json: one JSON object per line")
    sub = p.add_subparsers(dest="command")
    s = sub.add_parser("serve", help="run a broker (like kafka-server-start.sh)")
    s.add_argument("properties", nargs="?", help="server.properties file (optional)")
    s.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="set a property, overriding the file (repeatable)")
    f = sub.add_parser("format", help="format the log directories (like kafka-storage.sh format)")
    f.add_argument("-c", "--config", help="server.properties file")
    f.add_argument("-t", "--cluster-id", help="cluster id (default: a random one)")
    f.add_argument("--override", action="append", default=[], metavar="KEY=VALUE")
    f.add_argument("-g", "--ignore-formatted", action="store_true")
    f.add_argument("-S", "--add-scram", action="append", default=[], metavar="SCRAM",
                   help="a SCRAM credential for the new cluster: 'SCRAM-SHA-512=[name=alice,password=alice-secret]'")
    f.add_argument("-r", "--release-version", metavar="VERSION",
                   help="the metadata.version a new cluster starts at, by Kafka release (3.3 to 3.9, or e.g. 3.7-IV2); "
                        "default: the newest")
    f.add_argument("-s", "--standalone", action="store_true",
                   help="a dynamic quorum of this controller alone (KIP-853)")
    f.add_argument("-I", "--initial-controllers", metavar="ID@HOST:PORT:DIRID,...",
                   help="the initial voters of a dynamic quorum (KIP-853)")
    sub.add_parser("random-uuid", help="print a random Kafka uuid (for cluster ids)")
    from kbroker.groups.cli import add_parser as add_groups_parser
    add_groups_parser(sub)   # kbroker groups list|describe|reset-offsets|delete
    # operator tools (kbroker.tools, one module each, Kafka's flags)
    from kbroker.tools import topics; topics.add_parser(sub)  # noqa: E702
    from kbroker.tools import configs; configs.add_parser(sub)  # noqa: E702
    from kbroker.tools import get_offsets; get_offsets.add_parser(sub)  # noqa: E702
    from kbroker.tools import delete_records; delete_records.add_parser(sub)  # noqa: E702
    from kbroker.tools import console_producer; console_producer.add_parser(sub)  # noqa: E702
    from kbroker.tools import console_consumer; console_consumer.add_parser(sub)  # noqa: E702
    from kbroker.tools import dump_log; dump_log.add_parser(sub)  # noqa: E702
    from kbroker.tools import perf; perf.add_parser(sub)  # noqa: E702
    from kbroker.tools import dlq; dlq.add_parser(sub)  # noqa: E702
    from kbroker.tools import metadata_quorum; metadata_quorum.add_parser(sub)  # noqa: E702
    from kbroker.tools import cluster; cluster.add_parser(sub)  # noqa: E702
    from kbroker.tools import leader_election; leader_election.add_parser(sub)  # noqa: E702
    from kbroker.tools import reassign_partitions; reassign_partitions.add_parser(sub)  # noqa: E702
    from kbroker.tools import acls; acls.add_parser(sub)  # noqa: E702
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    _setup_logging(args.log_level, args.log_format)
    cmd = args.command or "serve"
    if getattr(args, "tool_main", None) is not None:
        return args.tool_main(args)
    if cmd == "groups":
        from kbroker.groups.cli import main as groups_main
        return groups_main(args)
    if cmd == "random-uuid":
        from kbroker.broker.storage import random_uuid, uuid_to_str
        print(uuid_to_str(random_uuid()))
        return 0
    try:
        if cmd == "format":
            return _format(args)
        props = getattr(args, "properties", None)
        overrides = getattr(args, "override", [])
        cfg = BrokerConfig.load(props, overrides)
    except ConfigError as e:
        print(f"kbroker: configuration error: {e}", file=sys.stderr)
        return 2
    from kbroker.loop_clock import new_event_loop
    from kbroker.server import serve
    try:
        with asyncio.Runner(loop_factory=new_event_loop) as runner:
            runner.run(serve(cfg))
    except KeyboardInterrupt:
        pass
    except Exception as e:
        logging.getLogger("kbroker").error("exiting: %s", e)
        return 1
    return 0


def _format(args) -> int:
    import os

    from kbroker.broker.storage import StorageError, ensure_formatted, read_meta
    cfg = BrokerConfig.load(args.config, args.override)
    dirs = list(dict.fromkeys(cfg.log_dirs + [cfg.metadata_log_dir]))
    from kbroker.security import bootstrap as security_bootstrap
    from kbroker.kraft import metadata_versions
    from kbroker.kraft.controller import METADATA_VERSION, metadata_version_record
    try:
        scram = [security_bootstrap.parse_add_scram(a) for a in args.add_scram]
        level = METADATA_VERSION
        if args.release_version is not None:
            level = metadata_versions.level_of(args.release_version, METADATA_VERSION)
        if scram and level < metadata_versions.FIRST_WITH_SCRAM:
            raise ValueError(f"SCRAM is only supported in metadata.version "
                             f"{metadata_versions.NAMES[metadata_versions.FIRST_WITH_SCRAM]} or later.")
    except ValueError as e:
        print(f"kbroker: {e}", file=sys.stderr)
        return 1
    if not args.ignore_formatted:
        for d in dirs:
            if read_meta(d) is not None:
                print(f"Log directory {d} is already formatted. Use --ignore-formatted to ignore this directory and format the others.",
                      file=sys.stderr)
                return 1
    try:
        cid = ensure_formatted([os.path.abspath(d) for d in dirs], cfg.node_id, args.cluster_id)
    except StorageError as e:
        print(f"kbroker: {e}", file=sys.stderr)
        return 1
    bootstrap = scram + ([metadata_version_record(level)] if args.release_version is not None else [])
    if bootstrap:
        security_bootstrap.write(cfg.metadata_log_dir, bootstrap)
    if args.standalone or args.initial_controllers:
        from kbroker.kraft.format_quorum import FormatError, write_voters
        if args.standalone and args.initial_controllers:
            print("kbroker: --standalone and --initial-controllers exclude each other", file=sys.stderr)
            return 1
        try:
            rec = write_voters(cfg, standalone=args.standalone, initial_controllers=args.initial_controllers)
        except (FormatError, ValueError) as e:
            print(f"kbroker: {e}", file=sys.stderr)
            return 1
        print(f"Bootstrap voters: {', '.join(str(v.voter_id) for v in rec.voters)}")
    print(f"Formatted {', '.join(dirs)} with cluster id {cid} and metadata.version "
          f"{metadata_versions.name_of(level)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
