#!/usr/bin/python3
"""Plot the results of `dynrt bench` in the style of the DynBranch paper.

Usage: plot.py RESULTS_JSON OUT_DIR

Input: the results.json that `dynrt bench` writes, an object with
  "records": one per (workload, rate, arm) with at least "workload", "rate", "arm" and the
             metrics "mean_s", "ratio_to_floor" (latency / floor latency);
  "sweeps":  optional; "fanout" entries per (workload, rate, k) with "mean_s" and
             "consumed_engine_s_per_request" / "wasted_engine_s_per_request", and "repeat"
             entries per (workload, rate, repeat_rate) with "speedup" (or "floor_mean_s" and
             "full_mean_s").

Outputs, written into OUT_DIR (created if needed), one line "wrote PATH" each on stdout:
  fig8.png   mean latency normalised to the no-reuse floor, grouped by workload, one panel
             per load level. "low load" is the lowest rate of each workload and "high load"
             the highest; a workload measured at a single rate appears in the low-load panel
             only. The floor arm is the dashed line at 1.0, not a bar.
  fig14.png  per workload, the floor latency split into what dynrt keeps ("dynrt"), what
             C2 fills save ("C2 fill" = c1-only - full) and what C1 reuse saves ("C1 reuse" =
             floor - c1-only). A negative saving is drawn as 0 and printed above its bar
             as "(clipped)", so that bar's stack then exceeds the floor.
  fig9a.png  the fan-out sweep: mean latency against k, with consumed and wasted
             speculative engine-seconds per request as stacked bars on a second axis.
  fig10a.png the repeat sweep: speedup over the floor against the repeat rate.
For the results.json of `dynrt bench sweep` (it has "points": one per workload, load and
arm, with "mean_s", "sd_s", "ratio_to_floor" and "wasted_engine_s"), instead:
  sweep-latency.png  per workload, latency / floor against load, one line per arm, with
                     error bars of one standard deviation over seeds (paper Figure 14);
  sweep-wasted.png   per workload, engine-seconds of unconsumed fills per run against load
                     (paper Figure 9a's discarded work).
A figure whose data is absent from the input is skipped without a message.

Exit status: 0 on success (also when no figure had data: then a note on stderr), 2 for a
missing or malformed input file, 3 if matplotlib cannot be imported; on 2 and 3 nothing is
written and OUT_DIR is not created. The input is checked before matplotlib is imported.
"""

import argparse
import json
import math
import os
import sys

ARM_ORDER = ("floor", "c1-only", "c2-only", "full", "instcache", "helium+", "spagent",
             "static", "always")
WORKLOAD_ORDER = ("routing", "react", "subagent", "hci")
ARM_LABELS = {"full": "dynrt (full)"}
ARM_COLOURS = {
    "c1-only": "#9ecae1",
    "c2-only": "#4292c6",
    "full": "#d62728",
    "instcache": "#a1d99b",
    "helium+": "#41ab5d",
    "spagent": "#fdae6b",
    "static": "#bcbddc",
    "always": "#807dba",
}
OTHER_COLOURS = ("#bdbdbd", "#969696", "#d9d9d9", "#737373")
DPI = 120
EXIT_BAD_INPUT = 2
EXIT_NO_MATPLOTLIB = 3
NO_MATPLOTLIB = ("plot.py: python3-matplotlib is not installed; no plots written "
                 "(apt-get install python3-matplotlib)")


class InputError(Exception):
    """The results file is missing or does not have the expected shape."""


# ----------------------------------------------------------------------------- input

