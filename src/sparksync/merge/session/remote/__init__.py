"""A merge session with one end remote (web synchronization): what the two halves do that is not HTTP.

* ``frames.py``: change rows as they travel between the halves (Arrow IPC frames, zstd), and an upload's rows
  checked before anything is written.
* ``subscriber.py``: the subscriber's half (a web device): its file checked and initialized from a snapshot,
  made ready to upload, the upload's batches, the download applied, its digests.
* ``restored.py``: a subscriber's file restored from an older copy of itself, found and recovered on its side.
* ``publisher.py``: the publisher's half for a remote subscriber (run by the web door): an upload applied with
  its reply in one transaction, a round's closing and evaluating, where a download starts, what ``hello`` says.
* ``trust.py``: an upload's changes to rows outside the subscriber's partition refused and logged.
* ``downloads.py``: a download planned (one link of the merge agent's plan) and read for one subscriber.
* ``feed.py``: the partition feed, each round's changes written once per partition and sent to every
  subscriber of it.
* ``recovery.py``: a subscriber's file restored from an older copy, recovered on the publisher's side.
* ``validated.py``: a subscriber validated at its sync (its digests against the publisher's of its partition).
"""
