"""Web synchronization: devices whose database lives on the device sync over HTTPS (the door at the
publisher: ``web/server/``; the light client on the device: ``web/device/``; what both speak:
``merge/session/remote/frames.py``; who may speak: ``web/tokens.py``)."""
