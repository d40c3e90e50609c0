"""The configuration of ``sparksync serve``: ``[server]`` (its listeners, the device endpoint's limits, how it
stops) and ``[alerts]`` (the monitor's thresholds and webhook). Part of the topology (``config.Topology``)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ServerConfig(_Model):
    """``[server]``: the device endpoint of ``sparksync serve`` (web synchronization)."""

    listen: str = Field(default="127.0.0.1:8443", description="HOST:PORT the device endpoint listens on")
    tls_cert: str | None = Field(default=None, description="PEM certificate (chain) of the endpoint")
    tls_key: str | None = Field(default=None, description="PEM private key of tls_cert")
    max_request_mb: float = Field(default=64, gt=0, le=4096, description="the largest request body accepted, and the "
                                  "most an upload's frames may unpack to (MB)")
    max_active_requests: int = Field(default=8, ge=1, le=1024, description="uploads and downloads the device endpoint "
                                     "works on at once; one past them waits up to request_queue_s, then gets 429 with "
                                     "Retry-After (the device waits and asks again)")
    request_queue_s: float = Field(default=5, ge=0, le=300, description="how long an upload or download waits for its "
                                   "turn before a 429")
    max_requests_per_device: int | None = Field(default=None, ge=1, le=1024, description="uploads and downloads one "
                                                "subscription's token may have at once, waiting ones included (more get "
                                                "429 at once): one device never holds the door; default a quarter of "
                                                "max_active_requests, at least 1")
    min_body_rate_kb: float = Field(default=1, ge=0, le=1 << 20, description="a request body that arrives slower than "
                                    "this many KB/s, once body_grace_s have passed, is cut with 408 (0: never)")
    body_grace_s: float = Field(default=10, ge=0, le=3600, description="seconds a request body may take before "
                                "min_body_rate_kb applies")
    enrollments_per_minute: int = Field(default=30, ge=1, le=1_000_000, description="enrollment requests one source "
                                        "address may make in a minute (more get 429 with Retry-After): a secret "
                                        "cannot be guessed from one address, a burst cannot take the door")
    feed_dir: str = Field(default="feed", description="where serve writes the partition feed's segments (relative "
                          "to the config file; shared storage when Spark runs on a cluster)")
    round_ahead_s: float = Field(default=0.5, ge=0, le=3600, description="serve looks this often for changes to "
                                 "close, evaluate and write to the partition feed before devices ask (one read when "
                                 "nothing changed; 0: only when a device asks)")
    monitor: str = Field(default="127.0.0.1:8470", description="HOST:PORT of the operator's monitor (the page, "
                         "/api, /metrics, /healthz); anything but loopback needs SPARKSYNC_OPERATOR_TOKEN")
    stop_grace_s: float = Field(default=30, ge=0, le=3600, description="after SIGTERM, seconds serve waits for the "
                                "agent runs in flight before it cuts them off (their transactions roll back)")
    tracer_interval_s: float = Field(default=300, ge=0, description="serve posts a tracer token to each "
                                     "scheduled transactional publication this often (0: never)")

    @property
    def per_device(self) -> int:
        """Uploads and downloads one device may have at once (``max_requests_per_device``)."""
        return self.max_requests_per_device or max(1, self.max_active_requests // 4)

    @field_validator("listen", "monitor")
    @classmethod
    def _listen(cls, v: str) -> str:
        return check_host_port(v)

    @model_validator(mode="after")
    def _tls(self) -> ServerConfig:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key go together: give both (TLS) or neither (behind a reverse proxy, "
                             "on a loopback address)")
        return self

    @property
    def host(self) -> str:
        return _host(self.listen)

    @property
    def port(self) -> int:
        return _port(self.listen)

    @property
    def monitor_host(self) -> str:
        return _host(self.monitor)

    @property
    def monitor_port(self) -> int:
        return _port(self.monitor)


def _host(address: str) -> str:
    return address.rpartition(":")[0].strip("[]")


def _port(address: str) -> int:
    return int(address.rpartition(":")[2])


def check_host_port(v: str) -> str:
    host, sep, port = v.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{v!r} is not HOST:PORT (e.g. \"0.0.0.0:8443\" or \"127.0.0.1:8443\")")
    return v


class AlertsConfig(_Model):
    """``[alerts]``: the thresholds ``sparksync serve`` watches (each optional) and where it says so."""

    latency_s: float | None = Field(default=None, gt=0, description="a change waiting longer than this (oldest pending age, "
                                    "or a tracer token's latency) fires 'latency'; also the performance rating's "
                                    "threshold")
    expiry_fraction: float | None = Field(default=None, gt=0, lt=1, description="a subscription that has not merged for "
                                          "this share of its publication's retention fires 'expiry'")
    merge_duration_s: float | None = Field(default=None, gt=0, description="an agent run longer than this fires 'duration'")
    min_rows_per_s: float | None = Field(default=None, gt=0, description="a run that moved rows slower than this fires "
                                         "'throughput'")
    stuck_minutes: float | None = Field(default=None, gt=0, description="a backlog above zero that has not shrunk for this "
                                        "long fires 'stuck'")
    devices_offline_percent: float | None = Field(default=None, gt=0, le=100, description="a device group whose "
                                                  "enrolled devices have this share (in %) or more offline for "
                                                  "devices_offline_minutes fires 'offline'")
    devices_offline_minutes: float = Field(default=120.0, gt=0, description="how long a device has not synced before "
                                           "'offline' counts it")
    webhook: str | None = Field(default=None, description="URL each fired and resolved alert is POSTed to (JSON)")
    interval_s: float = Field(default=10.0, ge=0.2, le=3600, description="with a webhook, seconds between two "
                              "evaluations of the alerts (without one: whenever the page or /metrics is read)")
    webhook_timeout_s: float = Field(default=5.0, gt=0, le=120)
    webhook_retries: int = Field(default=5, ge=0, le=100, description="tries after the first, with backoff")

    @field_validator("webhook")
    @classmethod
    def _hook(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith(("http://", "https://")):
            raise ValueError(f"{v!r} is not an http:// or https:// URL")
        return v
