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

Holds nest (a counter); ``release`` restores the thresholds the process had.
"""

from __future__ import annotations

import gc

HELD_THRESHOLD2 = 1 << 30   # gen1 collections before a full one: never, in practice

_holds = 0
_saved: tuple[int, int, int] | None = None


def hold_full_collections() -> None:
    global _holds, _saved
    if _holds == 0:
        _saved = gc.get_threshold()
        t0, t1, _t2 = _saved
        gc.set_threshold(t0, t1, HELD_THRESHOLD2)
    _holds += 1


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


def held() -> bool:
    return _holds > 0
