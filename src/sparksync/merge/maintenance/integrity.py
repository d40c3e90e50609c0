"""Is a replica's replication machinery intact? Tables, metadata and tracking triggers.

A tracking trigger dropped, disabled or edited behind sparksync's back means that replica's changes
are no longer recorded: they would never be sent, and ``status`` would still say nothing is pending.
``status`` and every merge check each replica with :func:`replica_problems`; a merge refuses a
damaged replica (loudly, naming what is wrong) and goes on with the others.
"""

from __future__ import annotations

from collections.abc import Collection

from sparksync import failpoints
from sparksync.dialects.model import table_drift
from sparksync.dialects.replica import Replica
from sparksync.errors import ReplicaBehind, ReplicaDamaged, SparksyncError
from sparksync.merge.tracking import identity, pending
from sparksync.merge.tracking.articles import install_tracking, published_articles
from sparksync.merge.tracking.tracked import tracked_article, trigger_context
from sparksync.metadata import store
from sparksync.metadata.records import ArticleRow, PublicationRow, Role, SubscriptionRow
from sparksync.names import TableName


def replica_problems(replica: Replica, pubid: str) -> list[str]:
    """Everything wrong with this replica's part in publication ``pubid`` (empty: intact)."""
    try:
        store.require_metadata(replica)
    except SparksyncError as e:
        return [e.message]
    ident = store.replica_identity(replica)
    if ident is None:
        return ["its replica identity (MSmerge_replica) is missing"]
    problems = []
    if replica.dialect.current_open_generation(replica) is None:
        problems.append("it has no open generation (MSmerge_genhistory was altered)")
    articles = published_articles(replica, pubid)
    if not articles:
        problems.append("its publication metadata (sysmergearticles) is missing")
    problems += shared_nicknames(replica, articles)
    problems += replica.dialect.capture_problems(replica)
    for a in articles:
        art = tracked_article(a)
        info = identity.reflect(replica, art)
        if info is None:
            problems.append(f"table {art.table} is missing")
            continue
        problems += [f"table {art.table}: {p}" for p in table_drift(art.info, info)]
        if info.column(art.rowguid_column) is None:
            continue
        problems += replica.dialect.tracking_problems(replica, trigger_context(replica, art, ident.nickname))
    return problems


def shared_nicknames(replica: Replica, articles: list[ArticleRow]) -> list[str]:
    """Tables of ``articles`` (a publication's ``sysmergearticles`` rows) whose nickname another table of
    the database has too (in another publication): their tracking metadata is keyed by the nickname, so
    the changes of only one of them are recorded. A publisher that numbered each publication's articles
    on their own left them so; a nickname never changes once given, so it stays until republished."""
    mine = {a.nickname: _table_of(a) for a in articles}
    pubs = {r.pubid: r.name for r in store.select(replica, PublicationRow)}
    problems = []
    for r in store.select(replica, ArticleRow, order_by=("nickname",)):
        table = _table_of(r)
        if r.nickname in mine and table != mine[r.nickname]:
            problems.append(f"table {mine[r.nickname]} shares article nickname {r.nickname} with table {table} of "
                            f"publication {pubs.get(r.pubid, r.pubid)}: the changes of only one of them are "
                            "recorded (a nickname cannot change in place: see docs/failures.md)")
    return list(dict.fromkeys(problems))


def _table_of(a: ArticleRow) -> str:
    return str(TableName(a.source_schema, a.source_table))


def describe(problems: list[str], limit: int = 3) -> str:
    """One line: the first problems, and how many more."""
    head = "; ".join(problems[:limit])
    return head + (f" (and {len(problems) - limit} more)" if len(problems) > limit else "")


def check_identity(replica: Replica, subscription: str, registered: SubscriptionRow) -> None:
    """The database at a subscription's address must be the replica the publisher registered for it
    (``registered``: its ``sysmergesubscriptions`` row at the publisher). A replaced database, the
    publisher's own database under another spelling, or another subscriber's is refused by name."""
    ident = store.replica_identity(replica)
    if ident is not None and ident.replica_id == registered.replica_id \
            and ident.nickname == registered.replnickname:
        return
    if ident is None:
        who = "a database without replication metadata"
    elif ident.role is Role.PUBLISHER:
        who = f"the publisher {ident.name} itself"
    else:
        who = f"replica {ident.name} (nickname {ident.nickname})"
    raise ReplicaDamaged(f"subscription {subscription}: the database at its address is {who}, not the subscriber "
                         f"the publisher initialized (replica nickname {registered.replnickname}); check its "
                         "database URL, or reinitialize it", obj=subscription)


