"""A merge session with one end remote (web synchronization): what the two halves do that is not HTTP.

* ``frames.py``: change rows as they travel between the halves (Arrow IPC frames, zstd), and an upload's rows
  checked before anything is written.
"""
