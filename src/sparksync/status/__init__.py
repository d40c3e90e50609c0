"""``status``: publications, articles and nicknames, subscriptions and their watermarks, what waits and since
when, and what is wrong (``gather.py``); what is said of one subscription (``readings.py``); a publication's web
subscriptions, a fleet of devices read in bulk (``web.py``)."""

from sparksync.status.gather import BAD_STATES, gather_status

__all__ = ["BAD_STATES", "gather_status"]
