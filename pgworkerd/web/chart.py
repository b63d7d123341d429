"""The throughput chart, drawn on the server as inline SVG: no chart library, no script,
nothing fetched. Its numbers are ints and its text goes through markupsafe, so the
markup is safe to insert as it is."""

from __future__ import annotations

from collections.abc import Sequence

from markupsafe import Markup, escape

WIDTH, HEIGHT = 240, 40  # viewBox units; the stylesheet sizes the element
BAR = WIDTH // 60  # one bar a minute over the hour


def throughput_svg(per_minute: Sequence[int], queue: str) -> Markup:
    total = sum(per_minute)
    peak = max(per_minute, default=0)
    label = escape(
        f"Queue {queue}: {total} jobs finished in the last hour, at most {peak} in a minute"
    )
    bars = []
    for index, count in enumerate(per_minute):
        if count:
            # At least one unit tall: a minute with one job is visible next to a peak.
            height = max(1, round(HEIGHT * count / peak))
            bars.append(
                f'<rect x="{index * BAR}" y="{HEIGHT - height}" width="{BAR - 1}" '
                f'height="{height}"><title>{count}</title></rect>'
            )
    return Markup(
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{label}" '
        f'preserveAspectRatio="none"><title>{label}</title>'
        f'<line x1="0" y1="{HEIGHT}" x2="{WIDTH}" y2="{HEIGHT}" class="axis"/>'
        + "".join(bars)
        + "</svg>"
    )
