"""Encrypted SQLite files (SQLCipher: the ``cipher`` extra, ``pip install 'sparksync[cipher]'``): a device's file
whose every page, write-ahead log included, is encrypted with a key its application gives.

The key is given once per file (``use_key``): a passphrase, or a ``KeySource`` that returns one when asked
(``from_env``, ``from_file``: readable by its owner only, or the application's own callback, a keyring's for
instance). Every connection sparksync opens to that file then asks for it (``SQLiteDriver.connect``); nothing of it
is written anywhere. A file opened without its key, or with another, is one clear error (``EncryptionKeyError``),
never "the file is damaged".

The passphrase is stretched as SQLCipher 4 does (PBKDF2-HMAC-SHA512, 256000 rounds, the file's own salt, which
SQLCipher reads from its first 16 bytes), once per process and file, and the connection is given the derived key
with that salt (SQLCipher's "raw key with explicit salt"): the ``sqlcipher`` shell opens the same file with the
passphrase, and the many connections of a sync do not each pay the stretching (a tenth of a second each)."""

from __future__ import annotations

import hashlib
import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sparksync.errors import ConfigurationError, EncryptionKeyError

KeySource = Callable[[], str | bytes]
"""Returns the passphrase of an encrypted file when asked (each time a file is first opened in a process)."""

KDF_ROUNDS = 256_000        # SQLCipher 4's defaults: PBKDF2-HMAC-SHA512, 32-byte key, 16-byte salt
SALT_BYTES = 16

_keys: dict[str, KeySource] = {}
_derived: dict[str, bytes] = {}                    # file -> the stretched key and its salt, this process only
_fresh: dict[str, bytes] = {}                      # the salt of a file not written yet (one for all its connections)
_lock = threading.Lock()


def from_env(name: str) -> KeySource:
    """The passphrase in the environment variable ``name`` (read when the file is opened)."""
    def read() -> str:
        value = os.environ.get(name)
        if not value:
            raise EncryptionKeyError(f"the environment variable {name} that holds the device's key is not set",
                                     obj=name)
        return value
    return read


def from_file(path: str | Path) -> KeySource:
    """The passphrase in the file ``path`` (its first line), which only its owner may read: a key file others can
    read is refused, as ssh refuses such a private key."""
    where = Path(path)

    def read() -> str:
        try:
            mode = where.stat().st_mode
            if mode & (stat.S_IRWXG | stat.S_IRWXO):
                raise EncryptionKeyError(f"key file {where} can be read by others (mode {stat.filemode(mode)}): "
                                         f"make it its owner's only ('chmod 600 {where}')", obj=str(where))
            text = where.read_text(encoding="utf-8").splitlines()
        except OSError as e:
            raise EncryptionKeyError(f"cannot read key file {where}: {e.strerror or e}", obj=str(where)) from None
        if not text or not text[0].strip():
            raise EncryptionKeyError(f"key file {where} is empty", obj=str(where))
        return text[0].strip()
    return read


def use_key(path: str | Path, key: str | bytes | KeySource) -> None:
    """From now on, in this process, the SQLite file ``path`` is opened with ``key`` (and made encrypted when it is
    created)."""
    source: KeySource = key if callable(key) else (lambda: key)
    with _lock:
        name = _name(path)
        _keys[name] = source
        _derived.pop(name, None)


def forget(path: str | Path) -> None:
    with _lock:
        name = _name(path)
        _keys.pop(name, None)
        _derived.pop(name, None)


def keyed(path: str) -> bool:
    """Whether a key was given for ``path`` in this process."""
    return path != ":memory:" and _name(path) in _keys


def driver() -> Any:
    """SQLCipher's DB-API module (``sqlcipher3``), or the error saying how to install it."""
    try:
        import sqlcipher3.dbapi2 as module
    except ImportError:
        raise ConfigurationError("an encrypted device file needs SQLCipher: install sparksync with its 'cipher' extra "
                                 "(pip install 'sparksync[cipher]')", obj="sqlcipher3") from None
    return module


