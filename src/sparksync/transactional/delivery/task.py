"""The Spark side of the distribution agent: a task reads its subscriptions' commands, in
subscription and commit order (``spark.reads.map_partitions``), and delivers them one
subscription after another, a :class:`~sparksync.transactional.delivery.deliver.Delivery` each. One
result row per subscription (``results.RESULT_SCHEMA``); a subscription that fails is reported and the next
one goes on."""

from __future__ import annotations

import functools
import time
from collections.abc import Iterable, Iterator, Sequence

from sparksync.result_rows import result_mapper
from sparksync.transactional.delivery.decoding import Decoder
from sparksync.transactional.delivery.deliver import Delivery, DeliveryContext
from sparksync.transactional.delivery.results import RESULT_SCHEMA, DeliveryResult
from sparksync.transactional.delivery.subscriber import Command


def deliver_stream(ctx: DeliveryContext, chunks: Iterable[Sequence[Sequence]]) -> Iterator[dict]:
    """The commands of a task (chunks of rows: subscription, then :class:`Command`'s fields, sorted by
    subscription, xact_seqno, command_id): one :class:`Delivery` per subscription, one after another.
    Yields one result per subscription; a subscription that fails (even by an injected crash) is
    reported and the next one goes on."""
    current = CurrentSubscription(ctx)
    decoder = Decoder(ctx.shapes)
    for rows in chunks:
        for row in rows:
            if row[0] != current.name:
                yield from current.close()
                current.open(row[0])
            try:
                for c in decoder.commands(row[1:]):
                    current.command(c)
            except Exception as e:  # noqa: BLE001 - a stored command that cannot be read stops its subscription
                current.broken(e)
    yield from current.close()


class CurrentSubscription:
    """The subscription this task is delivering now: its Delivery, the transaction being collected,
    or the failure that stopped it."""

    def __init__(self, ctx: DeliveryContext):
        self.ctx = ctx
        self.name: str | None = None
        self.delivery: Delivery | None = None
        self.failed: DeliveryResult | None = None
        self.txn: list[Command] = []

    def open(self, name: str) -> None:
        self.name, self.delivery, self.failed, self.txn = name, None, None, []
        try:
            self.delivery = Delivery(self.ctx, self.ctx.subscriptions[name])
        except Exception as e:  # noqa: BLE001 - this subscription fails, the others go on
            self.failed = DeliveryResult(name)
            self.failed.fail(e)

    def command(self, c: Command) -> None:
        if self.delivery is None:
            return
        if self.txn and c.xact_seqno != self.txn[0].xact_seqno:
            self._add()
        self.txn.append(c)

    def broken(self, e: BaseException) -> None:
        """A command of this subscription cannot be read: the transactions before its own are applied,
        its transaction and everything after it are not, and the subscription reports it."""
        self.txn = []
        d = self.delivery
        if d is None:
            return
        try:
            d.flush()                 # (a failure there stops the delivery with its own error)
        except Exception as flush_error:  # noqa: BLE001
            e = flush_error
        if d.stopped:
            d.make_durable()
            d.result.seconds = time.perf_counter() - d.t0
            self.failed, self.delivery = d.result, None
            d.close()
        else:
            self._fail(d, e)

    def _add(self) -> None:
        txn, self.txn, d = self.txn, [], self.delivery
        if d is None:
            return
        try:
            d.add(txn[0].xact_seqno, txn)
        except Exception as e:  # noqa: BLE001
            self._fail(d, e)

    def _fail(self, d: Delivery, e: BaseException) -> None:
        d.make_durable()
        d.result.fail(e)
        d.result.seconds = time.perf_counter() - d.t0
        self.failed, self.delivery = d.result, None
        d.close()

    def close(self) -> Iterator[dict]:
        if self.name is None:
            return
        if self.delivery is not None and self.txn:
            self._add()
        if self.delivery is not None:
            d = self.delivery
            try:
                result = d.finish()
            except Exception as e:  # noqa: BLE001
                self._fail(d, e)
            else:
                d.close()
                self.failed = result
        if self.failed is not None:
            yield self.failed.row()
        self.name, self.delivery, self.failed = None, None, None


def make_mapper(ctx: DeliveryContext):
    """The function for ``mapInArrow``: the task's pending-command chunks in, one result row per
    subscription out."""
    return result_mapper(functools.partial(deliver_stream, ctx), RESULT_SCHEMA)


