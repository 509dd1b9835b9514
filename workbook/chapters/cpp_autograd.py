"""The code behind chapter 03's figures (03_cpp_autograd.ipynb): how scatter groups elements, and how
threads split the work."""

from __future__ import annotations

from workbook.chapters.drawing import EDGE, GROUP_COLOURS, THREAD_COLOURS, arrow, as_image, canvas, draw_box


def scatter_flow(src, index, out, *, reduction="sum"):
    """Rows of a 2-D src (n, features) flowing to the groups index names, and the reduced groups."""
    n, groups = src.shape[0], out.shape[0]
    height = max(n, groups)
    figure, axes = canvas(8, 0.55 * height + 1.2, (0, 10), (-0.9, height + 0.2))

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
        arrow(axes, (3.45, y_of(j, n)), (6.15, y_of(group, groups)))
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
    figure, axes = canvas(10, 4.8, (0, 10), (0, 5.3))
    top = 4.5

    def by_column(row, column):
        return THREAD_COLOURS[0] if column < columns // 2 else THREAD_COLOURS[1]

    def by_row(row, column):
        return THREAD_COLOURS[0] if row < n // 2 else THREAD_COLOURS[1]

    axes.text(2.3, 5.1, "split the columns (a batch of rows, or a large output)", ha="center", fontsize=9)
    _grid(axes, 0.3, top, n, columns, by_column, label="src: n elements × columns")
    _grid(axes, 3.0, top, groups, columns, by_column, label="output")
    arrow(axes, (2.25, top - 1.2), (2.95, top - 0.6))
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
    arrow(axes, (6.85, top - 0.9), (7.55, top - 0.45))
    arrow(axes, (6.85, top - 2.7), (7.55, top - 1.85))
    arrow(axes, (9.05, top - 0.45), (9.05, top - 3.25))
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