def load_results(path):
    """Read and check the results file; raise InputError with a readable reason."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror}") from e
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InputError(f"{path} is not valid JSON: {e}") from e
    if not isinstance(data, dict):
        raise InputError(f"{path}: top level must be an object")
    records = data.get("records", [])
    sweeps = data.get("sweeps", {}) or {}
    if not isinstance(sweeps, dict):
        raise InputError(f"{path}: \"sweeps\" must be an object")
    check_entries(path, "records", records, {"workload": str, "rate": float, "arm": str})
    check_entries(path, "sweeps.fanout", sweeps.get("fanout", []),
                  {"workload": str, "rate": float, "k": float})
    check_entries(path, "sweeps.repeat", sweeps.get("repeat", []),
                  {"workload": str, "repeat_rate": float})
    return data


def check_entries(path, where, entries, required):
    """Each entry must be an object holding the required keys with the required types."""
    if not isinstance(entries, list):
        raise InputError(f"{path}: \"{where}\" must be an array")
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise InputError(f"{path}: {where}[{i}] must be an object")
        for key, kind in required.items():
            value = entry.get(key)
            ok = isinstance(value, str) if kind is str else is_number(value)
            if not ok:
                want = "a string" if kind is str else "a number"
                raise InputError(f"{path}: {where}[{i}].{key} must be {want}")


def is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def num(entry, key):
    """entry[key] as a float, or None when absent, null or not finite."""
    value = entry.get(key)
    if not is_number(value) or not math.isfinite(value):
        return None
    return float(value)


def ordered(names, canonical):
    """Distinct names in canonical order, unknown names after them in first-seen order."""
    seen = list(dict.fromkeys(names))
    known = [n for n in canonical if n in seen]
    return known + [n for n in seen if n not in canonical]


def rates_by_workload(records):
    """{workload: sorted distinct rates}, workloads in canonical order."""
    workloads = ordered((r["workload"] for r in records), WORKLOAD_ORDER)
    return {w: sorted({float(r["rate"]) for r in records if r["workload"] == w})
            for w in workloads}


def index_records(records):
    """{(workload, rate, arm): record}; a later duplicate replaces an earlier one."""
    return {(r["workload"], float(r["rate"]), r["arm"]): r for r in records}


def fmt_rate(rate):
    return f"{rate:g}"


# ----------------------------------------------------------------------------- helpers

def arm_colour(arm, unknown_index):
    return ARM_COLOURS.get(arm, OTHER_COLOURS[unknown_index % len(OTHER_COLOURS)])


def new_figure(plt, panels, width=4.8, height=3.8, sharey=False, max_cols=4):
    """A figure with `panels` axes of width x height inches, at most max_cols to a row;
    returns (fig, axes)."""
    cols = min(panels, max_cols)
    rows = math.ceil(panels / cols)
    fig, grid = plt.subplots(rows, cols, figsize=(width * cols, height * rows),
                             sharey=sharey, squeeze=False)
    axes = [ax for row in grid for ax in row]
    for ax in axes[panels:]:
        ax.set_visible(False)
    return fig, axes[:panels]


def legend_below(fig, handles, labels):
    """One legend for the whole figure, under the panels so that it covers no data."""
    cols = len(labels) if len(labels) <= 6 else math.ceil(len(labels) / 2)
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=cols,
               frameon=False)


def save(plt, fig, out_dir, name):
    path = os.path.join(out_dir, name)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    print(f"wrote {path}")
    return path


# ----------------------------------------------------------------------------- fig 8

def load_levels(rates):
    """[(title, {workload: rate})]: low = lowest rate, high = highest (multi-rate only)."""
    low = {w: rs[0] for w, rs in rates.items() if rs}
    high = {w: rs[-1] for w, rs in rates.items() if len(rs) > 1}
    levels = [("low load", low)]
    if high:
        levels.append(("high load", high))
    return levels


def ratio(index, workload, rate, arm):
    """ratio_to_floor of a record, or mean_s over the floor's mean_s when it is absent."""
    rec = index.get((workload, rate, arm))
    if rec is None:
        return None
    value = num(rec, "ratio_to_floor")
    if value is None:
        floor = index.get((workload, rate, "floor"))
        mean, base = num(rec, "mean_s"), floor and num(floor, "mean_s")
        value = mean / base if mean is not None and base else None
    return value


def plot_fig8(plt, data, out_dir):
    records = data.get("records", [])
    arms = [a for a in ordered((r["arm"] for r in records), ARM_ORDER) if a != "floor"]
    if not arms:
        return None
    index = index_records(records)
    rates = rates_by_workload(records)
    levels = load_levels(rates)
    width = max(4.8, 1.0 + 0.22 * len(arms) * len(rates))
    fig, axes = new_figure(plt, len(levels), width=width, height=4.0, sharey=True,
                           max_cols=2 if width <= 7 else 1)
    handles = {}
    top = 1.0
    for ax, (title, chosen) in zip(axes, levels):
        top = max(top, draw_fig8_panel(ax, index, arms, chosen, handles))
        ax.set_title(title)
    axes[0].set_ylim(0, top * 1.15)   # shared by the panels
    for ax in axes:
        if ax.get_subplotspec().is_first_col():
            ax.set_ylabel("latency / no-reuse floor")
        handles["floor"] = ax.axhline(1.0, color="black", linestyle="--", linewidth=1,
                                      zorder=3)
    shown = [a for a in arms if a in handles] + ["floor"]
    legend_below(fig, [handles[a] for a in shown],
                 [ARM_LABELS.get(a, "no-reuse floor" if a == "floor" else a) for a in shown])
    return save(plt, fig, out_dir, "fig8.png")


