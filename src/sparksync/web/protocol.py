"""The device endpoint's protocol, named once for both ends: its version, its routes, and every request and reply
as a model (pydantic). The door (``web/server/app.py``) reads requests and writes replies with them, the device
(``web/device/sync.py``) the other way round; ``python -m sparksync.web.protocol`` writes the protocol section of
docs/web-sync.md from them (``tests/test_docs.py`` checks it is current). Change rows travel as Arrow frames
(``merge/session/remote/frames.py``), not as JSON.

A request is refused (400) when a field is missing, of another type (no string for a number, no boolean for a
count) or out of range, naming the field; a field the model does not know is left out (a newer device's).
"""

from __future__ import annotations

import uuid
from typing import Any, Literal, NamedTuple, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from sparksync.errors import ProtocolError

PROTOCOL = 5                   # the version of this protocol
OLDEST_PROTOCOL = 3            # the oldest a door still serves; a device that speaks an older one is refused (426)
# What each version added, for a door serving an older device: 4, an upload's fate "replaced"; 5, enrollment into a
# device group (a route of its own: an older device never asks it).
REPLACED_FATE = 4
ENROLLMENT = 5
PROTOCOL_HEADER = "Sparksync-Protocol"
MAX_GENERATION = 1 << 62       # the largest generation number a request may carry
MAX_RETRIES = 10_000           # failed changes one request sends again (the rest at the next sync)


class Route(NamedTuple):
    method: str
    path: str                  # a template: {name} is a path parameter

    def url(self, **params: Any) -> str:
        return self.path.format(**params)


HEALTHZ = Route("GET", "/healthz")
HELLO = Route("GET", "/v1/sync/hello")
SNAPSHOT = Route("GET", "/v1/sync/snapshot")
SNAPSHOT_FILE = Route("GET", "/v1/sync/snapshot/{snapshot_id}/{path}")
INITIALIZE = Route("POST", "/v1/sync/initialize")
INITIALIZED = Route("POST", "/v1/sync/initialized")
RECOVER = Route("POST", "/v1/sync/recover")
UPLOAD = Route("PUT", "/v1/sync/uploads/{lo}-{hi}")
UPLOADED = Route("GET", "/v1/sync/uploads/{lo}-{hi}")
DOWNLOAD = Route("POST", "/v1/sync/download")
ACK = Route("POST", "/v1/sync/download/ack")
DONE = Route("POST", "/v1/sync/done")
ENROLL = Route("POST", "/v1/enroll")
ROUTES = {"healthz": HEALTHZ, "hello": HELLO, "snapshot": SNAPSHOT, "snapshot_file": SNAPSHOT_FILE,
          "initialize": INITIALIZE, "initialized": INITIALIZED, "recover": RECOVER, "upload": UPLOAD, "uploaded": UPLOADED,
          "download": DOWNLOAD, "ack": ACK, "done": DONE, "enroll": ENROLL}

Generation = int


class _Message(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)


def _generation(description: str) -> Any:
    return Field(ge=0, le=MAX_GENERATION, description=description)


class Hello(_Message):
    """Reply to ``hello`` (and to ``initialize``, ``recover``): who the device is at the publisher."""

    protocol: int = Field(description="the server's protocol version")
    server_version: str
    subscription: str
    publication: str
    pubid: str
    publisher: str = Field(description="the publisher's name")
    publisher_nickname: int
    publisher_replica_id: str
    status: Literal["active", "created"] = Field(description="created: the device initializes a file first")
    subid: str
    replica_id: str = Field(description="the device's replica identity at the publisher")
    nickname: int = Field(description="the device's replica nickname")
    priority: float | None
    subscriber_type: int
    host_name: str | None
    login: str | None
    partition_id: int | None
    recgen: int | None = Field(description="the device's changes the publisher has, up to this generation")
    sentgen: int | None = Field(description="the publisher's changes the device acknowledged, up to this generation")
    schema_version: int
    schema_changes: list[dict[str, Any]] = Field(description="the publication's schema changes, to replay")
    rowguids_added: list[str] = Field(default_factory=list, description="artids of the articles whose rowguid column "
                                      "publishing added: the device keeps their rowguids beside its tables")
    failed: list[tuple[int, str]] = Field(description="[article nickname, rowguid] of the device's changes that "
                                                      "failed at the publisher: sent again")
    recoveries: list[tuple[int, int, int]] = Field(default_factory=list, description="[old nickname, sentgen, "
                                                   "recgen] of the device's files recovered to this nickname")
    max_request_bytes: int = Field(default=64 << 20, description="the largest request body, and the most an "
                                                                 "upload may unpack to")
    validate_: bool = Field(default=False, alias="validate", description="send the file's digests with done")
    file: Literal["holder", "free", "other", "copy"] = Field(default="holder", description=(
        "the requesting file's standing: it holds the subscription; no file holds it (this one may initialize it); "
        "another file holds it (this new one takes it over only with Sparksync-Take-Over); an older copy of the "
        "holder that asked to recover it"))

    model_config = ConfigDict(extra="ignore", frozen=True, strict=False, populate_by_name=True)


