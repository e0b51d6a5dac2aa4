#!/usr/bin/env python3
"""Draws the panels of a Grafana dashboard (contrib/grafana/redfence.json)
from a real Prometheus into one PNG, without Grafana.

Each panel's queries are the dashboard's own PromQL expressions, read from
the JSON; the dashboard variables are replaced ($job and $instance by
`.*`, $__rate_interval by --rate-interval), and each query is run with
Prometheus's HTTP API (/api/v1/query_range) over the chosen window. Panels
keep the dashboard's order and two-column layout, its units, legends and
threshold lines. Needs matplotlib (Debian: python3-matplotlib).

    python3 contrib/grafana/render.py --prometheus http://127.0.0.1:9090 \\
        --minutes 5 --step 2 --out docs/dashboard.png

How docs/dashboard.png was made: docs/observability.md.
"""

import argparse
import datetime
import json
import math
import re
import sys
import time
import urllib.parse
import urllib.request

import matplotlib

matplotlib.use("Agg")
import matplotlib.dates as mdates  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.gridspec import GridSpec  # noqa: E402


def query_range(base, expr, start, end, step):
    params = urllib.parse.urlencode(
        {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": step}
    )
    with urllib.request.urlopen(f"{base}/api/v1/query_range?{params}", timeout=30) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise RuntimeError(f"{expr}: {body}")
    return body["data"]["result"]


def substitute(expr, rate_interval):
    expr = expr.replace("$__rate_interval", rate_interval)
    expr = re.sub(r"\$\{?(job|instance)\}?", ".*", expr)
    return expr


def legend(fmt, metric):
    if not fmt:
        return ",".join(f"{k}={v}" for k, v in sorted(metric.items())) or "value"
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: metric.get(m.group(1), ""), fmt)


