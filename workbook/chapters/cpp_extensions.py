"""The code behind chapter 02's figures (02_cpp_extensions.ipynb): the LLTM's data flow and timing bars."""

from __future__ import annotations

from workbook.chapters.drawing import EDGE, GROUP_COLOURS, arrow, as_image, canvas, draw_box


def lltm_dataflow():
    """The LLTM cell: which tensors flow into which operations, and what the C++ forward returns."""
    figure, axes = canvas(10, 5.6, (0, 10), (-0.5, 6))
    inputs, matmul, activation, update, output = "#e8eef7", "#f2f2f2", "#fff4d6", "#fde2e2", "#e3f4e1"
    draw_box(axes, 1.2, 5.2, 1.6, 0.55, "old_h", inputs)
    draw_box(axes, 3.0, 5.2, 1.6, 0.55, "input", inputs)
    draw_box(axes, 5.6, 5.2, 2.6, 0.55, "weights, bias", inputs)
    draw_box(axes, 8.6, 5.2, 1.6, 0.55, "old_cell", inputs)
    draw_box(axes, 2.1, 4.1, 3.0, 0.55, "X = cat([old_h, input])", matmul)
    draw_box(axes, 4.6, 3.0, 4.4, 0.55, "gate_weights = addmm(bias, X, weightsᵀ)", matmul)
    for x, text in [(2.0, "input gate i\nsigmoid"), (4.6, "output gate o\nsigmoid"), (7.2, "candidate z\nELU")]:
        draw_box(axes, x, 1.9, 2.2, 0.7, text, activation)
        arrow(axes, (4.6, 2.72), (x, 2.27))
    draw_box(axes, 7.6, 0.65, 3.4, 0.6, "new_cell = old_cell + z·i", update)
    draw_box(axes, 3.2, 0.65, 3.6, 0.6, "new_h = tanh(new_cell)·o", output)
    arrow(axes, (1.2, 4.92), (1.7, 4.38))
    arrow(axes, (3.0, 4.92), (2.5, 4.38))
    arrow(axes, (2.1, 3.82), (3.4, 3.28))
    arrow(axes, (5.6, 4.92), (5.2, 3.28))
    arrow(axes, (8.6, 4.92), (8.6, 0.95))
    arrow(axes, (2.0, 1.55), (6.6, 0.95))
    arrow(axes, (7.2, 1.55), (7.4, 0.95))
    arrow(axes, (4.6, 1.55), (3.6, 0.95))
    arrow(axes, (5.9, 0.65), (5.0, 0.65))
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
