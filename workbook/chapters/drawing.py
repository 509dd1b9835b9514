"""What the chapters' figures are drawn with (matplotlib): shared colours, boxes, arrows, and `as_image`.

The figures are plain matplotlib `Figure`s, not registered with pyplot, so a notebook shows each one once;
a chapter module's `show_*` function returns one as a PNG image for a notebook cell's result.
"""

from __future__ import annotations

import io

THREAD_COLOURS = ("#cfe3f7", "#fbd9c4")
GROUP_COLOURS = ("#cfe3f7", "#fbd9c4", "#d8efd2", "#e6d8f2", "#fff1c2", "#f6d2dc")
EDGE = "#333333"
# one colour per block of a launch (a CUDA block, a Triton program), repeating
BLOCK_COLOURS = ("#8ecae6", "#ffb703", "#90be6d", "#f4a6c0", "#cdb4db", "#ffd6a5")


def as_image(figure, dpi: int = 90, *, tight: bool = False):
    """A figure as an IPython PNG image (`tight`: cropped to what is drawn)."""
    from IPython.display import Image

    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi, **({"bbox_inches": "tight"} if tight else {}))
    return Image(data=buffer.getvalue())


def canvas(width, height, xlim, ylim):
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


def arrow(axes, start, end, colour=EDGE, label=""):
    axes.annotate("", xy=end, xytext=start, arrowprops={"arrowstyle": "->", "color": colour, "linewidth": 1.1})
    if label:
        axes.text(
            (start[0] + end[0]) / 2, (start[1] + end[1]) / 2 + 0.12, label, fontsize=7.5, color="#444444", ha="center"
        )


def block_colour(number: int) -> str:
    return BLOCK_COLOURS[number % len(BLOCK_COLOURS)]


def block_outline(axes, left: float, lanes: int, label: str) -> None:
    """The frame around one block's `lanes` cells (drawn at x = left .. left + lanes, y = 1.7 .. 2.7), labelled above."""
    from matplotlib.patches import Rectangle

    axes.add_patch(Rectangle((left - 0.1, 1.55), lanes + 0.2, 1.3, fill=False, lw=1.2))
    axes.text(left + lanes / 2, 3.05, label, ha="center", fontsize=9)
