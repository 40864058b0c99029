"""The daemon's consumer: pulsar-client's consumer, driven from asyncio with one thread hop per batch.

A batch is received in a thread (``batch_receive`` blocks without the GIL until the subscription's batch-receive
policy is met). Acknowledgements are grouped by the client (its ack grouping, 100 ms by default) and answered
at once, without a receipt from the broker: ``acknowledge`` returns as soon as the client has taken the message,
so it runs on the loop, with no thread hop and no wake-up per answer. Only pulsar-client's public API is used.
"""

from __future__ import annotations

import asyncio

import pulsar


class BatchConsumer:
    """A Shared subscription's consumer as the daemon drives it: a batch at a time, acknowledged on the loop."""

    def __init__(self, consumer: pulsar.Consumer) -> None:
        self.consumer = consumer

    @classmethod
    async def subscribe(
        cls, client: pulsar.Client, topics: list[str], subscription: str, **options: object
    ) -> BatchConsumer:
        return cls(await asyncio.to_thread(client.subscribe, topics, subscription, **options))

    async def receive_batch(self) -> list[pulsar.Message]:
        """What has arrived, up to the subscription's batch-receive policy (its size, or what came within
        its timeout; possibly nothing)."""
        return list(await asyncio.to_thread(self.consumer.batch_receive))

    async def acknowledge(self, msg: pulsar.Message) -> None:
        self.consumer.acknowledge(msg)

    async def acknowledge_many(self, msgs: list[pulsar.Message]) -> list[BaseException | None]:
        """Acknowledge every message: in order, None for each one the client took, the failure for each one it
        refused (a closed consumer)."""
        answers: list[BaseException | None] = []
        for msg in msgs:
            try:
                self.consumer.acknowledge(msg)
                answers.append(None)
            except Exception as e:
                answers.append(e)
        return answers

    async def negative_acknowledge(self, msg: pulsar.Message) -> None:
        self.consumer.negative_acknowledge(msg)

    async def close(self) -> None:
        await asyncio.to_thread(self.consumer.close)
