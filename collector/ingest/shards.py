"""One body's mapping spread over the decode workers: shards by trace (issue 25).

A single client sends one body at a time, so with one worker per body the other core idles while
the client waits for its answer. When no other body is being mapped, ``DecodePool`` has each of
its workers decode the whole body (a few ms) and map only the spans of the traces of its shard
(``budgetlens.otlp.identity.trace_shard``), then joins the shards here. Every rule of the mapping
stays within one trace (ids and their collisions, run inheritance, aggregates, the agent's task
type), so the shards' rows are the whole body's rows; the two exceptions are told apart and the
body is then mapped whole, as before:

- a rejected span: its mark may flag a row of its run in another trace, and the reasons of
  ``partial_success`` come in the body's order;
- a run record in two shards (one ``budgetlens.run_id`` named by run spans of two traces): the
  store keeps the first of a batch, in the body's order.

Each shard's rows are journaled as a record of their own (no re-encoding on the event loop), all
fsynced before the answer; the loader commits them in one group as it does any records. The
store's tables do not depend on the order of a batch's rows otherwise (keys are unique across
shards, rollups are sums, minima, maxima and sorted sets).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, cast

from budgetlens.otlp import PROTOBUF, OtlpError
from budgetlens.otlp.asked import questions
from budgetlens.otlp.decode import media_type
from budgetlens.otlp.memory import SpanMemory

if TYPE_CHECKING:
    from budgetlens.ingest.decode_pool import Prepared

__all__ = ["is_protobuf", "join_shards", "map_in_shards"]

#: ``in_worker(now_ns, (k, n))``: the body's shard k of n mapped in a worker (with the memory
#: stand-in when the pool has a memory), receive time ``now_ns``.
InWorker = Callable[[int, tuple[int, int]], Awaitable["Prepared"]]


def is_protobuf(content_type: str | None) -> bool:
    """True for an OTLP protobuf body (only those are sharded: a JSON body's decode is most of
    its cost, and each shard would pay it again)."""
    try:
        return media_type(content_type) == PROTOBUF
    except OtlpError:
        return False


def join_shards(parts: list[Prepared]) -> Prepared | None:
    """The ``Prepared`` of a whole body from those of its shards: their payloads journaled one
    after the other (``encoded`` then ``more_encoded``); ``prints``, ``asked`` and ``remembered``
    left empty (the pool checks the memory per shard). None when the body must be mapped whole
    (a rejected span, or a run record in two shards: see the module docstring)."""
    if any(part.rejected for part in parts):
        return None
    runs: set[str] = set()
    for part in parts:
        if not runs.isdisjoint(part.record_runs):
            return None
        runs |= part.record_runs
    encoded = [part.encoded for part in parts if part.encoded is not None]
    flagged: dict[str, int] = {}
    for part in parts:
        for flag, count in part.flagged.items():
            flagged[flag] = flagged.get(flag, 0) + count
    return dataclasses.replace(
        parts[0],
        spans=sum(part.spans for part in parts),
        rows=sum(part.rows for part in parts),
        encoded=encoded[0] if encoded else None,
        more_encoded=encoded[1:],
        flagged=flagged,
        prints={},
        asked=[],
        remembered=[],
        record_runs=frozenset(),
    )


async def map_in_shards(in_worker: InWorker, shards: int, memory: SpanMemory | None) -> Prepared | None:
    """A body mapped in ``shards`` workers at once, each the traces of its shard, then joined;
    None when it must be mapped whole (nothing of it is remembered then). The collector's
    ``memory`` is checked and told as ``DecodePool.prepare`` does for a whole body, shard by
    shard (their traces are disjoint): a shard that needs its memory's answers or collides sends
    the body to be mapped whole, which claims its fingerprints again (harmless: the same ones).
    Raises what ``in_worker`` raises."""
    now_ns = time.time_ns()  # one receive time for every shard
    parts = await asyncio.gather(
        *(in_worker(now_ns, (k, shards)) for k in range(shards)), return_exceptions=True
    )
    for part in parts:
        if isinstance(part, BaseException):
            raise part
    prepared = cast("list[Prepared]", parts)
    if any(part.rejected for part in prepared):
        return None
    if memory is not None:
        for part in prepared:
            conflicts = memory.claim_prints(part.prints) if part.prints else {}
            if conflicts or memory.knows_any(*questions(part.asked, part.remembered)):
                return None
    joined = join_shards(prepared)
    if joined is not None and memory is not None:
        for part in prepared:
            memory.remember(part.remembered)
    return joined
