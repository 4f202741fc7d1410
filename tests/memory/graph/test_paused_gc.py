"""replay.paused_gc: the cyclic collector is off inside the block and as it was after it, an
exception raised inside included."""

from __future__ import annotations

import gc
from contextlib import nullcontext

import pytest

from llamafit.memory.graph.replay import paused_gc


@pytest.mark.parametrize("enabled", [True, False])
@pytest.mark.parametrize("raises", [False, True])
def test_the_collector_is_off_inside_and_as_it_was_after(enabled: bool, raises: bool) -> None:
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    inside = []
    try:
        with pytest.raises(RuntimeError) if raises else nullcontext():
            with paused_gc():
                inside.append(gc.isenabled())
                with paused_gc():  # nested: still off, and off again after the inner one
                    inside.append(gc.isenabled())
                inside.append(gc.isenabled())
                if raises:
                    raise RuntimeError("inside")
        assert (inside, gc.isenabled()) == ([False, False, False], enabled)
    finally:
        (gc.enable if was else gc.disable)()


@pytest.mark.parametrize("frozen_before", [False, True])
def test_what_others_froze_stays_frozen(frozen_before: bool) -> None:
    """The block's objects join the oldest generation through freeze and unfreeze, which would
    unfreeze what someone else froze: then they are left where they are."""
    was = gc.isenabled()
    gc.enable()
    try:
        if frozen_before:
            gc.freeze()
        before = gc.get_freeze_count()
        with paused_gc():
            made = [[i] for i in range(1000)]
        assert (gc.get_freeze_count() == before, gc.isenabled(), len(made)) == (True, True, 1000)
        assert (before > 0) == frozen_before
    finally:
        if frozen_before:
            gc.unfreeze()
        (gc.enable if was else gc.disable)()
