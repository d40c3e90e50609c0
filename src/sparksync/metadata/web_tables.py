"""The metadata of web synchronization: at the publisher, device tokens, the uploads applied, recovered files and
which device file holds each web subscription; on a device, its subscription, its file's identity, its outbox and
notices (docs/web-sync.md)."""

from __future__ import annotations

from sparksync.metadata.declare import BIG, GUID, INT, JSON, TEXT, TS, C, MetaIndex, MetaTable, TableSet

WEB_VERSION = 4        # 2: MSweb_recoveries; 3: MSweb_file, MSweb_holders, MSweb_strays; 4: MSweb_enrollments,
                       # MSweb_devices, MSweb_credential
WEB = TableSet("web synchronization", 5, WEB_VERSION, (
    MetaTable(
        "MSweb_tokens",
        "At the publisher: the tokens devices authenticate with, one subscription each. Only a salted SHA-256 "
        "of the secret is kept; the token itself is printed once, by 'sparksync token'. A subscription has at "
        "most two live tokens (the new one and, after --rotate, none: the old one is replaced at once).",
        (C("token_id", TEXT, False, "the public part of the token: ssk_<token_id>_<secret>"),
         C("subscription", TEXT, False), C("salt", TEXT, False), C("digest", TEXT, False, "hex SHA-256 of salt + secret"),
         C("created_at", TS, False), C("last_used_at", TS)),
        ("token_id",),
        (MetaIndex("MSweb_tokens_sub", ("subscription",)),),
    ),
    MetaTable(
        "MSweb_uploads",
        "At the publisher: each upload a device's changes were applied from, identified by its generations, "
        "written in the transaction that applied it. The same upload again gets this reply; the same "
        "generations with another body are refused.",
        (C("subscription", TEXT, False), C("lo", BIG, False), C("hi", BIG, False),
         C("digest", TEXT, False, "hex SHA-256 of the request body"), C("reply", JSON, False),
         C("applied_at", TS, False)),
        ("subscription", "lo", "hi"),
    ),
    MetaTable(
        "MSweb_recoveries",
        "At the publisher: each device file found restored from an older copy and recovered (its changes since "
        "the copy uploaded under a new replica nickname, what it lacks sent again): the file's state as it "
        "said it, and the nicknames before and after. The same recovery asked again gets the same nickname.",
        (C("subscription", TEXT, False), C("old_nickname", INT, False), C("new_nickname", INT, False),
         C("sentgen", BIG, False, "what the restored file had uploaded, by its own record"),
         C("recgen", BIG, False, "what the restored file had received, by its own record"),
         C("publisher_recgen", BIG, True, "what the publisher had received from the old nickname"),
         C("publisher_sentgen", BIG, True, "what the publisher had sent to the old nickname"),
         C("recovered_at", TS, False)),
        ("subscription", "old_nickname"),
    ),
    MetaTable(
        "MSweb_holders",
        "At the publisher: which device file holds each web subscription (merge/session/remote/holders.py). A file "
        "is named by the identity it made for itself when it was first synced; a subscription is held by the file "
        "that initialized it, and every request of a sync must come from that file at its current epoch (a key "
        "the file proposes at each sync and the door records), so a copy of the file made before a later sync is "
        "told apart at its first request.",
        (C("subscription", TEXT, False), C("file_id", TEXT, False, "the holding file's identity"),
         C("epoch", TEXT, True, "the key of the holder's latest sync (null: its initialization is under way)"),
         C("described", TEXT, True, "where the file says it lives (host and path), as it said it"),
         C("held_since", TS, False), C("seen_at", TS, False, "its last sync's start")),
        ("subscription",),
    ),
    MetaTable(
        "MSweb_strays",
        "At the publisher: device files that presented a web subscription they do not hold (a copy of the holder "
        "made before its last sync, a second file synced with the same token, a file replaced by a newer one), "
        "refused at their first request and listed by status.",
        (C("subscription", TEXT, False), C("file_id", TEXT, False), C("reason", TEXT, False),
         C("described", TEXT, True, "where the file says it lives"),
         C("unsent", INT, True, "the changes it said it holds that the publisher has not acknowledged"),
         C("first_seen", TS, False), C("last_seen", TS, False), C("attempts", INT, False)),
        ("subscription", "file_id"),
    ),
    MetaTable(
        "MSweb_enrollments",
        "At the publisher: the enrollment secrets of device groups (sparksync enroll-token; fleet/enrollment.py). "
        "Only a salted SHA-256 of the secret is kept; the secret is printed once. Each names the partition its "
        "devices get (host_name, login) and how many devices may enroll with it.",
        (C("secret_id", TEXT, False, "the public part of the secret: sse_<secret_id>_<secret>"),
         C("group_name", TEXT, False), C("salt", TEXT, False), C("digest", TEXT, False),
         C("host_name", TEXT, True), C("login", TEXT, True),
         C("partition_id", INT, True, "the partition its devices get (null: the publication is not filtered)"),
         C("uses", INT, True, "how many devices may enroll with it (null: no limit)"),
         C("used", INT, False, "how many did"), C("expires_at", TS, True), C("revoked_at", TS, True),
         C("failures", INT, False, "wrong secrets presented for this id since its last lockout"),
         C("locked_until", TS, True, "refused until then, after too many wrong secrets"),
         C("created_at", TS, False), C("last_used_at", TS, True)),
        ("secret_id",),
        (MetaIndex("MSweb_enrollments_group", ("group_name",)),),
    ),
    MetaTable(
        "MSweb_devices",
        "At the publisher: the devices enrolled into a device group, each a web subscription of its own (its "
        "registration in sysmergesubscriptions, its token in MSweb_tokens): the group, its partition's values, "
        "the enrollment secret and the file it enrolled with. A revoked or removed device is refused at once "
        "and its registration dropped at the next cleanup.",
        (C("subscription", TEXT, False), C("group_name", TEXT, False), C("host_name", TEXT, True),
         C("login", TEXT, True), C("secret_id", TEXT, True, "the enrollment secret it enrolled with, or jwt:<sub>:<device> "
                                                            "(a token of the group's identity provider)"),
         C("file_id", TEXT, False, "the identity of the file it enrolled (the same file enrolling again is this "
                                   "device; another file is a new one)"),
         C("described", TEXT, True, "where the device said it lives (host and path)"),
         C("state", TEXT, False, "enrolled, revoked or removed"), C("enrolled_at", TS, False),
         C("changed_at", TS, True, "when it was revoked or removed")),
        ("subscription",),
        (MetaIndex("MSweb_devices_group", ("group_name",)), MetaIndex("MSweb_devices_file", ("secret_id", "file_id"))),
    ),
    MetaTable(
        "MSweb_file",
        "On a web device: the file's own identity (one row), made the first time the file is synced, and its "
        "epoch: the key of its latest sync the door accepted (epoch), and the one it proposed (next_epoch) until "
        "the door's answer is recorded. A copy of the file is a file with an older epoch.",
        (C("id", INT, False), C("file_id", TEXT, False), C("epoch", TEXT, True), C("next_epoch", TEXT, True),
         C("made_at", TS, False),
         C("replaced", TEXT, True, "the file this one replaced, set aside with everything it held")),
        ("id",),
    ),
    MetaTable(
        "MSweb_device",
        "On a web device: the server and the subscription this database syncs with (one row); a sync of "
        "another subscription, or of another publication (pubid), is refused.",
        (C("id", INT, False), C("server", TEXT, False), C("subscription", TEXT, False),
         C("publication", TEXT, False), C("pubid", GUID, False), C("bound_at", TS, False)),
        ("id",),
    ),
    MetaTable(
        "MSweb_credential",
        "On an enrolled web device: its own credential (one row), given by the door when it enrolled: the server, "
        "its subscription and token. It is as protected as the file is (encrypted with it where the file is).",
        (C("id", INT, False), C("server", TEXT, False), C("subscription", TEXT, False), C("group_name", TEXT, False),
         C("token", TEXT, False), C("enrolled_at", TS, False)),
        ("id",),
    ),
))

