"""The monitor's page: server-rendered HTML (jinja2, autoescaped) with the latency chart drawn as inline SVG
here, and a few lines of its own JavaScript that fetch the page's main part again every few seconds.
Nothing is loaded from anywhere else."""

from __future__ import annotations

import datetime as dt
from html import escape
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup

from sparksync.monitor.rollup import ATTENTION, DEFAULT_LATENCY_S

REFRESH_S = 5
COLORS = ("#1565c0", "#c62828", "#2e7d32", "#ef6c00", "#6a1b9a", "#00838f", "#5d4037", "#ad1457")
W, H, LEFT, BOTTOM, TOP, RIGHT = 900, 240, 56, 28, 12, 190

_env = Environment(loader=PackageLoader("sparksync.monitor", "templates"), autoescape=select_autoescape(["html"]),
                   trim_blocks=True, lstrip_blocks=True)


def latency_svg(series: dict[str, list[tuple[str, float]]]) -> Markup:
    """A line per ``publication/subscription``: each tracer token's latency (seconds) at the time it reached the
    distributor."""
    points = [(dt.datetime.fromisoformat(t).timestamp(), v, name) for name, pts in series.items() for t, v in pts]
    if not points:
        return Markup('<p class="muted" id="latency-empty">no tracer token has reached a subscriber yet '
                      '(serve posts one every [server] tracer_interval_s; sparksync tracer-token posts one now)</p>')
    t0, t1 = min(p[0] for p in points), max(p[0] for p in points)
    top = max(max(p[1] for p in points), 0.001) * 1.1
    span = (t1 - t0) or 1.0

    def x(t: float) -> float:
        return LEFT + (t - t0) / span * (W - LEFT - RIGHT)

    def y(v: float) -> float:
        return H - BOTTOM - v / top * (H - BOTTOM - TOP)

    out = [f'<svg id="latency-chart" role="img" aria-label="tracer token latency" viewBox="0 0 {W} {H}" '
           f'width="{W}" height="{H}" xmlns="http://www.w3.org/2000/svg">',
           f'<line x1="{LEFT}" y1="{H - BOTTOM}" x2="{W - RIGHT}" y2="{H - BOTTOM}" stroke="#9ca3af"/>',
           f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{H - BOTTOM}" stroke="#9ca3af"/>']
    for frac in (0, 0.5, 1):
        tick = top / 1.1 * frac
        out.append(f'<text x="{LEFT - 6}" y="{y(tick) + 4:.1f}" text-anchor="end">{tick:.3g} s</text>')
    for edge, anchor in ((t0, "start"), (t1, "end")):
        label = dt.datetime.fromtimestamp(edge, dt.UTC).strftime("%H:%M:%S")
        out.append(f'<text x="{x(edge):.1f}" y="{H - 8}" text-anchor="{anchor}">{label} UTC</text>')
    for i, (name, pts) in enumerate(sorted(series.items())):
        color = COLORS[i % len(COLORS)]
        xy = " ".join(f"{x(dt.datetime.fromisoformat(t).timestamp()):.1f},{y(v):.1f}" for t, v in pts)
        out.append(f'<polyline class="series" data-series="{escape(name)}" fill="none" stroke="{color}" '
                   f'stroke-width="2" points="{xy}"/>')
        for t, v in pts:
            out.append(f'<circle cx="{x(dt.datetime.fromisoformat(t).timestamp()):.1f}" cy="{y(v):.1f}" r="2.5" '
                       f'fill="{color}"><title>{escape(name)}: {v:.3f} s</title></circle>')
        out.append(f'<text x="{W - RIGHT + 10}" y="{TOP + 14 * (i + 1)}" fill="{color}">{escape(name)}</text>')
    out.append("</svg>")
    return Markup("".join(out))


def render(view: dict[str, Any], latency_s: float | None, part: str | None = None, refresh: int = REFRESH_S) -> str:
    """The whole page, or (``part="main"``) only what the page's script puts in place of its main part;
    ``refresh``: seconds between two refreshes."""
    context = {"v": view, "chart": latency_svg(view["latency"]), "threshold": f"{latency_s or DEFAULT_LATENCY_S:g}",
               "refresh_s": refresh, "refresh_ms": refresh * 1000, "warnings": ATTENTION,
               "q": (view.get("found") or {}).get("q")}
    return _env.get_template("main.html" if part == "main" else "page.html").render(body="main.html", **context)


def render_unreadable(publisher: str, message: str, part: str | None = None, refresh: int = REFRESH_S) -> str:
    """The page when the replication state cannot be read (the publisher unreachable): why, and the page's
    refresh going on, so it shows the state again as soon as it can be read."""
    context = {"publisher": publisher, "message": message, "refresh_s": refresh, "refresh_ms": refresh * 1000}
    return _env.get_template("unreadable.html" if part == "main" else "page.html").render(
        v={"publisher": {"name": publisher}, "time": ""}, body="unreadable.html", **context)
