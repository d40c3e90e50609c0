"""``sparksync serve``: the one long-lived process: the agents on their schedules in one warm Spark session,
the device endpoint of web synchronization, and the operator's monitor (``sparksync.monitor``)."""