def draw_fig8_panel(ax, index, arms, chosen, handles):
    """Bars of each arm's ratio, grouped by workload, at the rate `chosen` for each; returns
    the tallest bar."""
    width = 0.8 / len(arms)
    unknown = [a for a in arms if a not in ARM_COLOURS]
    top = 1.0
    for i, arm in enumerate(arms):
        colour = arm_colour(arm, unknown.index(arm) if arm in unknown else 0)
        for g, (workload, rate) in enumerate(chosen.items()):
            value = ratio(index, workload, rate, arm)
            if value is None:
                continue
            x = g - 0.4 + width * (i + 0.5)
            bar = ax.bar(x, value, width, color=colour, edgecolor="black",
                         linewidth=1.2 if arm == "full" else 0.4, zorder=2)
            handles[arm] = bar
            top = max(top, value)
            if arm == "full":
                ax.annotate(f"{value:.2f}", (x, value), xytext=(0, 3),
                            textcoords="offset points", ha="center", va="bottom",
                            fontsize=8, fontweight="bold", color=colour)
    ax.set_xticks(range(len(chosen)))
    ax.set_xticklabels([f"{w}\n(rate {fmt_rate(r)})" for w, r in chosen.items()])
    ax.set_xlim(-0.6, len(chosen) - 0.4)
    ax.grid(axis="y", alpha=0.3, zorder=0)
    return top


# ----------------------------------------------------------------------------- fig 14

def breakdown(index, workload, rate):
    """(full, dC2, dC1, floor) mean latencies at one rate, or None if an arm is missing."""
    means = []
    for arm in ("full", "c1-only", "floor"):
        rec = index.get((workload, rate, arm))
        value = rec and num(rec, "mean_s")
        if value is None:
            return None
        means.append(value)
    full, c1, floor = means
    return full, c1 - full, floor - c1, floor


def plot_fig14(plt, data, out_dir):
    records = data.get("records", [])
    index = index_records(records)
    panels = {}
    for workload, rates in rates_by_workload(records).items():
        rows = [(r, breakdown(index, workload, r)) for r in rates]
        rows = [(r, b) for r, b in rows if b is not None]
        if rows:
            panels[workload] = rows
    if not panels:
        return None
    most_rates = max(len(rows) for rows in panels.values())
    fig, axes = new_figure(plt, len(panels), width=max(3.6, 0.8 + 1.3 * most_rates),
                           height=4.0)
    for ax, (workload, rows) in zip(axes, panels.items()):
        draw_fig14_panel(ax, workload, rows)
    axes[0].set_ylabel("mean latency (s)")
    legend_below(fig, *axes[0].get_legend_handles_labels())
    return save(plt, fig, out_dir, "fig14.png")


