"""build/bench/results.json and the plots drawn from it (matplotlib PNGs next to it)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

SCATTER_MARKERS = {"random": "o", "sorted": "^"}
LAYOUT_COLOURS = {"1-D": "#1f77b4", "[N, 64]": "#ff7f0e"}


def write_json(results: dict, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "results.json"
    path.write_text(json.dumps(results, indent=1))
    return path


def _figure(width, height, panels=1):
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), layout="constrained")
    return figure, figure.subplots(1, panels, squeeze=False)[0]


def _ratio_line(axes):
    axes.axhline(1.0, color="#333333", linewidth=0.8)


def scatter_ratio_plot(rows, path: Path) -> None:
    """Ratio (native / ours) against the number of groups, one panel per op, every size and dtype."""
    ops = sorted({row["op"] for row in rows}, key=["sum", "mean", "max", "min"].index)
    figure, panels = _figure(3.2 * len(ops), 3.4, len(ops))
    for axes, op in zip(panels, ops):
        _scatter_points(axes, rows, op, "ratio")
        _ratio_line(axes)
        axes.set_xscale("log")
        axes.set_yscale("log")
        axes.set_title(f"scatter_{op}")
        axes.set_xlabel("groups")
    panels[0].set_ylabel("native time / ours (> 1: ours faster)")
    panels[0].legend(fontsize="x-small")
    figure.savefig(path, dpi=90)


def _scatter_points(axes, rows, op, value_key) -> None:
    """One marker series per (index order, layout) of `op`'s rows: groups against row[value_key]."""
    for (order, marker), (layout, colour) in itertools.product(SCATTER_MARKERS.items(), LAYOUT_COLOURS.items()):
        chosen = [row for row in rows if row["op"] == op and row["index"] == order and row["layout"] == layout]
        axes.scatter(
            [row["groups"] for row in chosen],
            [row[value_key] for row in chosen],
            marker=marker,
            color=colour,
            label=f"{order}, {layout}",
            s=16,
            alpha=0.8,
        )


def scatter_bandwidth_plot(rows, path: Path) -> None:
    """scatter_sum's and scatter_mean's bandwidth as a percentage of a copy's, against the groups."""
    figure, panels = _figure(7, 3.4, 2)
    for axes, op in zip(panels, ("sum", "mean")):
        _scatter_points(axes, rows, op, "percent_of_copy")
        axes.axhline(50, color="#999999", linestyle="--", linewidth=0.8)
        axes.set_xscale("log")
        axes.set_title(f"scatter_{op}")
        axes.set_xlabel("groups")
    panels[0].set_ylabel("% of copy bandwidth")
    panels[0].legend(fontsize="x-small")
    figure.savefig(path, dpi=90)


def bar_plot(labels, values, ylabel, title, path: Path, reference: float | None = None) -> None:
    figure, (axes,) = _figure(max(4.0, 0.9 * len(labels)), 3.4)
    axes.bar(range(len(values)), values, color="#7aa6d6")
    axes.set_xticks(range(len(labels)), labels, rotation=30, ha="right", fontsize="small")
    if reference is not None:
        axes.axhline(reference, color="#333333", linewidth=0.8)
    axes.set_ylabel(ylabel)
    axes.set_title(title)
    figure.savefig(path, dpi=90)


def warp_plot(rows, path: Path) -> None:
    """Per image size, the direct OpenCV call's time and pip cv2's, each over ours, side by side."""
    figure, (axes,) = _figure(6, 3.4)
    positions = range(len(rows))
    for offset, (key, label, colour) in zip(
        (-0.2, 0.2), (("direct_ratio", "direct C++ call", "#7aa6d6"), ("cv2_ratio", "pip cv2", "#e3a857"))
    ):
        axes.bar([p + offset for p in positions], [row[key] for row in rows], width=0.4, label=label, color=colour)
    axes.axhline(1 / 1.1, color="#999999", linestyle="--", linewidth=0.8, label="ours 1.1x slower")
    _ratio_line(axes)
    axes.set_xticks(positions, [f"{row['side']}² x {row['channels']}" for row in rows], fontsize="small")
    axes.set_ylabel("their time / ours (> 1: ours faster)")
    axes.set_title("warp_perspective")
    axes.legend(fontsize="x-small")
    figure.savefig(path, dpi=90)


def draw_plots(results: dict, folder: Path) -> list[Path]:
    """Every plot the results allow; returns their paths."""
    drawn = []
    sections = results["sections"]
    if sections.get("scatter"):
        for name, draw in (
            ("scatter_ratios.png", scatter_ratio_plot),
            ("scatter_bandwidth.png", scatter_bandwidth_plot),
        ):
            draw(sections["scatter"], folder / name)
            drawn.append(folder / name)
    if sections.get("lltm"):
        labels = [f"{row['task']}\n{pair}" for row in sections["lltm"] for pair in row["ratios"]]
        values = [ratio for row in sections["lltm"] for ratio in row["ratios"].values()]
        bar_plot(labels, values, "speed-up (> 1: first faster)", "LLTM cell", folder / "lltm.png", reference=1.0)
        drawn.append(folder / "lltm.png")
    if sections.get("warp"):
        warp_plot(sections["warp"], folder / "warp.png")
        drawn.append(folder / "warp.png")
    if sections.get("overhead"):
        bar_plot(
            [row["kind"] for row in sections["overhead"]],
            [row["seconds"] * 1e6 for row in sections["overhead"]],
            "µs per call",
            "calling a function that does nothing",
            folder / "overhead.png",
        )
        drawn.append(folder / "overhead.png")
    return drawn
