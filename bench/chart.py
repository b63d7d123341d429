"""The README chart: processing rate, bulk enqueue rate and idle pickup latency of
pgworkerd beside each system measured in the same run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.report import OUR_ROWS, Row

OURS_COLOUR = "#1f6fb4"
OTHER_COLOUR = "#9aa5b1"
REFERENCE_COLOUR = "#d9dde2"


def draw(table: list[Row], title: str, path: Path, targets: dict[str, float] | None = None) -> bool:
    """Write the PNG; False (and a note) when matplotlib is missing (`pip install
    -e '.[bench]'`)."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display: files only
        import matplotlib.pyplot as plt
        from matplotlib.ticker import StrMethodFormatter
    except ImportError:
        print("note: matplotlib is not installed (pip install -e '.[bench]'): no chart")
        return False

    labels = [
        r.label.replace(" (reference)", "\n(reference)").replace(", ", ",\n", 1) for r in table
    ]
    colours = [
        OURS_COLOUR if r.name in OUR_ROWS else (OTHER_COLOUR if r.is_peer else REFERENCE_COLOUR)
        for r in table
    ]
    ys = list(range(len(table)))[::-1]  # first row on top

    fig, axes = plt.subplots(1, 3, figsize=(15, 1.2 + 0.75 * len(table)), sharey=True)
    targets = targets or {}
    panels = [
        ("no-op processing, jobs/s (higher is better)", "process", [r.process for r in table]),
        (
            "bulk enqueue, jobs/s (higher is better)",
            "enqueue_bulk",
            [r.enqueue_bulk for r in table],
        ),
    ]
    for ax, (name, key, values) in zip(axes[:2], panels, strict=True):
        _target(ax, targets.get(key))
        ax.barh(ys, [v or 0 for v in values], color=colours, edgecolor="#555", linewidth=0.5)
        for y, v in zip(ys, values, strict=True):
            ax.text(v or 0, y, f" {v:,.0f}" if v else " -", va="center", fontsize=8)
        ax.set_title(name, fontsize=10)
        ax.margins(x=0.25)
        ax.xaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    ax = axes[2]
    _target(ax, targets.get("lat_p99"), "p99 target")
    for y, r, colour in zip(ys, table, colours, strict=True):
        if r.lat_p99 is not None:
            ax.barh(y, r.lat_p99, color="white", edgecolor=colour, linewidth=1.5, hatch="///")
        if r.lat_p50 is not None:
            ax.barh(y, r.lat_p50, color=colour, edgecolor="#555", linewidth=0.5)
            p99 = "-" if r.lat_p99 is None else f"{r.lat_p99:.1f}"
            ax.text(
                max(r.lat_p50, r.lat_p99 or 0),
                y,
                f" {r.lat_p50:.1f} / {p99}",
                va="center",
                fontsize=8,
            )
    ax.set_title(
        "idle pickup latency p50 (solid) / p99 (hatched), ms\n(lower is better)", fontsize=10
    )
    ax.margins(x=0.3)
    axes[0].set_yticks(ys, labels, fontsize=9)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _target(ax: Any, at: float | None, label: str = "target") -> None:
    if at is not None:
        ax.axvline(at, color="#c0392b", linestyle="--", linewidth=1)
        ax.text(
            at,
            0.995,
            f" {label}",
            color="#c0392b",
            fontsize=8,
            va="top",
            transform=ax.get_xaxis_transform(),
        )
