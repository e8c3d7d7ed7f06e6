"""The broker's garbage-collector policy (issue 15: no loop stall above 10 ms).

CPython's full collection walks every tracked object that is not frozen, holding the GIL:
the event loop and every thread stop meanwhile. The broker keeps that set small:

* after start-up, and after new partitions are installed, it collects the young generations
  and freezes what survives (``gc.freeze``): partitions, the metadata image and the
  coordinators live as long as the process, and a full collection no longer walks them;
* while partitions are being created (thousands of them, tens of thousands of new objects),
  automatic full collections are held off: each would walk every object created since the
  last freeze (10-50 ms pauses were measured while 10,000 partitions were created). The young
  generations are still collected, so short-lived garbage is freed as usual; when the last
  creation ends the hold is released and the survivors are frozen.

* while serving, a full collection waits for 100 collections of the middle generation
  instead of CPython's 10 (``for_serving``). A large request keeps its objects alive across
  many young collections (a librdkafka Fetch naming 10,000 partitions: ~40,000 objects for
  ~100 ms), so they reach the old generation, and a full collection that starts meanwhile
  walks them: 4-10 ms, about every other such fetch with the default. Garbage in cycles is
  still collected, ten times less often.

* while a large request is in flight (one decoded in steps: a Fetch naming thousands of
  partitions), collections are off (``quiet``). Its tens of thousands of objects live for
  ~100 ms (its long poll: up to the client's wait) and then die by reference count; every
  young collection meanwhile walked them and moved them on (1.5-5 ms for the middle
  generation, 10-30 ms for a full collection that met them), and with collections off none
  walks them at all. Only garbage in cycles waits, and never longer than QUIET_MAX_S: then
  collections run again until no such request is in flight.

Holds nest (a counter); ``release`` restores the thresholds the process had.
"""

from __future__ import annotations

import asyncio
import gc

HELD_THRESHOLD2 = 1 << 30   # gen1 collections before a full one: never, in practice
SERVING_THRESHOLD2 = 100    # gen1 collections before a full one while serving (CPython: 10)
QUIET_MAX_S = 2.0           # longest time collections stay off for requests in flight

_quiets = 0                 # large requests in flight
# set while collections are off for them (not for someone else's gc.disable): their time limit
_quiet_timer: asyncio.TimerHandle | None = None

_holds = 0
_saved: tuple[int, int, int] | None = None


def hold_full_collections() -> None:
    global _holds, _saved
    if _holds == 0:
        _saved = gc.get_threshold()
        t0, t1, _t2 = _saved
        gc.set_threshold(t0, t1, HELD_THRESHOLD2)
    _holds += 1


def for_serving() -> None:
    """The serving process's thresholds: full collections ten times rarer (see above)."""
    global _saved
    t0, t1, _t2 = gc.get_threshold()
    if _holds:
        _saved = (t0, t1, SERVING_THRESHOLD2)   # what the last release restores
    else:
        gc.set_threshold(t0, t1, SERVING_THRESHOLD2)


def freeze_survivors() -> None:
    """Collect the young generations and freeze what survives: long-lived objects (new
    partitions, everything start-up built) leave the full collection's walk."""
    gc.collect(1)
    gc.freeze()


def release_full_collections(freeze: bool = True) -> None:
    """End one hold; the last one restores the thresholds and (``freeze``) collects the young
    generations and freezes what survives."""
    global _holds, _saved
    if _holds == 0:
        return
    _holds -= 1
    if _holds == 0 and _saved is not None:
        gc.set_threshold(*_saved)
        _saved = None
        if freeze:
            freeze_survivors()


def begin_quiet() -> None:
    """A large request is in flight (call on the event loop): collections are off until it and
    any others end, or for QUIET_MAX_S at most."""
    global _quiets, _quiet_timer
    _quiets += 1
    if _quiets == 1 and gc.isenabled():
        gc.disable()
        _quiet_timer = asyncio.get_running_loop().call_later(QUIET_MAX_S, _collections_on)


def end_quiet() -> None:
    """One large request answered. Collections come back on at the loop's next iteration,
    not here: until then the callback that woke its caller still holds the answer (asyncio's
    wake-up holds the future it waited on), and a collection starting now would walk it."""
    global _quiets
    _quiets -= 1
    if _quiets == 0 and _quiet_timer is not None:
        try:
            asyncio.get_running_loop().call_soon(_after_the_last_quiet)
        except RuntimeError:   # (no loop: a request closed as its loop went away)
            _collections_on()


def _after_the_last_quiet() -> None:
    if _quiets == 0:   # (else another large request began meanwhile: still quiet)
        _collections_on()


def end_all_quiets() -> None:
    """Every quiet is over: for a loop that stopped with requests in flight (tests)."""
    global _quiets
    _quiets = 0
    _collections_on()


def _collections_on() -> None:
    """Collections run again: every quiet request ended, or the quiet lasted QUIET_MAX_S (then
    they stay on until every request in flight has ended)."""
    global _quiet_timer
    if _quiet_timer is not None:
        _quiet_timer.cancel()
        _quiet_timer = None
        gc.enable()


def held() -> bool:
    return _holds > 0
