"""The broker's loop knows when its current iteration began (kbroker.loop_clock), and sliced
work takes only what other work left of an iteration."""

import asyncio
import time
import types

from kbroker import loop_clock, slices


def burn(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_elapsed_counts_from_the_start_of_the_iteration(monkeypatch):
    now = [100.0]                          # a fake clock: the loop's selector reads it too
    monkeypatch.setattr(loop_clock, "time", types.SimpleNamespace(perf_counter=lambda: now[0]))
    loop = loop_clock.new_event_loop()
    seen = []

    def first():
        now[0] += 0.003                     # 3 ms of work in this iteration
        seen.append(loop_clock.elapsed(loop))
        loop.call_soon(second)          # runs in the next iteration

    def second():
        seen.append(loop_clock.elapsed(loop))
        seen.append(loop_clock.left(loop, 0.004))
        now[0] += 0.004
        seen.append(loop_clock.left(loop, 0.004))
        loop.stop()
    try:
        loop.call_soon(first)
        loop.run_forever()
    finally:
        loop.close()
    assert seen[0] >= 0.003
    assert seen[1] < 0.003              # a new iteration: counted from its own start
    assert 0 < seen[2] <= 0.004
    assert abs(seen[3] - 0.001) < 1e-9  # 4 ms of the iteration's 5 used: 1 ms left


def test_a_loop_without_the_clock_reports_nothing():
    loop = asyncio.new_event_loop()
    try:
        assert loop_clock.elapsed(loop) == 0.0
        assert loop_clock.left(loop, 0.004) == 0.004
    finally:
        loop.close()


def _steps_after_each_hog(loop) -> list[int]:
    """A sliced job whose every turn is preceded, in the same iteration, by a 6 ms callback;
    returns how many of its steps ran after each of those callbacks."""
    seq = []
    hog_queued = [False]

    def hog():
        hog_queued[0] = False
        seq.append("H")
        burn(0.006)

    def steps():
        for _ in range(40):
            burn(0.0005)
            seq.append("s")
            if not hog_queued[0]:       # (queued before the job's next turn: runs first)
                hog_queued[0] = True
                loop.call_soon(hog)
            yield
    loop.run_until_complete(slices.run_in_slices(steps(), 0.004))
    return [len(run) for run in "".join(seq).split("H")[1:-1]]


def test_a_sliced_turn_takes_only_what_is_left_of_the_iteration():
    loop = loop_clock.new_event_loop()
    try:
        runs = _steps_after_each_hog(loop)
    finally:
        loop.close()
    assert runs and all(n == 1 for n in runs)   # the iteration was spent: one step, no more
    plain = asyncio.new_event_loop()            # without the clock: a whole 4 ms slice each time
    try:
        runs = _steps_after_each_hog(plain)
    finally:
        plain.close()
    assert runs and max(runs) > 2
