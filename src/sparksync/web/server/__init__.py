"""The publisher's side of web synchronization, its transport: ``door.py`` (each request's work, over the
publisher's half of the session in ``merge/session/remote/``), ``app.py`` (HTTP), ``serve.py`` (the process),
``partitioned.py`` (a device's partition of a snapshot), ``ledger.py`` (what the door saw of each sync)."""
