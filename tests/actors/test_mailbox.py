"""Mailbox: FIFO order, backpressure without drops, close semantics, cancellation safety."""

from __future__ import annotations

import asyncio

import anyio
import pytest
from anyio import wait_all_tasks_blocked
from anyio.lowlevel import checkpoint

from threadmind.actors._mailbox import Mailbox, MailboxClosed, MailboxStatistics
from threadmind.errors import ThreadmindError, ValidationError


class TestMailbox:
    async def test_fifo_and_statistics(self) -> None:
        mailbox: Mailbox[int] = Mailbox(capacity=8)
        for i in range(5):
            await mailbox.put(i)
        assert len(mailbox) == 5
        assert mailbox.statistics() == MailboxStatistics(depth=5, capacity=8, waiting_senders=0)
        assert [await mailbox.get() for _ in range(5)] == [0, 1, 2, 3, 4]
        assert len(mailbox) == 0

    async def test_get_nowait_on_empty_raises_would_block(self) -> None:
        mailbox: Mailbox[int] = Mailbox()
        with pytest.raises(anyio.WouldBlock):
            mailbox.get_nowait()

    async def test_backpressure_waits_and_never_drops(self) -> None:
        mailbox: Mailbox[str] = Mailbox(capacity=2)
        await mailbox.put("a")
        await mailbox.put("b")
        with pytest.raises(anyio.WouldBlock):
            mailbox.put_nowait("x")
        third_done = anyio.Event()

        async def third() -> None:
            await mailbox.put("c")
            third_done.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(third)
            await wait_all_tasks_blocked()
            assert not third_done.is_set()
            assert mailbox.statistics() == MailboxStatistics(depth=2, capacity=2, waiting_senders=1)
            # a waiting sender also keeps put_nowait from jumping the queue
            with pytest.raises(anyio.WouldBlock):
                mailbox.put_nowait("x")
            assert await mailbox.get() == "a"
            await third_done.wait()
        assert [mailbox.get_nowait(), mailbox.get_nowait()] == ["b", "c"]

    async def test_waiting_senders_admitted_in_arrival_order(self) -> None:
        mailbox: Mailbox[int] = Mailbox(capacity=1)
        await mailbox.put(0)
        async with anyio.create_task_group() as tg:
            for i in range(1, 50):
                tg.start_soon(mailbox.put, i)
                await wait_all_tasks_blocked()
            assert mailbox.statistics().waiting_senders == 49
            received = [await mailbox.get() for _ in range(50)]
        assert received == list(range(50))

    async def test_close_delivers_pending_then_end_of_stream(self) -> None:
        mailbox: Mailbox[int] = Mailbox()
        await mailbox.put(1)
        await mailbox.put(2)
        mailbox.close()
        mailbox.close()  # idempotent
        assert mailbox.closed
        with pytest.raises(MailboxClosed) as info:
            await mailbox.put(3)
        assert info.value.code == "THREADMIND_MAILBOX_CLOSED"
        assert isinstance(info.value, ThreadmindError)
        with pytest.raises(MailboxClosed):
            mailbox.put_nowait(3)
        assert await mailbox.get() == 1
        assert mailbox.get_nowait() == 2
        with pytest.raises(anyio.EndOfStream):
            await mailbox.get()
        with pytest.raises(anyio.EndOfStream):
            mailbox.get_nowait()

    async def test_close_wakes_waiting_receiver_and_sender(self) -> None:
        full: Mailbox[int] = Mailbox(capacity=1)
        full.put_nowait(1)
        empty: Mailbox[int] = Mailbox()
        outcomes: list[str] = []

        async def sender() -> None:
            with pytest.raises(MailboxClosed):
                await full.put(2)
            outcomes.append("sender refused")

        async def receiver() -> None:
            with pytest.raises(anyio.EndOfStream):
                await empty.get()
            outcomes.append("receiver ended")

        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(sender)
                tg.start_soon(receiver)
                await wait_all_tasks_blocked()
                full.close()
                empty.close()
        assert sorted(outcomes) == ["receiver ended", "sender refused"]
        assert full.get_nowait() == 1  # the accepted item is still delivered
        with pytest.raises(anyio.EndOfStream):
            full.get_nowait()

    async def test_woken_receiver_cancelled_by_scope_still_takes_its_item(self) -> None:
        mailbox: Mailbox[str] = Mailbox()
        got: list[str] = []
        first_scope = anyio.CancelScope()

        async def receiver(name: str) -> None:
            try:
                got.append(f"{name}:{await mailbox.get()}")
            except anyio.EndOfStream:
                got.append(f"{name}:end")

        async def first_receiver() -> None:
            with first_scope:
                await receiver("first")

        async with anyio.create_task_group() as tg:
            tg.start_soon(first_receiver)
            await wait_all_tasks_blocked()
            tg.start_soon(receiver, "second")
            await wait_all_tasks_blocked()
            mailbox.put_nowait("x")  # wakes the first receiver ...
            first_scope.cancel()  # ... which is cancelled before it runs: anyio lets it take the item
            await wait_all_tasks_blocked()
            mailbox.close()
        assert got == ["first:x", "second:end"]

    async def test_receiver_cancelled_after_wake_up_passes_it_on(self) -> None:
        mailbox: Mailbox[str] = Mailbox()
        got: list[str] = []
        tasks: list[asyncio.Task[object]] = []

        async def first_receiver() -> None:
            task = asyncio.current_task()
            assert task is not None
            tasks.append(task)
            try:
                await mailbox.get()
            except asyncio.CancelledError:
                got.append("first cancelled")

        async def second_receiver() -> None:
            got.append(await mailbox.get())

        async with anyio.create_task_group() as tg:
            tg.start_soon(first_receiver)
            await wait_all_tasks_blocked()
            tg.start_soon(second_receiver)
            await wait_all_tasks_blocked()
            mailbox.put_nowait("x")  # wakes the first receiver ...
            tasks[0].cancel()  # ... whose (plain asyncio) cancellation lands before it takes the item
        assert got == ["first cancelled", "x"]

    async def test_cancelled_sender_is_not_admitted(self) -> None:
        mailbox: Mailbox[int] = Mailbox(capacity=1)
        mailbox.put_nowait(1)
        with anyio.move_on_after(0) as scope:
            await mailbox.put(2)
        assert scope.cancelled_caught
        assert mailbox.statistics().waiting_senders == 0
        assert mailbox.get_nowait() == 1
        with pytest.raises(anyio.WouldBlock):
            mailbox.get_nowait()

    async def test_many_producers_one_consumer_lose_nothing(self) -> None:
        mailbox: Mailbox[tuple[int, int]] = Mailbox(capacity=4)
        received: list[tuple[int, int]] = []

        async def producer(p: int) -> None:
            for i in range(10):
                await mailbox.put((p, i))
                await checkpoint()

        async def consumer() -> None:
            while True:
                try:
                    received.append(await mailbox.get())
                except anyio.EndOfStream:
                    return

        async with anyio.create_task_group() as outer:
            outer.start_soon(consumer)
            async with anyio.create_task_group() as tg:
                for p in range(100):
                    tg.start_soon(producer, p)
            mailbox.close()
        assert len(received) == 1000
        for p in range(100):  # each producer's items arrive in its own order
            assert [i for q, i in received if q == p] == list(range(10))

    @pytest.mark.parametrize("capacity", [0, -1, True, 1.5])
    def test_capacity_must_be_positive_int(self, capacity: object) -> None:
        with pytest.raises(ValidationError, match="capacity"):
            Mailbox(capacity=capacity)  # type: ignore[arg-type]