class InitializedRequest(_Message):
    """``initialized``: the device committed its initialization from snapshot ``snapshot_id``."""

    snapshot_id: str = Field(max_length=200)
    baseline: Generation = _generation("the device's generations up to this one are the snapshot's")
    snapshot_generation: Generation = _generation("the publisher's generation the snapshot holds")


class RecoverRequest(_Message):
    """``recover``: the device's file is an older copy of itself (docs/web-sync.md)."""

    nickname: int = Field(ge=0, lt=1 << 31, description="the file's replica nickname")
    sentgen: Generation = _generation("what the file uploaded, by its own record")
    recgen: Generation = _generation("what the file received, by its own record")


class DownloadRequest(_Message):
    """``download``: the publisher's changes for the device after its watermark."""

    after: Generation = _generation("the device's watermark: the publisher's changes it has")
    batch: int = Field(default=100, ge=1, le=10_000, description="generations per batch")
    failed: list[tuple[int, str]] = Field(default_factory=list, max_length=MAX_RETRIES,
                                          description="[article nickname, rowguid] of the publisher's changes that "
                                                      "failed at the device: read again for it")
    keyset: bool = Field(default=False, description="a generation bigger than a batch is taken in parts cut by key")

    @field_validator("failed", mode="before")
    @classmethod
    def _failed(cls, v: Any) -> Any:
        """Anything but a list of at most ``MAX_RETRIES`` [article nickname, rowguid] pairs is refused whole,
        with one message saying what the field holds."""
        shape = f"a list of at most {MAX_RETRIES} [article nickname, rowguid] pairs"
        if not isinstance(v, list) or len(v) > MAX_RETRIES:
            raise ValueError(shape)
        for pair in v:
            if not (isinstance(pair, (list, tuple)) and len(pair) == 2 and type(pair[0]) is int
                    and isinstance(pair[1], str) and 0 < pair[0] < 1 << 31 and len(pair[1]) <= 64):
                raise ValueError(shape)
            try:
                uuid.UUID(pair[1])
            except ValueError:
                raise ValueError(shape) from None
        return [(nick, guid) for nick, guid in v]


class EnrollRequest(_Message):
    """``enroll`` (no token: the group's enrollment secret, or a JWT of the identity provider the group trusts, is
    the request's credential, one of them): a device joins the device group, once
    (``merge/session/remote/enrollment.py``)."""

    secret: str | None = Field(default=None, max_length=200, description="the group's enrollment secret (sse_...), "
                               "as the operator printed it")
    jwt: str | None = Field(default=None, max_length=8192, description="or a JWT of the application's identity "
                            "provider, which a device group trusts")
    file_id: str = Field(min_length=8, max_length=64, pattern=r"^[0-9A-Za-z_-]+$",
                         description="the identity of the enrolling file (the same file enrolling again is the same "
                                     "device)")
    described: str | None = Field(default=None, max_length=500, description="where the file lives (host:path), "
                                                                             "for the operator")


class EnrollReply(_Message):
    """Reply to ``enroll``: the device's own web subscription and credential, which it keeps in its file."""

    subscription: str
    group: str
    token: str = Field(description="the device's token: every later request's credential")
    again: bool = Field(description="the same file had enrolled with this secret: the same device, a new token")


class AckRequest(_Message):
    """``download/ack``: the device applied the download up to generation ``hi``."""

    hi: Generation = _generation("the last generation applied")


class Counts(_Message):
    """What one direction of a sync did at its destination."""

    inserts: int = Field(default=0, ge=0, lt=1 << 40)
    updates: int = Field(default=0, ge=0, lt=1 << 40)
    deletes: int = Field(default=0, ge=0, lt=1 << 40)
    conflicts: int = Field(default=0, ge=0, lt=1 << 40)
    retries: int = Field(default=0, ge=0, lt=1 << 40)
    failed: int = Field(default=0, ge=0, lt=1 << 40)


