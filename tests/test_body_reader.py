"""Reading a request body fairly (``budgetlens.ingest.body_reader``), with a stand-in request:
bytes are charged to the budget as they arrive, never as declared; a declared length over the
cap is refused before a byte is read; a pause past the idle timeout is 408 naming the rule."""

from __future__ import annotations

import asyncio

import pytest
from starlette.requests import ClientDisconnect

from budgetlens.ingest.body_reader import BodyReader, BodyTimeouts, read_capped
from budgetlens.ingest.budget import ByteBudget
from budgetlens.otlp import OtlpError

MIB = 1024 * 1024


class _Request:
    """What ``BodyReader`` reads of a Starlette request: headers and the body stream."""

    def __init__(
        self, declared: int, pieces: list[bytes], then: asyncio.Event | None = None, gone: bool = False
    ):
        self.headers = {"content-length": str(declared)}
        self.pieces = pieces
        self.then = then
        self.gone = gone  # the client closes its connection after ``pieces``
        self.read_any = False

    async def stream(self):
        for piece in self.pieces:
            self.read_any = True
            yield piece
        if self.gone:
            raise ClientDisconnect()  # what Starlette raises when the client closed mid-body
        if self.then is not None:
            await self.then.wait()


def test_bytes_are_charged_as_they_arrive_not_as_declared():
    async def scenario():
        budget = ByteBudget(32 * MIB, 16 * MIB)
        reader = BodyReader(budget, BodyTimeouts(30, 30, 0))
        held = [0]
        stall = asyncio.Event()
        request = _Request(16 * MIB, [b"x" * MIB], then=stall)  # declares 16 MiB, sends 1
        task = asyncio.create_task(reader.read(request, held, "10.0.0.1", 16 * MIB, "hint"))
        await asyncio.sleep(0.05)
        assert budget.used == MIB and budget.by_client == {"10.0.0.1": MIB} and held == [MIB]
        stall.set()
        assert len(await task) == MIB

    asyncio.run(scenario())


def test_a_declared_length_over_the_cap_is_refused_before_a_byte_is_read():
    async def scenario():
        reader = BodyReader(ByteBudget(32 * MIB), BodyTimeouts())
        request = _Request(99_999_999_999, [b"x"])
        with pytest.raises(OtlpError) as refused:
            await reader.read(request, [0], "", 16 * MIB, "lower the batch size")
        assert refused.value.status == 413 and "lower the batch size" in refused.value.reason
        assert not request.read_any

    asyncio.run(scenario())


def test_a_pause_longer_than_the_idle_timeout_is_408_naming_it():
    async def scenario():
        reader = BodyReader(ByteBudget(32 * MIB), BodyTimeouts(body_timeout_s=30, idle_timeout_s=0.05))
        request = _Request(2 * MIB, [b"x" * MIB], then=asyncio.Event())  # never sends the rest
        with pytest.raises(OtlpError) as refused:
            await reader.read(request, [0], "", 16 * MIB, "")
        assert refused.value.status == 408 and "(idle timeout)" in refused.value.reason

    asyncio.run(scenario())


def test_a_client_gone_mid_body_is_not_readable_and_its_bytes_are_counted_for_the_caller():
    """Reading: Starlette's ClientDisconnect reaches the caller with the bytes charged so far in
    ``held`` (the app gives them back); dropping a refused body: False, the connection is gone."""

    async def scenario():
        budget = ByteBudget(32 * MIB, 16 * MIB)
        reader = BodyReader(budget, BodyTimeouts(30, 30, 0))
        held = [0]
        with pytest.raises(ClientDisconnect):
            await reader.read(_Request(4 * MIB, [b"x" * MIB], gone=True), held, "10.0.0.1", 16 * MIB, "")
        assert held == [MIB] and budget.used == MIB
        assert await reader.discard(_Request(4 * MIB, [b"x" * MIB], gone=True), started=False) is False
        assert await reader.discard(_Request(MIB, [b"x" * MIB]), started=False) is True

    asyncio.run(scenario())


def test_a_small_requests_body_is_refused_once_past_its_limit_without_holding_the_rest():
    """``read_capped`` (the read and ledger endpoints): a declared length over the limit is 413
    before a byte is read; a body without one (chunked) is 413 as soon as what arrived passes
    the limit, the pieces after it never read; a body within it is returned whole."""

    async def scenario():
        declared = _Request(2 * MIB, [b"x" * MIB])
        with pytest.raises(OtlpError) as refused:
            await read_capped(declared, MIB)
        assert refused.value.status == 413 and "the limit is 1048576" in refused.value.reason
        assert not declared.read_any
        endless = _Request(0, [b"x" * 1024] * 10_000)
        endless.headers = {}  # chunked: no Content-Length
        pieces = endless.stream()
        endless.stream = lambda: pieces
        with pytest.raises(OtlpError, match="exceeds the limit of 4096 bytes"):
            await read_capped(endless, 4096)
        assert len([_ async for _ in pieces]) == 10_000 - 5  # the rest stayed unread
        assert await read_capped(_Request(3, [b"a", b"bc"]), 3) == b"abc"

    asyncio.run(scenario())
