"""Benchmark results as documentation: each script saves its tables and a PNG chart under
docs/benchmarks/ (``save``), and running this module assembles docs/benchmarks.md from them, with the
machine they ran on. ``make bench`` runs every script, then this.

Usage: .venv/bin/python bench/results.py
"""

from __future__ import annotations

import json
import os
import platform
import sqlite3
import textwrap
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "benchmarks"
ORDER = ["tracking_overhead", "tracking_floor", "merge_throughput", "transactional_vs_pg_logical", "tracer_latency",
         "partitions", "cleanup", "web_sync", "web_sync_enrolled", "device_sync", "device_download", "small_rounds",
         "service_rounds", "scale", "rows_scale"]


@dataclass
class Result:
    """One script's results: markdown tables, charts (PNG files in docs/benchmarks/), notes."""

    name: str
    title: str
    command: str
    tables: list[str] = field(default_factory=list)
    charts: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    machine: dict = field(default_factory=dict)
    chart_data: list[dict] = field(default_factory=list)     # what each chart was drawn from (redrawn by assemble)

    def table(self, headers: Sequence[str], rows: Sequence[Sequence[object]], caption: str = "") -> None:
        self.tables.append((f"{caption}\n\n" if caption else "") + markdown_table(headers, rows))

    def bars(self, file: str, title: str, groups: Sequence[str], series: dict[str, Sequence[float]], ylabel: str,
             line: float | None = None, line_label: str = "") -> None:
        """A grouped bar chart: one group per label in ``groups``, one bar per series."""
        spec = {"file": file, "title": title, "groups": list(groups),
                "series": {k: [float(v) for v in vs] for k, vs in series.items()}, "ylabel": ylabel, "line": line,
                "line_label": line_label}
        if draw(spec):
            self.charts.append(file)
        self.chart_data.append(spec)

    def lines(self, file: str, title: str, xs: Sequence[float], series: dict[str, Sequence[float | None]],
              xlabel: str, ylabel: str, log_x: bool = True) -> None:
        """A line chart: one line per series over ``xs`` (a missing point: None)."""
        spec = {"kind": "lines", "file": file, "title": title, "xs": [float(x) for x in xs],
                "series": {k: [None if v is None else float(v) for v in vs] for k, vs in series.items()},
                "xlabel": xlabel, "ylabel": ylabel, "log_x": log_x}
        if draw(spec):
            self.charts.append(file)
        self.chart_data.append(spec)

    def save(self) -> Path:
        """Write docs/benchmarks/<name>.json (assembled into docs/benchmarks.md) and print the tables."""
        self.machine = machine()
        OUT.mkdir(parents=True, exist_ok=True)
        path = OUT / f"{self.name}.json"
        path.write_text(json.dumps(asdict(self), indent=2), encoding="utf-8")
        print(f"\n{self.title}\n")
        for t in self.tables:
            print(t + "\n")
        for n in self.notes:
            print(n)
        print(f"saved {path.relative_to(ROOT)}" + (f" and {', '.join(self.charts)}" if self.charts else ""))
        return path


def draw(spec: dict) -> bool:
    """Draw one chart (grouped bars, or lines: ``spec["kind"]``) into docs/benchmarks/; without matplotlib (the
    ``bench`` extra), say so and draw nothing (the tables are kept; ``make bench`` installs it)."""
    try:
        import matplotlib
    except ImportError:
        print(f"chart {spec['file']} not drawn: matplotlib is not installed (pip install -e '.[bench]', or make bench)")
        return False

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if spec.get("kind") == "lines":
        fig, ax = plt.subplots(figsize=(8, 5))
        for label, values in spec["series"].items():
            points = [(x, v) for x, v in zip(spec["xs"], values) if v is not None]
            ax.plot([x for x, _ in points], [v for _, v in points], marker="o", label=label)
        if spec.get("log_x"):
            ax.set_xscale("log")
        ax.set_xlabel(spec["xlabel"])
        return _finish(fig, ax, spec)
    groups, series = spec["groups"], spec["series"]
    fig, ax = plt.subplots(figsize=(max(8.0, 1.2 * len(groups)), 5))
    width = 0.8 / max(len(series), 1)
    for k, (label, values) in enumerate(series.items()):
        xs = [i + (k - (len(series) - 1) / 2) * width for i in range(len(groups))]
        ax.bar(xs, list(values), width, label=label)
    if spec.get("line") is not None:
        ax.axhline(spec["line"], color="black", linestyle="--", linewidth=1, label=spec.get("line_label") or None)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([textwrap.fill(g, 24) for g in groups], rotation=30, ha="right", fontsize=8)
    return _finish(fig, ax, spec)


