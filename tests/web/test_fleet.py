"""A fleet of devices that enroll themselves into a device group, on both publisher dialects: ``sparksync serve`` as a
process, ``enroll-token``, ``sync --enroll`` and ``devices`` as the commands run them, device files as SQLite files.
One topology per dialect, built once; the checks run in order on it.

Store is filtered by ``region = HOST_NAME()``; Sale joins Store; Item is not filtered. The group Tills has no
subscription in the configuration: every device in it enrolled."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from prometheus_client.parser import text_string_to_metric_families

from sparksync.dialects import connect
from sparksync.merge.session.remote.enrollment import LOCKOUT
from sparksync.metadata import store
from tests.support.clients import shell
from tests.support.databases import databases
from tests.support.web import EXE, WebWorld, cli, serving

pytestmark = pytest.mark.spark

ISSUER = "https://id.example.test"


class Keys:
    """The application's identity provider, as the test plays it: an RSA, an EC (P-256) and an Ed25519 key, their
    public halves in a JWKS document the door reads."""

    def __init__(self, path):
        self.path = path
        self.private = {"RS256": rsa.generate_private_key(public_exponent=65537, key_size=2048),
                        "ES256": ec.generate_private_key(ec.SECP256R1()), "EdDSA": ed25519.Ed25519PrivateKey.generate()}
        self.kids = {alg: f"k-{alg.lower()}" for alg in self.private}
        self.publish()

    def publish(self) -> None:
        algorithms = {"RS256": jwt.algorithms.RSAAlgorithm, "ES256": jwt.algorithms.ECAlgorithm,
                      "EdDSA": jwt.algorithms.OKPAlgorithm}
        keys = [{**json.loads(algorithms[a].to_jwk(k.public_key())), "kid": self.kids[a], "alg": a}
                for a, k in self.private.items()]
        self.path.write_text(json.dumps({"keys": keys}))

    def token(self, alg: str = "RS256", key=None, kid: str | None = None, **claims) -> str:
        now = int(time.time())
        body = {"iss": ISSUER, "aud": "sparksync-vans", "sub": "alice", "device_id": "van-1", "store": "north",
                "iat": now, "exp": now + 600, **claims}
        return jwt.encode({k: v for k, v in body.items() if v is not None}, key or self.private[alg], algorithm=alg,
                          headers={"kid": kid or self.kids[alg]})


def _publisher(url: str) -> None:
    q = "?" if url.startswith("sqlite") else "%s"
    with connect(url) as r:
        r.execute('CREATE TABLE "Item" ("id" integer PRIMARY KEY, "v" text)')
        r.execute('CREATE TABLE "Store" ("id" integer PRIMARY KEY, "region" text NOT NULL, "name" varchar(20))')
        r.execute('CREATE TABLE "Sale" ("id" integer PRIMARY KEY, "store_id" integer NOT NULL REFERENCES "Store"("id"), '
                  '"qty" integer)')
        r.executemany(f'INSERT INTO "Item" VALUES ({q}, {q})', [(i, f"v{i}") for i in range(1, 11)])
        r.executemany(f'INSERT INTO "Store" VALUES ({q}, {q}, {q})',
                      [(i, ("north", "south", "east")[i % 3], f"store {i}") for i in range(1, 10)])
        r.executemany(f'INSERT INTO "Sale" VALUES ({q}, {q}, {q})', [(i, 1 + i % 9, i) for i in range(1, 28)])


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def fleet(request, spark, tmp_path_factory):
    kind = request.param
    tmp = tmp_path_factory.mktemp(f"fleet-{kind}")
    with databases(tmp, lambda: request.getfixturevalue("pg_admin_url")) as dbs:
        pub = dbs.url(kind, "fleetpub")
        _publisher(pub)
        data = {
            "publisher": {"name": "HQ", "database": pub, "snapshot_dir": str(tmp / "snap")},
            "publications": [{"name": "Shop", "articles": [
                {"table": "Item"}, {"table": "Store", "filter": "region = HOST_NAME()"},
                {"table": "Sale", "join_filters": [{"parent": "Store", "clause": "Sale.store_id = Store.id",
                                                    "unique_key": True}]}]}],
            "server": {"enrollments_per_minute": 60},
            "device_groups": [
                {"name": "Tills", "publication": "Shop", "sync_interval": "1h"},
                {"name": "Vans", "publication": "Shop", "host_name": "{store}",
                 "jwt": {"keys": "issuer.jwks", "issuer": ISSUER, "audience": "sparksync-vans"}}]}
        keys = Keys(tmp / "issuer.jwks")
        w = WebWorld(tmp, data, spark)
        w.keys = keys
        w.kind = kind
        w.secrets = {}
        with serving(w):
            yield w
        log = w.server.log.read_text(encoding="utf-8", errors="replace")
        assert not any(s.split("_")[-1] in log for s in w.secrets.values()), "an enrollment secret is in the log"


def _ok(p: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert p.returncode == 0, f"exit {p.returncode}: {p.stdout}\n{p.stderr}"
    assert "Traceback" not in p.stderr + p.stdout
    return p


def _secret(w, label: str, *args: str) -> str:
    p = _ok(cli(["enroll-token", "-c", str(w.config), "-g", "Tills", *args]))
    secret = p.stdout.strip()
    assert secret.startswith("sse_") and secret.split("_")[-1] not in p.stderr
    w.secrets[label] = secret
    return secret


def _device(w, name: str) -> str:
    return str(w.folder / f"{name}.db")


def _sync(w, name: str, *args: str) -> subprocess.CompletedProcess:
    return cli(["sync", "--server", w.server.url, "--database", _device(w, name), *args])


def _enrolled_as(w, name: str) -> str:
    with connect(f"sqlite:///{_device(w, name)}") as d:
        return str(store.select_rows(d, "MSweb_credential", {"id": 1})[0]["subscription"])


def _regions(w, name: str) -> set[str]:
    with connect(f"sqlite:///{_device(w, name)}") as d:
        stores = {r[0] for r in d.query('SELECT "region" FROM "Store"')}
        sold = {r[0] for r in d.query('SELECT s."region" FROM "Sale" x JOIN "Store" s ON s."id" = x."store_id"')}
        assert d.scalar('SELECT count(*) FROM "Item"') == 10
    return stores | sold


def _devices(w, *args: str) -> dict:
    return json.loads(_ok(cli(["devices", "-c", str(w.config), "--json", *args])).stdout)


def _status(w) -> dict:
    p = cli(["status", "-c", str(w.config), "--json"])
    assert "Traceback" not in p.stderr, p.stderr
    return json.loads(p.stdout)


def test_devices_enroll_with_a_group_secret_and_sync_their_partition_only(fleet):
    w = fleet
    north = _secret(w, "north", "--host-name", "north", "--uses", "2")
    south = _secret(w, "south", "--host-name", "south", "--uses", "1", "--expires", "1d")
    _ok(_sync(w, "n1", "--enroll", north))
    _ok(_sync(w, "n2", "--enroll", north))
    _ok(_sync(w, "s1", "--enroll", south))
    names = {d: _enrolled_as(w, d) for d in ("n1", "n2", "s1")}
    assert len(set(names.values())) == 3 and all(n.startswith("Tills-") for n in names.values())
    assert _regions(w, "n1") == _regions(w, "n2") == {"north"} and _regions(w, "s1") == {"south"}
    # later syncs need no secret and no token: the file keeps its credential
    shell(f"sqlite:///{_device(w, 'n1')}", "INSERT INTO \"Sale\" (\"id\", \"store_id\", \"qty\") VALUES (100, 3, 7);")
    _ok(_sync(w, "n1"))
    with connect(w.pub_url) as pub:
        assert pub.scalar('SELECT "qty" FROM "Sale" WHERE "id" = 100') == 7
    w.names = names


def test_a_used_up_expired_or_revoked_secret_is_refused_with_one_message(fleet):
    w = fleet
    used_up = _sync(w, "n3", "--enroll", w.secrets["north"])
    assert used_up.returncode != 0 and "enrollment" in used_up.stderr and "Traceback" not in used_up.stderr
    late = _secret(w, "late", "--host-name", "east", "--uses", "5")
    with connect(w.pub_url) as pub, pub.transaction():      # its day has passed
        sid = late.split("_")[1]
        store.update_rows(pub, "MSweb_enrollments", {"expires_at": store.utcnow().replace(year=2020)}, {"secret_id": sid})
    expired = _sync(w, "e1", "--enroll", late)
    revoked_secret = _secret(w, "revoked", "--host-name", "east")
    _ok(cli(["enroll-token", "-c", str(w.config), "--revoke", revoked_secret.split("_")[1]]))
    revoked = _sync(w, "e2", "--enroll", revoked_secret)
    messages = {p.stderr.strip().splitlines()[-1] for p in (used_up, expired, revoked)}
    assert len(messages) == 1 and all(p.returncode != 0 for p in (expired, revoked)), messages
    listed = json.loads(_ok(cli(["enroll-token", "-c", str(w.config), "--list", "--json"])).stdout)
    states = {x["secret_id"]: x["state"] for x in listed}
    assert states[w.secrets["north"].split("_")[1]] == "used up" and states[sid] == "expired"
    assert states[revoked_secret.split("_")[1]] == "revoked"
    assert not any(s.split("_")[-1] in json.dumps(listed) for s in w.secrets.values())


def test_the_same_file_enrolling_again_is_the_same_device_a_wiped_one_a_new_one(fleet):
    w = fleet
    # killed after the door answered, before the file kept its credential: the same file enrolling again is the
    # same device (no second use of a single-use secret)
    once = _secret(w, "once", "--host-name", "east", "--uses", "1")
    armed = w.folder / "failpoints"
    armed.write_text("device.enrolled !kill\n")
    argv = [EXE, "sync", "--server", w.server.url, "--database", _device(w, "k1"), "--enroll", once]
    killed = subprocess.run(argv, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "SPARKSYNC_FAILPOINTS": str(armed)})
    assert killed.returncode == -9, killed.stderr
    with connect(w.pub_url) as pub:
        made = [r["subscription"] for r in store.select_rows(pub, "MSweb_devices", {"secret_id": once.split("_")[1]})]
    assert len(made) == 1
    _ok(_sync(w, "k1", "--enroll", once))
    assert _enrolled_as(w, "k1") == made[0] and _regions(w, "k1") == {"east"}
    w.names["k1"] = made[0]
    # a wiped device: a new file, a new subscription with its own replica identity
    again = _secret(w, "again", "--host-name", "north", "--uses", "1")
    (w.folder / "n1.db").unlink()
    _ok(_sync(w, "n1", "--enroll", again))
    assert _enrolled_as(w, "n1") != w.names["n1"] and _regions(w, "n1") == {"north"}
    with connect(w.pub_url) as pub:
        nicks = {r["name"]: r["replnickname"] for r in store.select_rows(pub, "sysmergesubscriptions")}
    assert nicks[_enrolled_as(w, "n1")] != nicks[w.names["n1"]]
    w.names["wiped"], w.names["n1"] = w.names["n1"], _enrolled_as(w, "n1")


def test_a_device_enrolls_with_its_applications_jwt_and_every_hostile_token_gets_one_401(fleet):
    w = fleet
    for device, alg, region in (("v1", "RS256", "north"), ("v2", "ES256", "south"), ("v3", "EdDSA", "east")):
        _ok(_sync(w, device, "--enroll", w.keys.token(alg, device_id=device, store=region)))
        assert _regions(w, device) == {region} and _enrolled_as(w, device).startswith("Vans-")
    _ok(_sync(w, "v1"))                                       # later: its own credential, no token
    now = int(time.time())
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public_pem = w.keys.private["RS256"].public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    hostile = {
        "forged": w.keys.token(key=stranger),
        "expired": w.keys.token(exp=now - 3600, iat=now - 7200),
        "not yet": w.keys.token(nbf=now + 3600),
        "wrong audience": w.keys.token(aud="someone-else"),
        "wrong issuer": w.keys.token(iss="https://evil.example"),
        "alg none": jwt.encode({"iss": ISSUER, "aud": "sparksync-vans", "sub": "alice", "device_id": "x",
                                "exp": now + 600}, None, algorithm="none"),
        "public key as an HMAC secret": _hs256(public_pem, now),
        "another kid's key": w.keys.token("ES256", kid=w.keys.kids["RS256"]),
        "no sub": w.keys.token(sub=None),
        "no exp": w.keys.token(exp=None),
        "garbage": "a.b.c",
    }
    with httpx.Client(base_url=w.server.url) as c:
        answers = {name: c.post("/v1/enroll", json={"jwt": t, "file_id": "h" * 32}) for name, t in hostile.items()}
        assert {n: r.status_code for n, r in answers.items()} == {n: 401 for n in hostile}
        assert len({r.text for r in answers.values()}) == 1, {n: r.text for n, r in answers.items()}
        # the same token from the same file (its first answer lost): the same device, a new credential
        token = w.keys.token(device_id="van-9", store="south")
        first = c.post("/v1/enroll", json={"jwt": token, "file_id": "a" * 32}).json()
        again = c.post("/v1/enroll", json={"jwt": token, "file_id": "a" * 32}).json()
        assert again["subscription"] == first["subscription"] and again["again"] and again["token"] != first["token"]
        # a claim that names a partition the publisher does not have is refused, naming it; one missing, too
        west = c.post("/v1/enroll", json={"jwt": w.keys.token(store="west"), "file_id": "b" * 32})
        assert west.status_code == 403 and "west" in west.json()["detail"]
        nostore = c.post("/v1/enroll", json={"jwt": w.keys.token(store=None), "file_id": "b" * 32})
        assert nostore.status_code == 403 and "store" in nostore.json()["detail"]
        both = c.post("/v1/enroll", json={"jwt": token, "secret": w.secrets["north"], "file_id": "b" * 32})
        assert both.status_code == 400
    # the issuer's keys rotated: read again when the file changes, no restart
    w.keys.private["RS256"] = stranger
    w.keys.publish()
    _ok(_sync(w, "v4", "--enroll", w.keys.token(device_id="v4")))
    assert _regions(w, "v4") == {"north"}
    with connect(w.pub_url) as pub:
        vans = {r["subscription"]: r["secret_id"] for r in store.select_rows(pub, "MSweb_devices", {"group_name": "Vans"})}
    assert sorted(vans.values()) == sorted(["jwt:alice:v1", "jwt:alice:v2", "jwt:alice:v3", "jwt:alice:van-9",
                                            "jwt:alice:v4"])


def _hs256(secret: bytes, now: int) -> str:
    """A token signed with HMAC, the RSA public key as its secret (what a verifier confused by 'alg' would accept),
    built by hand: PyJWT refuses to make one."""
    import base64
    import hashlib
    import hmac

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    head = b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": "k-rs256"}).encode())
    body = b64(json.dumps({"iss": ISSUER, "aud": "sparksync-vans", "sub": "alice", "device_id": "x",
                           "store": "north", "exp": now + 600}).encode())
    signature = hmac.new(secret, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64(signature)}"


def test_a_wrong_secret_is_counted_and_locks_its_id(fleet):
    w = fleet
    good = _secret(w, "locked", "--host-name", "south", "--uses", "3")
    sid = good.split("_")[1]
    forged = f"sse_{sid}_{'0' * 64}"
    with httpx.Client(base_url=w.server.url) as c:
        for _ in range(LOCKOUT):
            r = c.post("/v1/enroll", json={"secret": forged, "file_id": "f" * 32})
            assert r.status_code == 401 and "unknown, used up" in r.json()["detail"]
        r = c.post("/v1/enroll", json={"secret": good, "file_id": "e" * 32})
        assert r.status_code == 401                       # locked: even the right secret, for a while
        for hostile in ({"secret": good}, {"secret": good, "file_id": "x'; DROP TABLE"}, [1, 2], {"secret": 7}):
            assert c.post("/v1/enroll", json=hostile).status_code == 400
        assert c.post("/v1/enroll", content=b"[" * 3_000_000).status_code == 413
        # one source address: at most enrollments_per_minute requests a minute (60 here), then 429 with Retry-After
        seen = []
        for _ in range(200):
            r = c.post("/v1/enroll", json={"secret": forged, "file_id": "f" * 32})
            seen.append(r.status_code)
            if r.status_code == 429:
                break
        assert seen[-1] == 429 and 0 < int(r.headers["retry-after"]) <= 61 and set(seen[:-1]) <= {401}, seen
    assert "locked" in w.server.log.read_text()
    history = json.loads(_ok(cli(["history", "-c", str(w.config), "--json"])).stdout)
    locked = [r for r in history["runs"] if r["agent"] == "door" and sid in (r["message"] or "")]
    assert locked and locked[0]["status"] == "failed" and "wrong secrets" in locked[0]["message"], history["runs"][:3]


def test_status_and_devices_agree_and_a_revoked_device_is_refused_then_dropped(fleet):
    w = fleet
    listed = _devices(w)
    by_name = {d["name"]: d for d in listed["devices"]}
    assert {w.names["n1"], w.names["n2"], w.names["s1"], w.names["wiped"]} <= set(by_name)
    st = _status(w)
    web = {e["name"]: e for e in st["subscriptions"] if e.get("group") == "Tills"}
    for name in (w.names["n1"], w.names["n2"], w.names["s1"]):
        assert web[name]["status"] == by_name[name]["status"] == "active"
        assert by_name[name]["state"] == "idle" and web[name]["sync_interval_s"] == 3600
    assert web[w.names["wiped"]]["host_name"] == "north"
    assert {d["name"] for d in _devices(w, "--state", "idle")["devices"]} >= {w.names["n1"], w.names["s1"]}
    # the monitor's /api/devices says the same, paged, and finds one device by its name
    monitor = f"http://{w.data['server']['monitor']}"
    with httpx.Client(base_url=monitor, timeout=60) as c:
        got = c.get("/api/devices", params={"page_size": 2}).json()
        assert got["total"] == listed["total"] and len(got["devices"]) == 2
        every = c.get("/api/devices", params={"page_size": 1000}).json()
        assert {d["name"]: d["state"] for d in every["devices"]} == {n: d["state"] for n, d in by_name.items()}
        one = c.get("/api/devices", params={"q": w.names["s1"][-8:]}).json()
        assert [d["name"] for d in one["devices"]] == [w.names["s1"]]
        for bad in ({"page": "0"}, {"page_size": "5000"}, {"state": "bogus"}, {"group": "Nope"}):
            r = c.get("/api/devices", params=bad)
            assert r.status_code == 400 and "Traceback" not in r.text, (bad, r.text)
        # the page and /metrics count them per group and partition (never a row or a series each), as listed
        per_partition: dict[tuple[str, str], dict[str, int]] = {}
        for d in every["devices"]:
            counted = per_partition.setdefault((d["group"], d["host_name"]), {})
            counted[d["state"]] = counted.get(d["state"], 0) + 1
        page = c.get("/").text
        shown = {(g, p): int(n) for g, p, n in re.findall(
            r'<tr data-group="([^"]+)" data-partition="([^"]+)" data-state="[^"]+" data-devices="(\d+)">', page)}
        assert shown == {k: sum(v.values()) for k, v in per_partition.items()}, (shown, per_partition)
        tills = sum(sum(v.values()) for (g, _), v in per_partition.items() if g == "Tills")
        assert re.search(rf'data-group="Tills" data-state="[^"]+" data-devices="{tills}"', page), page
        assert f'data-device="{w.names["n1"]}"' not in page
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                   for f in text_string_to_metric_families(c.get("/metrics").text) for s in f.samples}
        assert not [k for k in samples if dict(k[1]).get("subscription") in by_name]
        for (group, partition), states in per_partition.items():
            for state in ("idle", "offline", "error"):
                key = ("sparksync_devices", tuple(sorted({"publication": "Shop", "group": group, "partition": partition,
                                                          "status": state}.items())))
                assert samples[key] == states.get(state, 0), (key, states)
        # a search finds one device, with its last syncs
        found = c.get("/", params={"q": w.names["s1"][-8:]}).text
        row = re.search(rf'<tr data-device="{w.names["s1"]}" data-state="idle">.*?</tr>', found, re.S)
        assert row is not None and "south" in row.group(0), found
        runs = re.search(rf'data-runs-of="{w.names["s1"]}">.*?</table>', found, re.S)
        assert runs is not None and runs.group(0).count('data-status="succeeded"') >= 1, found
        assert c.get("/", params={"q": "x" * 300}).status_code == 400
    # revoked: refused at its next request
    _ok(cli(["devices", "-c", str(w.config), "--revoke", w.names["s1"]]))
    refused = _sync(w, "s1")
    assert refused.returncode != 0 and "refused" in refused.stderr
    assert {d["name"] for d in _devices(w, "--state", "revoked")["devices"]} == {w.names["s1"]}
    # removed, and both dropped at the next cleanup
    _ok(cli(["devices", "-c", str(w.config), "--remove", w.names["wiped"]]))
    done = json.loads(_ok(cli(["cleanup", "-c", str(w.config), "--json"])).stdout)
    assert set(done["devices_dropped"]) == {w.names["s1"], w.names["wiped"]}
    with connect(w.pub_url) as pub:
        regs = {r["name"] for r in store.select_rows(pub, "sysmergesubscriptions")}
    assert w.names["s1"] not in regs and w.names["wiped"] not in regs and w.names["n1"] in regs
    assert set(by_name) - {d["name"] for d in _devices(w)["devices"]} == {w.names["s1"], w.names["wiped"]}
    _ok(_sync(w, "n2"))                                    # the others sync on
