"""An S3-compatible object store on this machine (moto's server, from PyPI), for what sparksync keeps by URL: the
partition feed (``[server] feed_dir``) and snapshots (``[publisher] snapshot_dir``).

Its credentials (``CREDENTIALS``) are in every test process's environment from the start (``tests/conftest.py``), so
that Spark's Python workers, which inherit the environment of the session's first moment, reach the store too; a
process started by a test (a ``serve``, a CLI command, a cluster's executors) is given them as a deployment would."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "sparksync-test", "AWS_SECRET_ACCESS_KEY": "sparksync-test-secret",
               "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}


@contextmanager
def object_store(*buckets: str) -> Iterator[str]:
    """A store on a free port with ``buckets`` made; yields the URL options that reach it
    (``endpoint_override=127.0.0.1:PORT&scheme=http``)."""
    import pyarrow.fs as pafs
    from moto.server import ThreadedMotoServer

    from tests.support.web import free_port

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        fs = pafs.S3FileSystem(endpoint_override=f"127.0.0.1:{port}", scheme="http", allow_bucket_creation=True,
                               access_key=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                               secret_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"])
        for b in buckets:
            fs.create_dir(b)
        yield f"endpoint_override=127.0.0.1:{port}&scheme=http"
    finally:
        server.stop()


def s3_folder(options: str, bucket: str, path: str):
    """The ``storage.Folder`` of ``s3://bucket/path`` in the store of ``options``."""
    from sparksync.storage import Folder

    return Folder(f"s3://{bucket}/{path}?{options}")
