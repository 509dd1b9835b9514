"""Figures of chapters 02 and 03, drawn with matplotlib.

Each `show_*` function returns a PNG image for a notebook cell's result. The figures are plain
matplotlib `Figure`s, not registered with pyplot, so a notebook shows each one once.
"""

from __future__ import annotations

import io

THREAD_COLOURS = ("#cfe3f7", "#fbd9c4")
GROUP_COLOURS = ("#cfe3f7", "#fbd9c4", "#d8efd2", "#e6d8f2", "#fff1c2", "#f6d2dc")
EDGE = "#333333"


def as_image(figure, dpi: int = 90):
    """A figure as an IPython PNG image."""
    from IPython.display import Image

    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi)
    return Image(data=buffer.getvalue())


def _canvas(width, height, xlim, ylim):
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height))
    axes = figure.add_subplot()
    axes.set_xlim(*xlim)
    axes.set_ylim(*ylim)
    axes.axis("off")
    return figure, axes


def draw_box(axes, x, y, width, height, text, colour, fontsize=8.5, boxstyle="round,pad=0.03,rounding_size=0.08"):
    from matplotlib.patches import FancyBboxPatch

    axes.add_patch(
        FancyBboxPatch(
            (x - width / 2, y - height / 2),
            width,
            height,
            boxstyle=boxstyle,
            facecolor=colour,
            edgecolor=EDGE,
            linewidth=1,
        )
    )
    axes.text(x, y, text, ha="center", va="center", fontsize=fontsize, family="monospace")


def _arrow(axes, start, end, colour=EDGE, label=""):
    axes.annotate("", xy=end, xytext=start, arrowprops={"arrowstyle": "->", "color": colour, "linewidth": 1.1})
    if label:
        axes.text(
            (start[0] + end[0]) / 2, (start[1] + end[1]) / 2 + 0.12, label, fontsize=7.5, color="#444444", ha="center"
        )


# ---- chapter 02 ------------------------------------------------------------------------------------


def lltm_dataflow():
    """The LLTM cell: which tensors flow into which operations, and what the C++ forward returns."""
    figure, axes = _canvas(10, 5.6, (0, 10), (-0.5, 6))
    inputs, matmul, activation, update, output = "#e8eef7", "#f2f2f2", "#fff4d6", "#fde2e2", "#e3f4e1"
    draw_box(axes, 1.2, 5.2, 1.6, 0.55, "old_h", inputs)
    draw_box(axes, 3.0, 5.2, 1.6, 0.55, "input", inputs)
    draw_box(axes, 5.6, 5.2, 2.6, 0.55, "weights, bias", inputs)
    draw_box(axes, 8.6, 5.2, 1.6, 0.55, "old_cell", inputs)
    draw_box(axes, 2.1, 4.1, 3.0, 0.55, "X = cat([old_h, input])", matmul)
    draw_box(axes, 4.6, 3.0, 4.4, 0.55, "gate_weights = addmm(bias, X, weightsᵀ)", matmul)
    for x, text in [(2.0, "input gate i\nsigmoid"), (4.6, "output gate o\nsigmoid"), (7.2, "candidate z\nELU")]:
        draw_box(axes, x, 1.9, 2.2, 0.7, text, activation)
        _arrow(axes, (4.6, 2.72), (x, 2.27))
    draw_box(axes, 7.6, 0.65, 3.4, 0.6, "new_cell = old_cell + z·i", update)
    draw_box(axes, 3.2, 0.65, 3.6, 0.6, "new_h = tanh(new_cell)·o", output)
    _arrow(axes, (1.2, 4.92), (1.7, 4.38))
    _arrow(axes, (3.0, 4.92), (2.5, 4.38))
    _arrow(axes, (2.1, 3.82), (3.4, 3.28))
    _arrow(axes, (5.6, 4.92), (5.2, 3.28))
    _arrow(axes, (8.6, 4.92), (8.6, 0.95))
    _arrow(axes, (2.0, 1.55), (6.6, 0.95))
    _arrow(axes, (7.2, 1.55), (7.4, 0.95))
    _arrow(axes, (4.6, 1.55), (3.6, 0.95))
    _arrow(axes, (5.9, 0.65), (5.0, 0.65))
    axes.text(
        5.0,
        5.85,
        "a concatenation and one matrix product (grey), then elementwise work, which the C++ forward does in one loop",
        ha="center",
        fontsize=8.5,
        color="#444444",
    )
    axes.text(
        5.4,
        -0.25,
        "the forward also returns gates = [i | o | z] and X, which the backward reads",
        ha="center",
        va="center",
        fontsize=7.5,
        color="#444444",
    )
    figure.tight_layout()
    return figure


def show_lltm_dataflow():
    return as_image(lltm_dataflow())


def timing_bars(seconds: dict):
    """Bars of {(statement, version): seconds}, one group per statement, one bar per version measured."""
    from matplotlib.figure import Figure

    statements = list(dict.fromkeys(statement for statement, _ in seconds))
    versions = list(dict.fromkeys(version for _, version in seconds))
    figure = Figure(figsize=(6.5, 3.2))
    axes = figure.add_subplot()
    width = 0.8 / len(versions)
    for k, version in enumerate(versions):
        measured = [i for i, statement in enumerate(statements) if (statement, version) in seconds]
        positions = [i + (k - (len(versions) - 1) / 2) * width for i in measured]
        heights = [seconds[statements[i], version] * 1e6 for i in measured]
        axes.bar(positions, heights, width, label=version, color=GROUP_COLOURS[k % len(GROUP_COLOURS)], edgecolor=EDGE)
    axes.set_xticks(range(len(statements)), statements)
    axes.set_ylabel("median time per call (µs)")
    axes.legend(frameon=False)
    axes.spines[["top", "right"]].set_visible(False)
    figure.tight_layout()
    return figure


