"""A fleet of web devices that enroll themselves into device groups (docs/web-sync.md, "A fleet"): the group
secrets they enroll with (``enrollment.py``), a device's registration made at its enrollment (``enroll.py``) and
the registry of enrolled devices every operation reads beside the configured subscriptions (``registry.py``)."""
