"""The per-iteration budget of connection work (kbroker/net/iteration_budget.py): many
readable connections, or many pipelined frames, are spread over loop iterations, in order,
with timers running between them. Each request "costs" 1 ms of a fake clock the budget reads."""

import asyncio
import socket
import struct

from kbroker.net import iteration_budget
from kbroker.net.connection import Connection
from kbroker.net.iteration_budget import IterationBudget
from kbroker.wire.frame import FrameDecoder


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


class IterationCounter:
    """Counts loop iterations: a callback that re-schedules itself runs once per iteration."""

    def __init__(self, loop):
        self.n = 0
        self.loop = loop
        self.running = True
        loop.call_soon(self._tick)

    def _tick(self):
        self.n += 1
        if self.running:
            self.loop.call_soon(self._tick)


class CostlyDispatcher:
    """Answers each request with its own payload; every request advances the clock 1 ms and
    records (iteration, connection, payload)."""

    def __init__(self, clock, counter):
        self.clock, self.counter = clock, counter
        self.handled = []

    def dispatch(self, conn, fr):
        self.clock.t += 0.001
        self.handled.append((self.counter.n, conn.conn_id, bytes(fr)))
        return [frame(bytes(fr))]


async def read_frames(sock, count, timeout=10.0):
    loop = asyncio.get_running_loop()
    buf, out = b"", []
    while len(out) < count:
        data = await asyncio.wait_for(loop.sock_recv(sock, 65536), timeout)
        if not data:
            break
        buf += data
        while len(buf) >= 4 and len(buf) >= 4 + struct.unpack(">i", buf[:4])[0]:
            n = struct.unpack(">i", buf[:4])[0]
            out.append(buf[4:4 + n])
            buf = buf[4 + n:]
    return out


def connections(loop, n, dispatcher, cls=Connection):
    """``n`` connections on socket pairs: (broker sides, client sides)."""
    conns, clients = [], []
    for i in range(n):
        a, b = socket.socketpair()
        a.setblocking(False)
        b.setblocking(False)
        conns.append(cls(loop, a, f"peer{i}", dispatcher, FrameDecoder(1 << 20), conn_id=f"c{i}"))
        clients.append(b)
    return conns, clients


def close_all(conns, clients):
    for c in conns:
        c.close()
    for b in clients:
        b.close()


def setup(loop, n_conns):
    clock = FakeClock()
    iteration_budget._per_loop[loop] = IterationBudget(loop, budget_s=0.004, clock=clock)
    counter = IterationCounter(loop)
    disp = CostlyDispatcher(clock, counter)
    conns, clients = connections(loop, n_conns, disp)
    return clock, counter, disp, conns, clients


def per_iteration(handled):
    counts = {}
    for it, _cid, _p in handled:
        counts[it] = counts.get(it, 0) + 1
    return counts


def test_many_readable_connections_are_spread_over_iterations():
    async def main():
        loop = asyncio.get_running_loop()
        clock, counter, disp, conns, clients = setup(loop, 60)
        for i, b in enumerate(clients):
            b.sendall(frame(b"req%d" % i))
        await asyncio.sleep(0.05)    # every request is in its socket before the loop looks
        for c in conns:
            c.start()
        replies = await asyncio.gather(*(read_frames(b, 1) for b in clients))
        counter.running = False
        assert replies == [[b"req%d" % i] for i in range(60)]
        counts = per_iteration(disp.handled)
        # 4 ms of budget, 1 ms per request: the old code handled all 60 in one iteration
        assert max(counts.values()) <= 5, counts
        assert len(counts) >= 12
        close_all(conns, clients)
    asyncio.run(main())


def test_pipelined_frames_keep_their_order_and_others_get_turns():
    async def main():
        loop = asyncio.get_running_loop()
        clock, counter, disp, conns, clients = setup(loop, 2)
        busy, other = clients
        busy.sendall(b"".join(frame(b"p%03d" % i) for i in range(40)))   # one read, 40 frames
        await asyncio.sleep(0.02)
        for c in conns:
            c.start()
        await asyncio.sleep(0)
        other.sendall(frame(b"other"))
        got_busy, got_other = await asyncio.gather(read_frames(busy, 40), read_frames(other, 1))
        counter.running = False
        assert got_busy == [b"p%03d" % i for i in range(40)]     # pipelining order kept
        assert got_other == [b"other"]
        assert max(per_iteration(disp.handled).values()) <= 5
        # the other client was served before the busy one's backlog was through
        order = [p for _it, _c, p in disp.handled]
        assert order.index(b"other") < order.index(b"p039")
        close_all(conns, clients)
    asyncio.run(main())


