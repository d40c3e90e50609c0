"""The device's side of web synchronization: ``sync.py`` (one sync), ``client.py`` (HTTP)."""
