"""The figure of chapter 11: how the blocks of a Triton launch cover a tensor.

from workbook.chapters import triton_kernels
triton_kernels.show_blocks()     # a PNG for a notebook cell's result
triton_kernels.blocks_figure()   # the matplotlib Figure itself
"""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from workbook.chapters.drawing import as_image, block_colour, block_outline

MASKED = "#eeeeee"


def _vector_panel(axes, n: int, block: int) -> None:
    """A 1-D launch: each program's BLOCK lanes, their offsets, and the elements they reach."""
    programs = -(-n // block)
    for program in range(programs):
        colour = block_colour(program)
        left = program * (block + 0.8)
        block_outline(axes, left, block, f"program_id(0) = {program}")
        for lane in range(block):
            offset = program * block + lane
            inside = offset < n
            x = left + lane
            axes.add_patch(Rectangle((x, 1.7), 0.9, 1.0, color=colour if inside else MASKED))
            axes.text(x + 0.45, 2.35, str(offset), ha="center", fontsize=8)
            axes.text(x + 0.45, 1.85, "load" if inside else "mask", ha="center", fontsize=7)
            if inside:
                axes.annotate(
                    "", xy=(offset + 0.45, 0.9), xytext=(x + 0.45, 1.7), arrowprops=dict(arrowstyle="->", color=colour)
                )
    for element in range(n):
        colour = block_colour(element // block)
        axes.add_patch(Rectangle((element, 0), 0.9, 0.9, color=colour))
        axes.text(element + 0.45, 0.35, str(element), ha="center", fontsize=8)
    axes.text(-0.3, 0.35, "x", ha="right", fontsize=10)
    axes.text(-0.3, 2.1, "offsets", ha="right", fontsize=9)
    axes.set_title(
        f"n = {n}, BLOCK = {block}: {programs} programs; offsets = program_id(0) * BLOCK + tl.arange(0, BLOCK), "
        f"mask = offsets < n",
        fontsize=10,
    )
    axes.set_xlim(-2.2, max(n, programs * (block + 0.8)) + 0.2)
    axes.set_ylim(-0.2, 3.5)
    axes.axis("off")


def _matrix_panel(axes, rows: int, columns: int, block_rows: int, block_columns: int) -> None:
    """A 2-D launch over a matrix: program (r, c) owns one BLOCK_ROWS x BLOCK_F tile; tiles overhang the edges."""
    grid = (-(-rows // block_rows), -(-columns // block_columns))
    for r in range(grid[0]):
        for c in range(grid[1]):
            colour = block_colour(r * grid[1] + c)
            for i in range(block_rows):
                for j in range(block_columns):
                    row, column = r * block_rows + i, c * block_columns + j
                    inside = row < rows and column < columns
                    y = -row
                    axes.add_patch(
                        Rectangle(
                            (column, y),
                            0.92,
                            0.92,
                            facecolor=colour if inside else "none",
                            edgecolor=colour,
                            ls="-" if inside else "--",
                            lw=1,
                        )
                    )
            axes.text(
                c * block_columns + block_columns / 2 - 0.05,
                -r * block_rows - block_rows / 2 + 0.55,
                f"({r}, {c})",
                ha="center",
                va="center",
                fontsize=9,
                fontweight="bold",
            )
    axes.add_patch(Rectangle((-0.08, -rows + 0.92), columns + 0.08, rows + 0.08, fill=False, lw=2))
    axes.set_title(
        f"a {rows} x {columns} matrix, tiles of {block_rows} x {block_columns}: a grid of {grid[0]} x {grid[1]} "
        "programs (program_id(0), program_id(1));\ndashed lanes lie outside the matrix and are masked off",
        fontsize=10,
    )
    axes.set_xlim(-0.5, grid[1] * block_columns + 0.5)
    axes.set_ylim(-grid[0] * block_rows + 0.5, 1.5)
    axes.set_aspect("equal")
    axes.axis("off")


def blocks_figure(n: int = 10, block: int = 4, matrix=(5, 7), tile=(2, 4)) -> Figure:
    """A 1-D launch over n elements in blocks of `block`, and a 2-D launch over a matrix in tiles."""
    figure = Figure(figsize=(10, 6.6))
    top, bottom = figure.subplots(2, 1, height_ratios=[1, 1.35])
    _vector_panel(top, n, block)
    _matrix_panel(bottom, *matrix, *tile)
    figure.tight_layout()
    return figure


def show_blocks(n: int = 10, block: int = 4, matrix=(5, 7), tile=(2, 4)):
    return as_image(blocks_figure(n, block, matrix, tile))