def test_timers_run_between_turns():
    """A callback made ready while a backlog of requests is worked through runs before the
    backlog ends (the old code handled all 100 frames of the read in one callback)."""
    async def main():
        loop = asyncio.get_running_loop()
        clock, counter, disp, conns, clients = setup(loop, 1)
        clients[0].sendall(b"".join(frame(b"q%03d" % i) for i in range(100)))
        await asyncio.sleep(0.02)
        fired = []
        first = disp.dispatch

        def dispatch(conn, fr):   # the first request schedules a callback for the next iteration
            if not disp.handled:
                loop.call_soon(lambda: fired.append(len(disp.handled)))
            return first(conn, fr)
        disp.dispatch = dispatch
        conns[0].start()
        got = await read_frames(clients[0], 100)
        counter.running = False
        assert got == [b"q%03d" % i for i in range(100)]
        assert fired and fired[0] < 100
        conns[0].close()
        clients[0].close()
    asyncio.run(main())


def test_queued_connections_take_turns_in_arrival_order():
    loop = asyncio.new_event_loop()
    try:
        clock = FakeClock()
        budget = IterationBudget(loop, budget_s=0.004, clock=clock)
        turns = []

        class Conn:
            def __init__(self, name):
                self.name = name

            def _take_turn(self):
                turns.append(self.name)
                clock.t += 0.003

        assert budget.may_start()
        clock.t += 0.005
        assert not budget.may_start()          # spent in this iteration
        for name in "abcd":
            budget.wait_turn(Conn(name))
        assert budget.waiting == 4
        loop.call_soon(loop.stop)
        loop.run_forever()                     # next iteration: a turn for a and b (3 ms each)
        assert turns == ["a", "b"]
        assert not budget.may_start()          # c, d still wait: a newcomer queues behind them
        loop.call_soon(loop.stop)
        loop.run_forever()
        assert turns == ["a", "b", "c", "d"]
    finally:
        loop.close()


class RecordingConnection(Connection):
    """Notes the loop iteration of every response it sends."""
    __slots__ = ()
    sent: list = []

    def _send(self, chunks):
        RecordingConnection.sent.append(self.state["counter"].n)
        super()._send(chunks)


def test_responses_completing_together_are_released_over_iterations():
    """500 JoinGroups answered at once (their futures resolved in one callback): their
    releases went out in one iteration; now within the budget (here each budget check costs
    1 ms of the fake clock, 4 ms a turn)."""
    async def main():
        loop = asyncio.get_running_loop()
        clock = FakeClock()

        def ticking():
            clock.t += 0.001
            return clock.t
        iteration_budget._per_loop[loop] = IterationBudget(loop, budget_s=0.004, clock=ticking)
        counter = IterationCounter(loop)
        pending = []

        class Parked:
            def dispatch(self, conn, fr):
                f = loop.create_future()
                pending.append((f, bytes(fr)))
                return f
        RecordingConnection.sent = []
        conns, clients = connections(loop, 40, Parked(), RecordingConnection)
        for i, (c, b) in enumerate(zip(conns, clients)):
            c.state["counter"] = counter
            c.start()
            b.sendall(frame(b"join%d" % i))
        while len(pending) < 40:
            await asyncio.sleep(0.01)
        for f, payload in pending:      # the coordinator answers everyone in one go
            f.set_result([frame(payload)])
        replies = await asyncio.gather(*(read_frames(b, 1) for b in clients))
        counter.running = False
        assert replies == [[b"join%d" % i] for i in range(40)]
        per = {}
        for it in RecordingConnection.sent:
            per[it] = per.get(it, 0) + 1
        assert max(per.values()) <= 5, per     # the old code released all 40 in one iteration
        close_all(conns, clients)
    asyncio.run(main())


def test_request_tasks_started_per_iteration_are_bounded_by_their_measured_cost():
    """A coroutine handler does its work in its task's first step, which asyncio runs in the
    next iteration: 150 JoinGroups read in one iteration ran 150 first steps (~16 ms) in the
    next. Each started task now reserves the measured cost of a first step (1 ms here)."""
    async def main():
        loop = asyncio.get_running_loop()
        clock = FakeClock()
        iteration_budget._per_loop[loop] = IterationBudget(loop, budget_s=0.004, clock=clock)
        counter = IterationCounter(loop)
        steps = []

        class AsyncDispatcher:
            def dispatch(self, conn, fr):
                payload = bytes(fr)

                async def handle():
                    clock.t += 0.001                    # the handler's work
                    steps.append(counter.n)
                    await asyncio.sleep(0)
                    return [frame(payload)]
                return handle()
        budget = iteration_budget._per_loop[loop]

        async def round_of(n, tag):
            conns, clients = connections(loop, n, AsyncDispatcher())
            for i, b in enumerate(clients):
                b.sendall(frame(b"%s%d" % (tag, i)))
            await asyncio.sleep(0.05)
            steps.clear()
            for c in conns:
                c.start()
            replies = await asyncio.gather(*(read_frames(b, 1) for b in clients))
            assert replies == [[b"%s%d" % (tag, i)] for i in range(n)]
            close_all(conns, clients)
            per = {}
            for it in steps:
                per[it] = per.get(it, 0) + 1
            return per

        await round_of(60, b"warm")       # the budget learns what a first step costs
        assert abs(budget.task_cost - 0.001) < 0.0002
        per = await round_of(40, b"j")
        counter.running = False
        assert max(per.values()) <= 5, per     # the old code: 40 first steps in one iteration
    asyncio.run(main())