class Digests(_Message):
    """What the device holds, when ``hello`` asked: each article's [rows, checksum] (``merge/maintenance/digest``),
    or only that changes are pending at the device, or why it could not compute them (``error``: a failed
    validation, recorded by the door)."""

    pending: bool
    articles: dict[str, tuple[int, str]] = Field(default_factory=dict, max_length=10_000)
    error: str | None = Field(default=None, max_length=2_000)

    @field_validator("articles")
    @classmethod
    def _articles(cls, v: dict[str, tuple[int, str]]) -> dict[str, tuple[int, str]]:
        for rows, checksum in v.values():
            if rows < 0 or not (checksum.isdigit() and len(checksum) <= 20):
                raise ValueError("each article's [rows, checksum] is a count and a decimal checksum")
        return v


class DoneRequest(_Message):
    """``done``: the device's sync ended (what it says of itself: the door keeps what it saw, ``ledger.py``)."""

    seconds: float = Field(ge=0, lt=86_400 * 365)
    errors: list[str] = Field(default_factory=list, max_length=100)
    upload: Counts = Field(default_factory=Counts)
    download: Counts = Field(default_factory=Counts)
    validation: Digests | None = None

    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)

    @field_validator("seconds", mode="before")
    @classmethod
    def _seconds(cls, v: Any) -> Any:
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise ValueError("a duration in seconds")
        return float(v)


class Verdict(_Message):
    result: Literal["passed", "failed", "inconclusive"]
    message: str = ""


class DoneReply(_Message):
    recorded: bool
    validation: Verdict | None = None


class AckReply(_Message):
    sentgen: int


class InitializedReply(_Message):
    status: Literal["active"]


class UploadConflictReply(_Message):
    """One of the device's uploaded changes that the publisher did not simply apply, and its fate."""

    article: str
    rowguid: str
    type: int = Field(description="the conflict type (1-10, as SQL Server's; 0: not a conflict, a replaced change)")
    reason: str
    winner: str = Field(description="the replica whose version won (empty: a failed or refused change)")
    fate: Literal["won", "lost", "failed", "refused", "replaced"] | None = Field(default=None, description=(
        "won or lost a conflict; failed: the publisher's database refused the row, it is sent again at every sync; "
        "refused: a change the publisher does not take from this device; replaced (protocol 4): a business logic "
        "handler at the publisher applied a row of its own instead (type 0, the reason names it; the row comes "
        "back with the download)"))
    conflict_id: str | None = Field(default=None, description="the conflict's id at the publisher")
    winner_row: str | None = Field(default=None, description="lost: the winning row as the publisher holds it "
                                   "(JSON, as change rows carry it); null when the winner is the row's deletion")
    winner_lineage: str | None = Field(default=None, max_length=1 << 16, description="lost: the winning version's "
                                       "lineage (JSON): the device keeps its own version only once it has this one")
    columns: list[str] = Field(default_factory=list, description="column tracking: the columns that conflicted")
    attempts: int | None = Field(default=None, description="failed: how many times the change has failed")


class UploadReply(_Message):
    """Reply to an upload of generations (lo, hi]: what the publisher applied (the same upload again gets the
    same reply)."""

    lo: int
    hi: int
    status: str
    message: str
    refused: int = Field(description="changes to rows not in the device's partition, refused")
    refused_at: list[tuple[int, str]] = Field(default_factory=list, description="[position in the upload, reason] of "
                                              "each of them")
    stats: dict[str, dict[str, int | float]] = Field(description="per article: inserts, updates, deletes, conflicts, "
                                                           "retries, failed, skipped, removed, seconds")
    conflicts: list[UploadConflictReply]

    model_config = ConfigDict(extra="ignore", frozen=True, strict=False)


class UploadLookup(_Message):
    """Reply to ``uploaded``: the reply the publisher gave to an upload of these generations, which the device did
    not receive (its connection was cut, or it was stopped); ``found`` false: the publisher applied no such upload."""

    found: bool
    reply: UploadReply | None = None