async def test_a_mailbox_nobody_waits_on_holds_no_waiter_queue() -> None:
    """Waiter queues exist only while a receiver or a sender waits: a registry caches thousands of idle actors,
    and every object of theirs is one more for each full collection to walk."""
    import gc

    mailboxes: list[Mailbox[int]] = [Mailbox(capacity=1) for _ in range(100)]
    for mailbox in mailboxes:
        async with anyio.create_task_group() as tg:
            tg.start_soon(mailbox.get)  # a receiver waits, then takes the item
            await wait_all_tasks_blocked()
            mailbox.put_nowait(1)
        async with anyio.create_task_group() as tg:
            mailbox.put_nowait(2)
            tg.start_soon(mailbox.put, 3)  # a sender waits for room
            await wait_all_tasks_blocked()
            assert mailbox.statistics().waiting_senders == 1
            assert mailbox.get_nowait() == 2
        assert mailbox.get_nowait() == 3 and mailbox.statistics().waiting_senders == 0
    gc.collect()
    waiter_queues = [o for o in gc.get_referrers(*mailboxes) if o is not mailboxes]
    assert not waiter_queues  # nothing refers to a mailbox but the list
    held = sum(1 for m in mailboxes for o in gc.get_referents(m) if gc.is_tracked(o) and not isinstance(o, type))
    assert held == 100, held  # its item deque alone
    mailboxes[0].close()
    with pytest.raises(MailboxClosed):
        mailboxes[0].put_nowait(4)