def check_not_behind(replica: Replica, subscription: str, registered: SubscriptionRow, pubid: str) -> None:
    """A subscriber must not be behind what the publisher recorded for it (``registered``: its row at
    the publisher). The publisher records what it sent only after the subscriber committed it, and what
    it received in the transaction that applied it, so a subscriber is never behind, unless its
    database went back in time: restored from an older copy, or replaced by one. Merging it then loses
    changes silently (its new generations reuse numbers the publisher already has; the changes it
    received since the copy are never sent again), so it is refused, naming ``sparksync reinit``."""

    mine = store.select_one(replica, SubscriptionRow, {"pubid": pubid, "role": Role.PUBLISHER})
    received = (mine.recgen or 0) if mine is not None else 0
    sent_to_it = registered.sentgen or 0
    open_generation = int(replica.dialect.current_open_generation(replica) or 0)
    received_from_it = registered.recgen or 0
    problems = []
    if sent_to_it > received:
        problems.append(f"it holds the publisher's changes up to generation {received}, but the publisher "
                        f"delivered them up to {sent_to_it}")
    if open_generation and open_generation <= received_from_it:
        problems.append(f"its newest generation is {open_generation}, but the publisher already received its "
                        f"generations up to {received_from_it}")
    if problems:
        raise ReplicaBehind(f"subscription {subscription}: its database went back in time ({'; '.join(problems)}): "
                            "it was restored from an older copy or replaced. It was not merged (that would lose "
                            f"changes silently); run 'sparksync reinit --subscription {subscription}' (changes "
                            "made there since the copy are discarded)", obj=subscription)


def repair_tracking(replica: Replica, pubid: str) -> list[str]:
    """Re-create the tracking triggers of every article of ``pubid`` whose triggers are missing,
    disabled or altered (``setup`` does this). Returns what was repaired. Changes made while the
    triggers were broken were not recorded: the caller says so."""
    ident = store.replica_identity(replica)
    if ident is None:
        return []
    repaired = []
    with replica.transaction():
        for a in published_articles(replica, pubid):
            art = tracked_article(a)
            if replica.reflect(art.table) is None:
                continue
            problems = replica.dialect.tracking_problems(replica, trigger_context(replica, art, ident.nickname))
            if problems:
                install_tracking(replica, art, ident.nickname)
                repaired.append(f"{art.table} ({problems[0]})")
    return repaired


def rowguid_columns(replica: Replica, added: Collection[str] | None = None) -> list[ArticleRow]:
    """The articles (one row per artid) whose rowguid publishing added is still a column of their table here, to be
    kept beside it (``identity.key_rowguids``): ``added`` the artids the publisher added one to (at a subscriber;
    None: the articles' own ``rowguid_added``)."""
    out: dict[str, ArticleRow] = {}
    for row in store.select(replica, ArticleRow, order_by=("nickname",)):
        mine = row.rowguid_added if added is None else row.artid in added
        if mine and not row.rowguid_keyed and row.artid not in out and replica.reflect(tracked_article(row).table):
            out[row.artid] = row
    return list(out.values())


def upgrade_tracking(replica: Replica, added: Collection[str] | None = None) -> list[str]:
    """Re-create the tracking triggers of every merge article at this replica after its metadata was
    upgraded (``store.upgrade_metadata``): a release's triggers are the ones it installs. A release
    before the tracking log wrote the metadata in its triggers, so nothing it recorded is pending
    anywhere but in that metadata: nothing is lost. Where the database keeps rowguids beside the tables,
    an article whose rowguid column publishing added (``added``: at a subscriber, the artids the publisher
    added one to) moves it there, each row keeping its rowguid (``identity.key_rowguids``), after a flush of
    what the old triggers logged. Returns the articles whose tracking changed."""
    out: list[str] = []
    if store.metadata_version(replica) is None:
        return out
    if replica.dialect.capabilities.keyed_rowguids:
        with replica.transaction():
            pending.flush(replica)
            for row in rowguid_columns(replica, added):
                why = identity.key_rowguids(replica, tracked_article(row))
                out.append(f"{row.name} (rowguids kept beside the table)" if why is None else
                           f"{row.name} keeps its rowguid column ({why})")
    for prow in store.select(replica, PublicationRow):
        out += repair_tracking(replica, prow.pubid)
    failpoints.hit("upgrade.before_commit", replica.label)     # (the caller's transaction, if it holds one)
    return out
