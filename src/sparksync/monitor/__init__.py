"""The operator's monitor of ``sparksync serve``: the page, ``/api``, ``/metrics``, ``/healthz``, and alerts."""
