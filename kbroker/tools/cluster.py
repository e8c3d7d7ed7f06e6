"""``kbroker cluster up N``: an N-node local cluster on loopback with one command.

Every node is broker + controller (``--controllers K`` makes only the first K controllers
and the rest brokers), formatted with one fresh cluster id, with static
``controller.quorum.voters``. Ports are taken from the kernel (bound to 127.0.0.1:0 then
released) unless ``--base-port`` is given; data goes to a new temporary directory unless
``--data-dir`` names one (which must be empty or absent). ``--racks`` gives each node its own
``broker.rack``: one value per node (``a,b,c``), or a pattern with ``{id}`` (``RACK{id}``). It prints the bootstrap servers and
waits; Ctrl-C (or SIGTERM) stops every node it started, by PID, and removes a temporary data
directory.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time


def add_parser(sub) -> None:
    p = sub.add_parser("cluster", help="run a local multi-node cluster on loopback")
    ops = p.add_subparsers(dest="op", required=True)
    up = ops.add_parser("up", help="start N nodes, print the bootstrap servers, stop on Ctrl-C")
    up.add_argument("nodes", type=int)
    up.add_argument("--controllers", type=int, default=None, help="how many nodes are controllers (default: all)")
    up.add_argument("--base-port", type=int, default=None)
    up.add_argument("--data-dir", default=None)
    up.add_argument("--override", action="append", default=[], metavar="KEY=VALUE")
    up.add_argument("--racks", default=None, metavar="R1,R2,...|PATTERN",
                    help="broker.rack per node: a comma list, or a pattern such as RACK{id}")
    p.set_defaults(tool_main=main)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            body = b"\x00\x12\x00\x00\x00\x00\x00\x01\x00\x05probe"
            s.sendall(len(body).to_bytes(4, "big") + body)
            return len(s.recv(8)) == 8
    except OSError:
        return False


def plan(n: int, controllers: int | None, base_port: int | None) -> list[dict]:
    """Per node: id, roles, broker port, controller port (None for a broker only)."""
    k = n if controllers is None else max(1, min(controllers, n))
    out = []
    for i in range(1, n + 1):
        bport = base_port + 2 * (i - 1) if base_port else _free_port()
        cport = (base_port + 2 * (i - 1) + 1 if base_port else _free_port()) if i <= k else None
        out.append({"id": i, "roles": "broker,controller" if cport else "broker", "port": bport, "cport": cport})
    return out


def racks(spec: str | None, n: int) -> list[str | None]:
    """broker.rack of nodes 1..n from ``--racks`` (ValueError if a list has another length)."""
    if not spec:
        return [None] * n
    if "{id}" in spec:
        return [spec.replace("{id}", str(i)) for i in range(1, n + 1)]
    values = [v.strip() for v in spec.split(",")]
    if len(values) != n or not all(values):
        raise ValueError(f"--racks names {len(values)} racks for {n} nodes")
    return values


def node_props(node: dict, voters: str, data_dir: str, overrides: list[str],
               rack: str | None = None) -> list[str]:
    listeners = [f"PLAINTEXT://127.0.0.1:{node['port']}"]
    if node["cport"]:
        listeners.append(f"CONTROLLER://127.0.0.1:{node['cport']}")
    props = [f"node.id={node['id']}", f"process.roles={node['roles']}", f"listeners={','.join(listeners)}",
             "controller.listener.names=CONTROLLER", f"controller.quorum.voters={voters}",
             f"log.dirs={os.path.join(data_dir, 'node%d' % node['id'])}"]
    if rack is not None:
        props.append(f"broker.rack={rack}")
    return props + list(overrides)


def main(args) -> int:
    from kbroker.broker.storage import random_uuid, uuid_to_str
    n = args.nodes
    if n < 1:
        print("kbroker cluster up: N must be at least 1", file=sys.stderr)
        return 2
    try:
        node_racks = racks(args.racks, n)
    except ValueError as e:
        print(f"kbroker cluster up: {e}", file=sys.stderr)
        return 2
    temp = args.data_dir is None
    data_dir = tempfile.mkdtemp(prefix="kbroker-cluster-") if temp else os.path.abspath(args.data_dir)
    if not temp and os.path.isdir(data_dir) and os.listdir(data_dir):
        print(f"kbroker cluster up: {data_dir} is not empty", file=sys.stderr)
        return 2
    os.makedirs(data_dir, exist_ok=True)
    nodes = plan(n, args.controllers, args.base_port)
    voters = ",".join(f"{x['id']}@127.0.0.1:{x['cport']}" for x in nodes if x["cport"])
    cid = uuid_to_str(random_uuid())
    procs: dict[int, subprocess.Popen] = {}
    stop = {"now": False}

    def on_signal(signum, frame):
        stop["now"] = True
    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        for x in nodes:
            props = node_props(x, voters, data_dir, args.override, node_racks[x["id"] - 1])
            ov = [a for p in props for a in ("--override", p)]
            subprocess.run([sys.executable, "-m", "kbroker", "format", "-t", cid, *ov], check=True,
                           capture_output=True)
            log = open(os.path.join(data_dir, f"node{x['id']}.log"), "ab")
            procs[x["id"]] = subprocess.Popen([sys.executable, "-m", "kbroker", "serve", *ov], stdout=log,
                                              stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 120
        pending = {x["id"]: x["port"] for x in nodes}
        while pending and not stop["now"]:
            for i, port in list(pending.items()):
                if procs[i].poll() is not None:
                    print(f"node {i} exited with {procs[i].returncode}; see {data_dir}/node{i}.log", file=sys.stderr)
                    return 1
                if _answers(port):
                    del pending[i]
            if time.monotonic() > deadline:
                print(f"nodes {sorted(pending)} did not start within 120 s; see {data_dir}", file=sys.stderr)
                return 1
            time.sleep(0.2)
        if stop["now"]:
            return 130
        print(f"cluster {cid}: {n} nodes ({sum(1 for x in nodes if x['cport'])} controllers), data in {data_dir}")
        bootstrap = ",".join("127.0.0.1:%d" % x["port"] for x in nodes)
        ctrls = ",".join("127.0.0.1:%d" % x["cport"] for x in nodes if x["cport"])
        print(f"bootstrap servers: {bootstrap}")
        print(f"controllers: {ctrls}")
        print("Ctrl-C stops the cluster", flush=True)
        while not stop["now"]:
            for i, p in procs.items():
                if p.poll() is not None:
                    print(f"node {i} exited with {p.returncode}", file=sys.stderr)
                    stop["now"] = True
            time.sleep(0.2)
        return 0
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        end = time.monotonic() + 30
        for p in procs.values():
            try:
                p.wait(max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        for s, h in old.items():
            signal.signal(s, h)
        if temp:
            shutil.rmtree(data_dir, ignore_errors=True)
        print("cluster stopped", flush=True)