def connect(path: str, **kwargs: Any) -> Any:
    """A SQLCipher connection to ``path`` with its key (``use_key``), checked to open the file: a wrong key, a key
    given to a plain file, or a key that cannot be had is ``EncryptionKeyError`` naming the file.

    The file is only ever opened through SQLite (never read with ``open``: closing any descriptor of a database
    file drops the locks every connection of the process holds on it, POSIX's rule)."""
    module = driver()
    name = _name(path)
    with _lock:
        known = _derived.get(name)
    if known is not None:
        raw = _open(module, path, known, kwargs)
        if raw is not None:
            return raw
    key = _derive(path, name, _salt(module, path, name))
    raw = _open(module, path, key, kwargs)
    if raw is not None:
        with _lock:
            _derived[name] = key
        return raw
    if _plain(module, path):
        raise EncryptionKeyError(f"{path} is a plain SQLite file, not an encrypted one, but a key was given for it: "
                                 "open it without a key, or start an encrypted file from the snapshot "
                                 "('sparksync sync --reinitialize' with the key)", obj=path)
    raise EncryptionKeyError(f"{path}: the key given does not open this encrypted file (a wrong key, or the file "
                             "is damaged)", obj=path)


def refused_without_key(path: str) -> EncryptionKeyError:
    return EncryptionKeyError(f"{path} is not a plain SQLite file: an encrypted device file (give its key: "
                              "--key-file or --key-env, or Device(key=...)) or a damaged one", obj=path)


def _open(module: Any, path: str, key: bytes, kwargs: dict) -> Any:
    """A connection with ``key`` (the stretched key and its salt), or None when the key does not open the file."""
    raw = module.connect(path, **kwargs)
    try:
        raw.execute("PRAGMA cipher_log_level = NONE")    # a wrong key is our one message, not SQLCipher's log lines
        raw.execute(f"PRAGMA key = \"x'{key.hex()}'\"")
        raw.execute("PRAGMA temp_store = MEMORY")        # no sort or index build spilled to a temporary file
        raw.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except module.DatabaseError as exc:
        raw.close()
        if "not a database" in str(exc).lower():
            return None
        raise
    except BaseException:
        raw.close()
        raise
    return raw


def _salt(module: Any, path: str, name: str) -> bytes:
    """The file's salt, as SQLCipher reads it from its first bytes (any key lets it say; a raw one costs nothing),
    or, for a file not written yet, one made for it (the same for all its connections until it is written)."""
    try:
        written = os.stat(path).st_size >= SALT_BYTES
    except FileNotFoundError:
        written = False
    if written:
        probe = module.connect(path)
        try:
            probe.execute("PRAGMA cipher_log_level = NONE")
            probe.execute(f"PRAGMA key = \"x'{'00' * 32}'\"")
            found = probe.execute("PRAGMA cipher_salt").fetchone()
        finally:
            probe.close()
        if found and found[0]:
            return bytes.fromhex(found[0])
    with _lock:
        return _fresh.setdefault(name, os.urandom(SALT_BYTES))


def _derive(path: str, name: str, salt: bytes) -> bytes:
    """SQLCipher 4's stretching of the passphrase with the file's salt, followed by the salt (its raw key form)."""
    with _lock:
        source = _keys.get(name)
    if source is None:
        raise refused_without_key(path)
    passphrase = source()
    if isinstance(passphrase, str):
        passphrase = passphrase.encode("utf-8")
    if not passphrase:
        raise EncryptionKeyError(f"{path}: the key given is empty", obj=path)
    return hashlib.pbkdf2_hmac("sha512", passphrase, salt, KDF_ROUNDS, 32) + salt


def _plain(module: Any, path: str) -> bool:
    """Whether ``path`` opens without a key (SQLCipher reads plain SQLite files too)."""
    raw = module.connect(path)
    try:
        raw.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return True
    except module.DatabaseError:
        return False
    finally:
        raw.close()


def _name(path: str | Path) -> str:
    return os.path.realpath(path)
