"""Stopping a background loop reliably.

On Python 3.11, `asyncio.wait_for` (used inside store and HTTP calls) swallows a cancellation
that arrives just as the awaited call finishes, so a single `task.cancel()` may be lost and
`await task` then waits forever. `stop_task` cancels again until the task is done.
"""

from __future__ import annotations

import asyncio
from typing import Any


async def stop_task(task: asyncio.Task[Any] | None, *, every_s: float = 0.2) -> None:
    """Cancels `task` (repeatedly, every `every_s`, until it is done) and waits for it."""
    if task is None:
        return
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=every_s)
    if not task.cancelled():
        task.exception()  # retrieved: a loop that died is logged by the loop itself
