"""The publisher's side of web synchronization: ``door.py`` (the work), ``app.py`` (HTTP), ``serve.py``
(the process), ``downloads.py`` and ``partitioned.py`` (what a device receives)."""