def unit_axis(ax, unit):
    if unit == "percentunit":
        ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v * 100:.0f} %"))
    elif unit == "s":
        def seconds(v, _):
            if v == 0:
                return "0"
            if abs(v) < 1:
                return f"{v * 1000:.0f} ms"
            return f"{v:g} s"
        ax.yaxis.set_major_formatter(plt.FuncFormatter(seconds))
    elif unit == "ops":
        ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:g}/s"))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dashboard", default="contrib/grafana/redfence.json")
    p.add_argument("--prometheus", default="http://127.0.0.1:9090")
    p.add_argument("--start", type=float, help="unix time (default: --minutes before --end)")
    p.add_argument("--end", type=float, help="unix time (default: now)")
    p.add_argument("--minutes", type=float, default=5)
    p.add_argument("--step", default="2", help="query step, seconds")
    p.add_argument("--rate-interval", default="8s", help="for $__rate_interval (4 scrapes)")
    p.add_argument("--mark", action="append", default=[],
                   help="UNIX_TIME:LABEL, a vertical line on every panel (repeatable)")
    p.add_argument("--out", default="dashboard.png")
    p.add_argument("--dpi", type=int, default=80)
    a = p.parse_args()

    end = a.end or time.time()
    start = a.start or end - a.minutes * 60
    dashboard = json.load(open(a.dashboard))
    marks = []
    for m in a.mark:
        t, _, label = m.partition(":")
        marks.append((datetime.datetime.fromtimestamp(float(t), datetime.timezone.utc), label))

    panels = sorted(dashboard["panels"], key=lambda p: (p["gridPos"]["y"], p["gridPos"]["x"]))
    # Grid: 24 columns as in Grafana; one unit of height per gridPos unit.
    height = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    fig = plt.figure(figsize=(16, height * 0.42))
    grid = GridSpec(height, 24, figure=fig, hspace=2.2, wspace=3.0,
                    left=0.05, right=0.98, top=1 - 0.9 / height, bottom=1.0 / height)
    title = dashboard.get("title", "dashboard")
    t0 = datetime.datetime.fromtimestamp(start, datetime.timezone.utc)
    t1 = datetime.datetime.fromtimestamp(end, datetime.timezone.utc)
    fig.suptitle(f"Grafana dashboard \u201c{title}\u201d ({a.dashboard}), every panel from Prometheus "
                 f"{t0:%Y-%m-%d %H:%M:%S}\u2013{t1:%H:%M:%S} UTC"
                 + ("\ndotted lines: the --mark times, labelled above the top row" if marks else ""),
                 fontsize=13, y=1 - 0.25 / height)
    failures = 0
    first_row = min(p["gridPos"]["y"] for p in panels if p["type"] != "row")
    for panel in panels:
        g = panel["gridPos"]
        if panel["type"] == "row":
            ax = fig.add_subplot(grid[g["y"]:g["y"] + 1, :])
            ax.axis("off")
            ax.text(0, 0.2, panel["title"], fontsize=13, fontweight="bold", transform=ax.transAxes)
            continue
        ax = fig.add_subplot(grid[g["y"] + 1:g["y"] + g["h"], g["x"]:g["x"] + g["w"]])
        ax.set_title(panel["title"], fontsize=11, loc="left")
        defaults = panel.get("fieldConfig", {}).get("defaults", {})
        drawn = 0
        top = 0.0
        for target in panel.get("targets", []):
            expr = substitute(target["expr"], a.rate_interval)
            try:
                result = query_range(a.prometheus, expr, start, end, a.step)
            except Exception as e:  # noqa: BLE001
                print(f"{panel['title']}: {e}", file=sys.stderr)
                failures += 1
                continue
            for series in result:
                # Steps without a sample (a filtered-out `> 0`, a series not
                # there yet) are gaps, as in Grafana, not lines across them.
                values = {round(float(t), 3): float(v) for t, v in series["values"]}
                xs, ys = [], []
                t = start
                while t <= end + 1e-6:
                    y = values.get(round(t, 3), float("nan"))
                    xs.append(datetime.datetime.fromtimestamp(t, datetime.timezone.utc))
                    ys.append(y if math.isfinite(y) else float("nan"))
                    t += float(a.step)
                top = max([top] + [y for y in ys if math.isfinite(y)])
                line, = ax.plot(xs, ys, linewidth=1.1,
                                label=legend(target.get("legendFormat"), series["metric"]))
                # A sample alone between gaps would not show as a line.
                alone = [i for i, y in enumerate(ys) if math.isfinite(y)
                         and (i == 0 or not math.isfinite(ys[i - 1]))
                         and (i == len(ys) - 1 or not math.isfinite(ys[i + 1]))]
                if alone:
                    ax.plot([xs[i] for i in alone], [ys[i] for i in alone], "o",
                            markersize=3, color=line.get_color())
                drawn += 1
        for step in defaults.get("thresholds", {}).get("steps", []):
            if step.get("value") is not None:
                ax.axhline(step["value"], color="red", linestyle="--", linewidth=0.9)
        for when, label in marks:
            ax.axvline(when, color="grey", linestyle=":", linewidth=0.9)
            if g["y"] == first_row:
                # Labelled once, above the top row.
                ax.text(when, 1.01, label, transform=ax.get_xaxis_transform(),
                        fontsize=8, color="dimgrey", va="bottom", ha="center")
        if drawn == 0:
            ax.text(0.5, 0.5, "No data", ha="center", va="center", transform=ax.transAxes, color="grey")
        if "min" in defaults:
            ax.set_ylim(bottom=defaults["min"])
        if drawn and top > 0:
            # Room above the highest point for the legend.
            ax.set_ylim(top=top * 1.45)
        unit_axis(ax, defaults.get("unit"))
        ax.set_xlim(t0, t1)
        ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M" if end - start > 900 else "%H:%M:%S"))
        ax.tick_params(labelsize=8)
        ax.grid(True, linewidth=0.3)
        if drawn:
            ax.legend(fontsize=7, loc="upper left", ncol=3 if drawn > 4 else 2, framealpha=0.7)
    fig.savefig(a.out, dpi=a.dpi)
    # A palette image: a fraction of the size, same look.
    try:
        from PIL import Image

        Image.open(a.out).convert("RGB").quantize(colors=64).save(a.out, optimize=True)
    except ImportError:
        pass
    print(f"{a.out}: {len(panels)} panels, {failures} failed queries", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