DEVICE_VERSION = 1
DEVICE = TableSet("device", 6, DEVICE_VERSION, (
    MetaTable(
        "MSdevice_outbox",
        "On a web device: each of its changes the publisher was sent, with its fate (merge/session/remote/outbox.py): "
        "sent (no answer yet), applied, lost (a conflict: the winning row and the conflict's id at the publisher), "
        "failed (sent again at every sync), refused. Changes not yet sent are read from the tracking metadata.",
        (C("change_id", BIG, False), C("tablenick", INT, False), C("rowguid", GUID, False),
         C("operation", TEXT, False, "insert, update or delete"),
         C("generation", BIG, False, "the device's generation the change was in"),
         C("lo", BIG, False), C("hi", BIG, False, "the upload (lo, hi] that carried it, last"),
         C("position", INT, False, "its position in that upload"),
         C("state", TEXT, False), C("reason", TEXT), C("tries", INT, False, "uploads of it that failed"),
         C("conflict_id", TEXT, True, "the conflict's id at the publisher"),
         C("winner", TEXT, True, "the replica whose version won"),
         C("winner_row", TEXT, True, "lost: the winning row (JSON as change rows carry it; null: deleted)"),
         C("winner_lineage", TEXT, True, "lost: the winning version's lineage (the device has it once downloaded)"),
         C("columns", JSON, True, "lost, column tracking: the columns that conflicted"),
         C("mine", TEXT, True, "the row as the device sent it (kept while it may be needed: not applied)"),
         C("resolution", TEXT, True, "lost: mine or theirs, as the application chose"),
         C("sent_at", TS, False), C("answered_at", TS), C("acknowledged_at", TS)),
        ("change_id",),
        (MetaIndex("MSdevice_outbox_row", ("tablenick", "rowguid")), MetaIndex("MSdevice_outbox_upload", ("lo", "hi")),
         MetaIndex("MSdevice_outbox_state", ("state",))),
        serial="change_id",
    ),
    MetaTable(
        "MSdevice_inserts",
        "On a web device: the rows its application inserted (noted by the flush of the triggers' log) whose "
        "insert the publisher has not answered yet: the outbox tells an insert from an update by it.",
        (C("tablenick", INT, False), C("rowguid", GUID, False)),
        ("tablenick", "rowguid"),
    ),
    MetaTable(
        "MSdevice_notices",
        "On a web device: what each download batch inserted, updated and deleted, written in the batch's "
        "transaction and removed once the application's callbacks have it (a crash between the two: delivered "
        "at the next start).",
        (C("notice_id", BIG, False), C("session_id", GUID, False), C("batch_seq", INT, False),
         C("changes", JSON, False, "[[article, operation, rowguid, key], ...]"), C("committed_at", TS, False)),
        ("notice_id",),
        serial="notice_id",
    ),
))
