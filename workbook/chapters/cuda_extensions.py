"""The code behind chapter 05's figures (05_cuda_extensions.ipynb), drawn from what the chapter computes:
a launch's grid, blocks and threads, and a race between threads (from `interleaving`'s model).

Each `show_*` function returns an IPython PNG image for a notebook cell's result; the `*_figure`
functions return the matplotlib Figure itself (for tests, or to save elsewhere).
"""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from workbook.chapters.drawing import as_image, block_colour, block_outline

# ---- a launch's grid, blocks and threads --------------------------------------------------


def launch_figure(n: int = 10, threads_per_block: int = 4, max_blocks: int | None = 2) -> Figure:
    """Threads of a 1-D launch and the elements they handle: one launch with ceil(n / threads) blocks,
    one with the grid capped at `max_blocks` (a grid-stride loop)."""
    layouts = [
        ("one element per thread", None),
        (f"grid capped at {max_blocks} blocks: a grid-stride loop", max_blocks),
    ]
    figure = Figure(figsize=(10, 4.8))
    for row, (title, cap) in enumerate(layouts):
        axes = figure.add_subplot(2, 1, row + 1)
        blocks = -(-n // threads_per_block)
        blocks = min(blocks, cap) if cap else blocks
        stride = blocks * threads_per_block
        for block in range(blocks):
            colour = block_colour(block)
            left = block * (threads_per_block + 0.6)
            block_outline(axes, left, threads_per_block, f"blockIdx.x = {block}")
            for thread in range(threads_per_block):
                first = block * threads_per_block + thread
                elements = list(range(first, n, stride))
                x = left + thread
                axes.add_patch(Rectangle((x, 1.7), 0.9, 1.0, color=colour if elements else "#eeeeee"))
                axes.text(x + 0.45, 2.35, f"t{thread}", ha="center", fontsize=8)
                axes.text(x + 0.45, 1.9, ",".join(map(str, elements)) or "idle", ha="center", fontsize=8)
                for element in elements:
                    axes.annotate(
                        "",
                        xy=(element + 0.45, 0.9),
                        xytext=(x + 0.45, 1.7),
                        arrowprops=dict(arrowstyle="->", color=colour, lw=1),
                    )
        for element in range(n):
            owner = (element % stride) // threads_per_block
            axes.add_patch(Rectangle((element, 0), 0.9, 0.9, color=block_colour(owner)))
            axes.text(element + 0.45, 0.35, str(element), ha="center", fontsize=8)
        axes.text(-0.2, 0.35, "elements", ha="right", fontsize=9)
        axes.set_title(f"n = {n}, {threads_per_block} threads per block, {blocks} blocks: {title}", fontsize=10)
        axes.set_xlim(-2.2, max(n, blocks * (threads_per_block + 0.6)) + 0.2)
        axes.set_ylim(-0.2, 3.4)
        axes.axis("off")
    figure.tight_layout()
    return figure


def show_launch(n: int = 10, threads_per_block: int = 4, max_blocks: int | None = 2):
    return as_image(launch_figure(n, threads_per_block, max_blocks), tight=True)


# ---- chapter 05: a race, and the atomic that prevents it ----------------------------------------------


def race_figure(threads: int = 4) -> Figure:
    """`threads` threads each adding 1 to one counter, under a round-robin interleaving: with a load and a
    store the counter ends at 1; with an atomic add at `threads`. Drawn from `interleaving`'s trace."""
    from workbook.chapters import interleaving

    def add_one(memory):
        old = yield interleaving.load(memory, 0)
        yield interleaving.store(memory, 0, old + 1)

    def add_one_atomically(memory):
        yield interleaving.atomic_add(memory, 0, 1)

    figure = Figure(figsize=(10, 4.6))
    for row, (title, body) in enumerate(
        [("load, then store: updates are lost", add_one), ("atomic add: one indivisible step", add_one_atomically)]
    ):
        memory = [0]
        trace = interleaving.run([body(memory) for _ in range(threads)], "round robin")
        axes = figure.add_subplot(2, 1, row + 1)
        counter = 0  # the counter's value after each step, replayed from the trace
        for step, (thread, operation) in enumerate(trace):
            before = counter
            if operation.kind == "store":
                counter = operation.value
            elif operation.kind == "atomic_add":
                counter += operation.value
            label = {
                "load": f"load → {before}",
                "store": f"store {operation.value}",
                "atomic_add": f"add 1: {before}→{counter}",
            }[operation.kind]
            colour = {"load": "#8ecae6", "store": "#ffb703", "atomic_add": "#90be6d"}[operation.kind]
            axes.add_patch(Rectangle((step, threads - 1 - thread), 0.92, 0.8, color=colour))
            axes.text(step + 0.46, threads - 1 - thread + 0.4, label, ha="center", va="center", fontsize=8)
            axes.text(step + 0.46, -0.55, str(counter), ha="center", fontsize=9)
        for thread in range(threads):
            axes.text(-0.15, threads - 1 - thread + 0.4, f"thread {thread}", ha="right", va="center", fontsize=9)
        axes.text(-0.15, -0.55, "counter", ha="right", fontsize=9)
        axes.set_title(
            f"{threads} threads add 1 to a counter that starts at 0 — {title}; it ends at {memory[0]}", fontsize=10
        )
        axes.set_xlim(-1.4, 2 * threads + 0.2)
        axes.set_ylim(-0.9, threads)
        axes.axis("off")
    figure.tight_layout()
    return figure


def show_race(threads: int = 4):
    return as_image(race_figure(threads), tight=True)


# ---- chapter 06: warp_perspective next to cv2 ---------------------------------------------------------