def show_timing_bars(seconds: dict):
    return as_image(timing_bars(seconds))


# ---- chapter 03 ------------------------------------------------------------------------------------


def scatter_flow(src, index, out, *, reduction="sum"):
    """Rows of a 2-D src (n, features) flowing to the groups index names, and the reduced groups."""
    n, groups = src.shape[0], out.shape[0]
    height = max(n, groups)
    figure, axes = _canvas(8, 0.55 * height + 1.2, (0, 10), (-0.9, height + 0.2))

    def row_text(values):
        return "[" + ", ".join(f"{v:g}" for v in values.tolist()) + "]"

    def y_of(position, count):
        return height - 0.5 - position * height / count

    axes.text(1.9, height, "src (one row per element)", ha="center", fontsize=9)
    axes.text(8.0, height, f"output: {reduction} per group", ha="center", fontsize=9)
    received = [int((index == g).sum()) for g in range(groups)]
    for g in range(groups):
        label = f"group {g}: {row_text(out[g])}" + ("  (empty)" if received[g] == 0 else "")
        colour = GROUP_COLOURS[g % len(GROUP_COLOURS)] if received[g] else "#eeeeee"
        draw_box(axes, 8.0, y_of(g, groups), 3.6, 0.6, label, colour, fontsize=8)
    for j in range(n):
        group = int(index[j])
        colour = GROUP_COLOURS[group % len(GROUP_COLOURS)]
        draw_box(axes, 1.9, y_of(j, n), 3.0, 0.6, f"src[{j}] = {row_text(src[j])}", colour, fontsize=8)
        _arrow(axes, (3.45, y_of(j, n)), (6.15, y_of(group, groups)))
        axes.text(3.55, y_of(j, n) + 0.12, f"index[{j}] = {group}", fontsize=7.5, color="#444444")
    axes.text(5.0, -0.6, "a group no element is sent to holds 0", ha="center", fontsize=8, color="#444444")
    figure.tight_layout()
    return figure


def show_scatter_flow(src, index, out, *, reduction="sum"):
    return as_image(scatter_flow(src, index, out, reduction=reduction))


def _grid(axes, x0, y0, rows, columns, colour_of, cell=0.45, label=None):
    from matplotlib.patches import Rectangle

    for r in range(rows):
        for c in range(columns):
            axes.add_patch(
                Rectangle(
                    (x0 + c * cell, y0 - (r + 1) * cell),
                    cell,
                    cell,
                    facecolor=colour_of(r, c),
                    edgecolor=EDGE,
                    linewidth=0.8,
                )
            )
    if label:
        axes.text(x0 + columns * cell / 2, y0 + 0.15, label, ha="center", fontsize=8)


def thread_split(n: int = 8, columns: int = 4, groups: int = 3):
    """How the CPU kernel splits the work between two threads: by columns, or by elements with merged copies."""
    figure, axes = _canvas(10, 4.8, (0, 10), (0, 5.3))
    top = 4.5

    def by_column(row, column):
        return THREAD_COLOURS[0] if column < columns // 2 else THREAD_COLOURS[1]

    def by_row(row, column):
        return THREAD_COLOURS[0] if row < n // 2 else THREAD_COLOURS[1]

    axes.text(2.3, 5.1, "split the columns (a batch of rows, or a large output)", ha="center", fontsize=9)
    _grid(axes, 0.3, top, n, columns, by_column, label="src: n elements × columns")
    _grid(axes, 3.0, top, groups, columns, by_column, label="output")
    _arrow(axes, (2.25, top - 1.2), (2.95, top - 0.6))
    axes.text(
        2.3,
        top - n * 0.45 - 0.3,
        "each thread writes only its own columns:\nno two threads touch one output element",
        ha="center",
        va="top",
        fontsize=7.5,
        color="#444444",
    )

    axes.text(7.3, 5.1, "split the elements (few rows, e.g. [edges, features])", ha="center", fontsize=9)
    _grid(axes, 5.0, top, n, columns, by_row, label="src")
    small = 0.3
    for k, (label, y) in enumerate([("copy of thread 0", top), ("copy of thread 1", top - 1.4)]):
        _grid(axes, 7.6, y, groups, columns, lambda row, column, k=k: THREAD_COLOURS[k], cell=small, label=label)
    _grid(axes, 7.6, top - 2.8, groups, columns, lambda row, column: "#ffffff", cell=small, label="output")
    _arrow(axes, (6.85, top - 0.9), (7.55, top - 0.45))
    _arrow(axes, (6.85, top - 2.7), (7.55, top - 1.85))
    _arrow(axes, (9.05, top - 0.45), (9.05, top - 3.25))
    axes.text(9.15, top - 1.9, "merge,\nthread 0\nfirst", fontsize=7.5, color="#444444", va="center")
    axes.text(
        7.3,
        0.3,
        "private copies: no sharing while reducing; merging in order keeps\n'the first position wins a tie'",
        ha="center",
        fontsize=7.5,
        color="#444444",
    )
    figure.tight_layout()
    return figure


def show_thread_split():
    return as_image(thread_split())