def _finish(fig, ax, spec: dict) -> bool:
    import matplotlib.pyplot as plt

    ax.set_ylabel(spec["ylabel"])
    ax.set_title(spec["title"])
    ax.legend(fontsize=8)
    fig.tight_layout()
    OUT.mkdir(parents=True, exist_ok=True)
    fig.savefig(OUT / spec["file"], dpi=100)
    plt.close(fig)
    return True


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    def cell(v: object) -> str:
        if isinstance(v, float):
            return f"{v:,.3f}" if abs(v) < 10 else f"{v:,.1f}" if abs(v) < 1000 else f"{v:,.0f}"
        if isinstance(v, int):
            return f"{v:,}"
        return str(v)

    rule = "|" + "|".join("---" if i == 0 else "---:" for i in range(len(headers))) + "|"
    lines = ["| " + " | ".join(headers) + " |", rule]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def machine() -> dict:
    """What the numbers were measured on."""
    model = ""
    with_cpuinfo = Path("/proc/cpuinfo")
    if with_cpuinfo.exists():
        for line in with_cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    memory = ""
    meminfo = Path("/proc/meminfo")
    if meminfo.exists():
        kb = int(meminfo.read_text().split()[1])
        memory = f"{kb / 1024 / 1024:.1f} GiB"
    try:
        import pyspark

        spark = pyspark.__version__
    except ImportError:
        spark = "?"
    return {"cpus": os.cpu_count(), "cpu": model, "memory": memory, "os": f"{platform.system()} {platform.release()}",
            "python": platform.python_version(), "pyspark": spark, "sqlite": sqlite3.sqlite_version}


def assemble() -> Path:
    """docs/benchmarks.md from the saved results, in a fixed order."""
    saved = {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted(OUT.glob("*.json"))}
    out = ["# Benchmarks", "",
           "The latest results of the scripts in `bench/` (`make bench` runs them all and rewrites this page).",
           "Each ratio is against a baseline measured in the same run; see README, \"Benchmarks\", for what each",
           "script compares. Numbers from one run on the machine named under each section.", ""]
    for name in [n for n in ORDER if n in saved] + sorted(set(saved) - set(ORDER)):
        r = saved[name]
        # charts drawn now too: a script run without matplotlib saved their data, not their pictures
        drawn = [spec["file"] for spec in r.get("chart_data", []) if draw(spec)]
        m = r["machine"]
        out += [f"## {r['title']}", "", f"`{r['command']}` — {m['cpus']} CPU(s) {m['cpu']}, {m['memory']}, {m['os']}, "
                f"Python {m['python']}, PySpark {m['pyspark']}, SQLite {m['sqlite']}", ""]
        for t in r["tables"]:
            out += [t, ""]
        for c in dict.fromkeys([*r["charts"], *drawn]):
            out += [f"![{r['title']}](benchmarks/{c})", ""]
        for n in r["notes"]:
            out += [n, ""]
    path = ROOT / "docs" / "benchmarks.md"
    path.write_text("\n".join(out).rstrip() + "\n", encoding="utf-8")
    return path


if __name__ == "__main__":
    print(f"wrote {assemble().relative_to(ROOT)}")
