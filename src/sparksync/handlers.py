"""Business logic handlers: an application's own code, called for every row a merge applies of an article, in both
directions, where the merge agent applies it (the agent's process, its Spark tasks, and the web door for a device's
upload), as SQL Server's merge agent calls a business logic handler.

An article names its handler in the configuration (``business_logic = "module:Class"``, imported from the
configuration's folder as resolvers are); ``Class`` subclasses :class:`BusinessLogicHandler` and defines the methods
it wants, each called with a :class:`HandlerContext` and rows as dicts of column -> value (typed as the publication's
columns, never SQL)::

    class SoftDelete(BusinessLogicHandler):
        def delete(self, ctx, row):
            if ctx.direction == "upload":               # a store's delete is kept at HQ, flagged
                return Custom({**row, "deleted": 1})
            return Accept()

Change handling (a change that meets no conflict): ``insert(ctx, row)``, ``update(ctx, row)`` and
``delete(ctx, row)`` (``row``: the row's last values here) return :class:`Accept` (apply it), :class:`Reject` (it
is not applied here: the source keeps its version, and the change is listed as a failed change naming the handler)
or :class:`Custom` (this row is applied instead; a delete's custom row keeps the row). Conflict handling:
``update_conflict(ctx, publisher_row, subscriber_row)`` and ``update_delete_conflict(ctx, row)`` (``row``: the
updated side's version) return :class:`Default` (the article's resolver decides), :class:`AcceptPublisher`,
:class:`AcceptSubscriber` or :class:`Custom` (an update-delete conflict's custom row keeps the row). Error
handling: ``error(ctx, row, message)``, when the database refused to apply a change (a unique key taken, a
constraint), returns :class:`Default` (the change fails, as without a handler) or :class:`Custom` (this row is
applied instead). A method not defined is Accept (Default); a method that raises, or returns anything else, makes
that row a failed change naming the handler and its message, never a failed batch.

Custom data is a new version of the row made at the destination: it is tracked like any change there, so it goes
on to every other replica (back to the source too) and never comes back as a conflict. The handler is not called
for the agent's own compensating writes. ``ctx.log(message)`` adds a line to the session's history.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Accept:
    """Apply the change as it came."""


@dataclass(frozen=True)
class Reject:
    """Do not apply the change here (the source keeps its version)."""

    reason: str = ""


@dataclass(frozen=True)
class Custom:
    """Apply this row instead."""

    row: dict[str, Any]


@dataclass(frozen=True)
class Default:
    """What happens without a handler: the resolver's verdict for a conflict, a failed change for an error."""


@dataclass(frozen=True)
class AcceptPublisher:
    """A conflict: the publisher's version wins."""


@dataclass(frozen=True)
class AcceptSubscriber:
    """A conflict: the subscriber's version wins."""


ChangeAction = Accept | Reject | Custom
ConflictAction = Default | AcceptPublisher | AcceptSubscriber | Custom
ErrorAction = Default | Custom


@dataclass
class HandlerContext:
    """Where a handler's row comes from and goes to."""

    direction: str                     # "upload" (a subscriber's change, to the publisher) | "download"
    article: str                       # the article's name
    subscription: str                  # the subscription the change goes to or comes from
    partition_id: int | None = None    # a filtered publication's partition of that subscription
    messages: list[str] = field(default_factory=list)

    def log(self, message: str) -> None:
        """A line for the session's history (the merge agent's, or the web door's for a device)."""
        self.messages.append(str(message))


class BusinessLogicHandler:
    """Subclass it and define any of ``insert``, ``update``, ``delete``, ``update_conflict``,
    ``update_delete_conflict`` and ``error`` (module docstring). One instance serves every row of its article in a
    process; it must not keep state a retried task could see twice."""

    METHODS = ("insert", "update", "delete", "update_conflict", "update_delete_conflict", "error")