def draw_fig14_panel(ax, workload, rows):
    """Stacked bars per rate: dynrt, then the C2 and C1 savings (negatives drawn as 0)."""
    parts = (("dynrt", "#d62728"), ("C2 fill", "#4292c6"), ("C1 reuse", "#9ecae1"))
    xs = range(len(rows))
    bottoms = [0.0] * len(rows)
    for p, (label, colour) in enumerate(parts):
        heights = [max(0.0, b[p]) for _, b in rows]
        ax.bar(xs, heights, 0.6, bottom=bottoms, color=colour, edgecolor="black",
               linewidth=0.4, label=label, zorder=2)
        bottoms = [lo + h for lo, h in zip(bottoms, heights)]
    top = max(bottoms)
    for x, (_, (full, d_c2, d_c1, floor)) in zip(xs, rows):
        note = [f"floor {floor:.3g}s"]
        note += [f"{name}={d:+.2g}s (clipped)"
                 for name, d in (("ΔC2", d_c2), ("ΔC1", d_c1)) if d < 0]
        ax.annotate("\n".join(note), (x, bottoms[x]), xytext=(0, 3),
                    textcoords="offset points", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(list(xs))
    ax.set_xticklabels([fmt_rate(r) for r, _ in rows])
    ax.set_xlabel("rate")
    ax.set_ylim(0, top * 1.25 if top > 0 else 1)
    ax.set_xlim(-0.6, len(rows) - 0.4)
    ax.set_title(workload)
    ax.grid(axis="y", alpha=0.3, zorder=0)


# ----------------------------------------------------------------------------- fig 9a

def group_sweep(entries, x_key):
    """{(workload, rate): entries sorted by x_key}, workloads in canonical order."""
    groups = {}
    for entry in entries:
        key = (entry["workload"], num(entry, "rate"))
        groups.setdefault(key, []).append(entry)
    order = ordered((w for w, _ in groups), WORKLOAD_ORDER)
    keys = sorted(groups, key=lambda k: (order.index(k[0]), k[1] is None, k[1] or 0.0))
    return {k: sorted(groups[k], key=lambda e: float(e[x_key])) for k in keys}


def sweep_title(workload, rate):
    return workload if rate is None else f"{workload} @ rate {fmt_rate(rate)}"


def plot_fig9a(plt, data, out_dir):
    fanout = (data.get("sweeps") or {}).get("fanout") or []
    if not fanout:
        return None
    groups = group_sweep(fanout, "k")
    fig, axes = new_figure(plt, len(groups), width=5.2, height=3.8)
    for ax, ((workload, rate), entries) in zip(axes, groups.items()):
        handles = draw_fig9a_panel(ax, entries)
        ax.set_title(sweep_title(workload, rate))
    legend_below(fig, handles, [h.get_label() for h in handles])
    return save(plt, fig, out_dir, "fig9a.png")


def draw_fig9a_panel(ax, entries):
    """Mean latency (line, left axis) and speculative engine-seconds (bars, right axis);
    returns the legend handles."""
    ks = [float(e["k"]) for e in entries]
    consumed = [num(e, "consumed_engine_s_per_request") or 0.0 for e in entries]
    wasted = [num(e, "wasted_engine_s_per_request") or 0.0 for e in entries]
    bars = ax.twinx()
    bars.bar(ks, consumed, 0.5, color="#74c476", edgecolor="black", linewidth=0.4,
             label="consumed spec. engine-s/req")
    bars.bar(ks, wasted, 0.5, bottom=consumed, color="#bdbdbd", edgecolor="black",
             linewidth=0.4, hatch="//", label="wasted spec. engine-s/req")
    bars.set_ylabel("speculative engine-s / request")
    top = max((c + w for c, w in zip(consumed, wasted)), default=0.0)
    bars.set_ylim(0, top * 1.6 if top > 0 else 1)
    points = [(k, num(e, "mean_s")) for k, e in zip(ks, entries)]
    points = [(k, m) for k, m in points if m is not None]
    ax.plot([k for k, _ in points], [m for _, m in points], marker="o", color="#d62728",
            linewidth=2, label="mean latency")
    ax.set_zorder(bars.get_zorder() + 1)   # the line over the bars
    ax.patch.set_visible(False)
    ax.set_xlabel("fan-out k")
    ax.set_ylabel("mean latency (s)")
    ax.set_xticks(sorted(set(ks)))
    ax.set_xticklabels([f"{k:g}" for k in sorted(set(ks))])
    if points:
        ax.set_ylim(0, max(m for _, m in points) * 1.25 or 1)
    return ax.get_legend_handles_labels()[0] + bars.get_legend_handles_labels()[0]


# ----------------------------------------------------------------------------- fig 10a

def speedup(entry):
    value = num(entry, "speedup")
    if value is None:
        floor, full = num(entry, "floor_mean_s"), num(entry, "full_mean_s")
        value = floor / full if floor is not None and full else None
    return value


def plot_fig10a(plt, data, out_dir):
    repeat = (data.get("sweeps") or {}).get("repeat") or []
    groups = group_sweep(repeat, "repeat_rate")
    lines = {}
    for key, entries in groups.items():
        points = [(float(e["repeat_rate"]), speedup(e)) for e in entries]
        points = [(x, y) for x, y in points if y is not None]
        if points:
            lines[key] = points
    if not lines:
        return None
    fig, axes = new_figure(plt, 1, width=5.2, height=3.8)
    ax = axes[0]
    for (workload, rate), points in lines.items():
        ax.plot([x for x, _ in points], [y for _, y in points], marker="o", linewidth=2,
                label=sweep_title(workload, rate))
    ax.axhline(1.0, color="black", linestyle="--", linewidth=1, label="no-reuse floor")
    top = max(y for points in lines.values() for _, y in points)
    ax.set_ylim(0, max(top, 1.0) * 1.2)
    ax.set_xlabel("repeat rate")
    ax.set_ylabel("speedup over no-reuse floor (×)")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    return save(plt, fig, out_dir, "fig10a.png")


# ----------------------------------------------------------------------------- main

# ----------------------------------------------------------------------------- load sweep

def sweep_points(data):
    """The points of `dynrt bench sweep` (one per workload, load and arm), or []."""
    points = data.get("points", [])
    if not isinstance(points, list):
        return []
    return [p for p in points if isinstance(p, dict) and isinstance(p.get("workload"), str)
            and isinstance(p.get("arm"), str) and is_number(p.get("load"))]


def plot_sweep(plt, data, out_dir, key, ylabel, name, with_floor):
    """Per workload, `key` of each arm against load (error bars: sd_s where there is one)."""
    points = sweep_points(data)
    if not points:
        return None
    workloads = ordered((p["workload"] for p in points), WORKLOAD_ORDER)
    arms = ordered((p["arm"] for p in points), ARM_ORDER)
    if not with_floor:
        arms = [a for a in arms if a != "floor"]
    fig, axes = new_figure(plt, len(workloads), width=4.4, height=3.6)
    handles = {}
    for ax, workload in zip(axes, workloads):
        for i, arm in enumerate(arms):
            rows = sorted((p for p in points if p["workload"] == workload and p["arm"] == arm),
                          key=lambda p: p["load"])
            xs = [p["load"] for p in rows if num(p, key) is not None]
            ys = [num(p, key) for p in rows if num(p, key) is not None]
            if not xs:
                continue
            style = {"color": "black", "linestyle": "--"} if arm == "floor" else {
                "color": arm_colour(arm, i)}
            sd = None
            if key == "ratio_to_floor":
                sd = [num(p, "sd_s") / num(p, "mean_s") * num(p, key)
                      if num(p, "sd_s") and num(p, "mean_s") else 0 for p in rows
                      if num(p, key) is not None]
            handles[arm] = ax.errorbar(xs, ys, yerr=sd, marker="o", markersize=3, capsize=2,
                                       linewidth=1.2, **style)
        ax.set_title(workload)
        ax.set_xlabel("load (share of the floor's saturation rate)")
        if ax.get_subplotspec().is_first_col():
            ax.set_ylabel(ylabel)
    shown = [a for a in arms if a in handles]
    legend_below(fig, [handles[a] for a in shown], [ARM_LABELS.get(a, a) for a in shown])
    return save(plt, fig, out_dir, name)


def plot_sweep_latency(plt, data, out_dir):
    return plot_sweep(plt, data, out_dir, "ratio_to_floor", "latency / no-reuse floor",
                      "sweep-latency.png", True)


def plot_sweep_wasted(plt, data, out_dir):
    return plot_sweep(plt, data, out_dir, "wasted_engine_s", "wasted engine-s per run",
                      "sweep-wasted.png", False)


def figures(data):
    """A sweep's figures for `dynrt bench sweep` (or `bursty`) output, else the bench's."""
    if "points" in data:
        return (plot_sweep_latency, plot_sweep_wasted)
    return (plot_fig8, plot_fig14, plot_fig9a, plot_fig10a)


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="plot.py",
        description="Plot `dynrt bench` results (results.json) as PNG figures: fig8.png "
                    "(latency / floor), fig14.png (C1/C2 breakdown), fig9a.png (fan-out "
                    "sweep), fig10a.png (repeat sweep). Figures without data are skipped.",
        epilog="exit status: 0 ok, 2 bad or missing input, 3 matplotlib not installed")
    parser.add_argument("results", metavar="RESULTS_JSON", help="results.json from dynrt bench")
    parser.add_argument("out_dir", metavar="OUT_DIR", help="directory for the PNGs (created)")
    return parser.parse_args(argv)


def import_pyplot():
    """matplotlib.pyplot on the Agg backend, or None when matplotlib is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def main(argv=None):
    args = parse_args(argv)
    try:
        data = load_results(args.results)
    except InputError as e:
        print(f"plot.py: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    plt = import_pyplot()
    if plt is None:
        print(NO_MATPLOTLIB, file=sys.stderr)
        return EXIT_NO_MATPLOTLIB
    os.makedirs(args.out_dir, exist_ok=True)
    written = [path for figure in figures(data) if (path := figure(plt, data, args.out_dir))]
    if not written:
        print(f"plot.py: {args.results} holds no plottable data; no plots written",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