class Problem(_Message):
    """Every refusal and failure (application/problem+json)."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str | None = None
    expected_lo: int | None = Field(default=None, description="409 on an upload: the generation to upload from")


REQUESTS: dict[str, type[_Message] | None] = {
    "hello": None, "snapshot": None, "snapshot_file": None, "initialize": None, "initialized": InitializedRequest,
    "recover": RecoverRequest, "upload": None, "uploaded": None, "download": DownloadRequest, "ack": AckRequest,
    "done": DoneRequest, "enroll": EnrollRequest}
REPLIES: dict[str, type[_Message] | None] = {
    "hello": Hello, "snapshot": None, "snapshot_file": None, "initialize": Hello, "initialized": InitializedReply,
    "recover": Hello, "upload": UploadReply, "uploaded": UploadLookup, "download": None, "ack": AckReply, "done": DoneReply,
    "enroll": EnrollReply}


M = TypeVar("M", bound=BaseModel)


def parse(model: type[M], body: bytes | str, what: str) -> M:
    """``body`` (JSON text) as ``model``, or ``ProtocolError`` naming the first field that is wrong."""
    try:
        return model.model_validate_json(body)
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(x) for x in err["loc"]) or "the body"
        said = str(err["ctx"]["error"]) if err["type"] == "value_error" else err["msg"]    # a validator's own words
        raise ProtocolError(f"{what}: {field}: {said}", obj=field) from None


# -- the protocol section of docs/web-sync.md -----------------------------------------------------------------
BEGIN = "<!-- BEGIN GENERATED: python -m sparksync.web.protocol -->"
END = "<!-- END GENERATED -->"


def render_protocol() -> str:
    """The routes and the models as markdown: what the generated block of docs/web-sync.md holds."""
    lines = [f"Protocol version {PROTOCOL} (header `{PROTOCOL_HEADER}`; a door serves devices that speak "
             f"{OLDEST_PROTOCOL} and newer, each told only what its version knows). Every request but `/healthz` "
             "and `/v1/enroll` carries `Authorization: Bearer <token>` and says which device file it comes from: "
             "`Sparksync-File` (the file's "
             "identity), `Sparksync-Epoch` (its current epoch, once it has one), `Sparksync-File-Where` (host:path, "
             "for the operator), `Sparksync-Bound: 1` (it holds a subscription's data); a sync's first `hello`, "
             "`initialized` and a `recover` on purpose add `Sparksync-Next-Epoch` (the epoch proposed), and `hello` "
             "of a file that holds a subscription's data `Sparksync-Unsent` (how many of its own changes the "
             "publisher has not received: a refused file's message and `status` say it); "
             "`Sparksync-Take-Over: reinitialize | recover` takes the subscription over on purpose "
             "(`merge/session/remote/holders.py`).", "", "| route | request | reply |", "|---|---|---|"]
    for name, route in ROUTES.items():
        req, rep = REQUESTS.get(name), REPLIES.get(name)
        body = {"upload": "an Arrow frame (`merge/session/remote/frames.py`)"}.get(name, f"`{req.__name__}`" if req else "-")
        reply = {"download": "Arrow frames", "snapshot": "the partition's manifest (JSON)",
                 "snapshot_file": "a Parquet file (Range requests resume)", "healthz": "`{status, version, protocol}`"
                 }.get(name, f"`{rep.__name__}`" if rep else "-")
        lines.append(f"| `{route.method} {route.path}` | {body} | {reply} |")
    models: list[type[BaseModel]] = [EnrollRequest, EnrollReply, InitializedRequest, RecoverRequest, DownloadRequest,
                                     AckRequest, DoneRequest,
                                     Counts, Digests, Hello, UploadReply, UploadConflictReply, UploadLookup, DoneReply,
                                     Verdict, AckReply, InitializedReply, Problem]
    for model in models:
        doc = " ".join((model.__doc__ or "").split()).replace("``", "`")
        lines += ["", f"**`{model.__name__}`**: {doc}".rstrip(": "), ""]
        for fname, f in model.model_fields.items():
            key = f.alias or fname
            kind = str(f.annotation).replace("typing.", "").replace("sparksync.web.protocol.", "") \
                .replace("<class '", "").replace("'>", "")
            optional = "" if f.is_required() else " (optional)"
            lines.append(f"- `{key}`: {kind}{optional}" + (f" — {f.description}" if f.description else ""))
    return "\n".join(lines)


def with_protocol(doc: str) -> str:
    start, end = doc.index(BEGIN) + len(BEGIN), doc.index(END)
    return doc[:start] + "\n" + render_protocol() + "\n" + doc[end:]


if __name__ == "__main__":          # pragma: no cover - a maintenance command
    from pathlib import Path

    from sparksync.web import protocol  # the models by their own module's name, not __main__'s

    path = Path(__file__).resolve().parents[3] / "docs" / "web-sync.md"
    path.write_text(protocol.with_protocol(path.read_text(encoding="utf-8")), encoding="utf-8")
