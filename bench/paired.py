"""The throughput targets' figures, taken on pairs run back to back in each repetition.

The bench's repetitions run every row in turn, so a row's median and raw's are taken
minutes apart, and the shared disk and the neighbours move a 4-second raw run and a
7-second pgworkerd run apart (round 14: the same code read 53 % and 61 % of raw ten
minutes apart). Each repetition therefore runs raw 2x100 between the two judged rows,
each of them back to back with it, and which side goes first swaps every repetition
(the second run of a pair is ~5 % slower with the same code: bench/worker_abab.py).
A target's figure weighs both orders alike: the median of the ratios of the
repetitions where ours ran first and the median of those where raw ran first, their
geometric mean (an odd number of repetitions has one order more often: a plain median
then leaned ~2-5 % towards the order that ran more). Each ratio and their range are
printed beside it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from bench.report import OURS_INFO, OURS_TUNED, RAW, process_figure
from bench.stats import median

# The rows judged against raw, each run next to it in every repetition.
JUDGED = (OURS_TUNED, OURS_INFO)


def order(names: Iterable[str], rep: int) -> list[str]:
    """Repetition `rep`'s running order (reps count from 1): the other rows first, as
    given, then the tuned row, raw and the info row, so that each judged row runs back
    to back with raw; in even repetitions the block is reversed, so each judged row runs
    first in one repetition and second in the next."""
    names = list(names)
    block = [name for name in (OURS_TUNED, RAW, OURS_INFO) if name in names]
    if rep % 2 == 0:
        block.reverse()
    return [name for name in names if name not in block] + block


def schedule(modes: Iterable[str], names: Iterable[str], rep: int) -> list[tuple[str, str]]:
    """Repetition `rep`'s runs as (mode, row): the modes in turn, and within each mode
    the rows in `order`, so that a judged row and raw run back to back in one mode
    (rows outer, modes inner, would put the other modes' runs between the two)."""
    rows = order(names, rep)
    return [(mode, name) for mode in modes for name in rows]


@dataclass
class Pair:
    rep: int
    ours_first: bool
    ours_jps: float
    raw_jps: float

    @property
    def ratio(self) -> float:
        return self.ours_jps / self.raw_jps


@dataclass
class PairedFigure:
    name: str
    pairs: list[Pair]

    @property
    def median(self) -> float:
        value = median(p.ratio for p in self.pairs)
        assert value is not None  # a figure is only made from one pair or more
        return value

    def _order_median(self, ours_first: bool) -> float | None:
        return median(p.ratio for p in self.pairs if p.ours_first is ours_first)

    @property
    def value(self) -> float:
        """The target's figure: the geometric mean of the two orders' medians, or the
        plain median when only one order ran (then it leans towards that order)."""
        ours_first, raw_first = self._order_median(True), self._order_median(False)
        if ours_first is None or raw_first is None:
            return self.median
        return math.sqrt(ours_first * raw_first)

    @property
    def both_orders(self) -> bool:
        return len({p.ours_first for p in self.pairs}) == 2

    @property
    def low(self) -> float:
        return min(p.ratio for p in self.pairs)

    @property
    def high(self) -> float:
        return max(p.ratio for p in self.pairs)

    def shown(self) -> str:
        """The figure as the targets print it: its value, how it was made, the range."""
        how = (
            "both orders' medians weighed alike"
            if self.both_orders
            else "one order only: leans towards it"
        )
        return (
            f"{self.value * 100:.0f} % ({len(self.pairs)} paired repetitions, {how}; "
            f"range {self.low * 100:.0f}-{self.high * 100:.0f} %)"
        )


def figures(records: list[dict[str, Any]]) -> dict[str, PairedFigure]:
    """Each judged row's ratios to raw, one per repetition in which both finished every
    job; a row with no such repetition has no figure. `records` are in the order they
    ran: which of a pair ran first is read from it."""
    # (name, rep) -> (position in the run, record): records are in the order they ran
    by_rep: dict[tuple[str, int], tuple[int, dict[str, Any]]] = {}
    for position, record in enumerate(records):
        if record["mode"] == "throughput":
            by_rep[(record["name"], record["rep"])] = (position, record)
    out = {}
    for name in JUDGED:
        pairs = []
        for (row, rep), (position, record) in sorted(by_rep.items(), key=lambda i: i[0][1]):
            if row != name or (RAW, rep) not in by_rep:
                continue
            raw_position, raw = by_rep[(RAW, rep)]
            ours_jps, raw_jps = process_figure(record), process_figure(raw)
            if ours_jps is None or not raw_jps:
                continue
            pairs.append(Pair(rep, position < raw_position, ours_jps, raw_jps))
        if pairs:
            out[name] = PairedFigure(name, pairs)
    return out


def markdown(paired: dict[str, PairedFigure], labels: dict[str, str]) -> list[str]:
    """The summary's section: every repetition's pair, its ratio, the median and range."""
    if not paired:
        return []
    lines = [
        "Processing against raw 2x100, paired (the targets' figure): in each repetition "
        "raw ran between the tuned and the info rows, back to back with each, which side "
        "first swapped every repetition; the figure is the geometric mean of the median "
        "ratio of the repetitions where ours ran first and that of those where raw ran "
        "first (the table's columns are each row's own median).",
        "",
        "| row | rep | first | jobs/s | raw jobs/s | ratio |",
        "|---|---:|---|---:|---:|---:|",
    ]
    for name, figure in paired.items():
        for p in figure.pairs:
            lines.append(
                f"| {labels.get(name, name)} | {p.rep} | {'ours' if p.ours_first else 'raw'} "
                f"| {p.ours_jps:,.0f} | {p.raw_jps:,.0f} | {p.ratio * 100:.1f} % |"
            )
    lines.append("")
    for name, figure in paired.items():
        lines.append(f"- {labels.get(name, name)}: {figure.shown()}")
    return [*lines, ""]


def as_json(paired: dict[str, PairedFigure]) -> dict[str, Any]:
    return {
        name: {
            "value": round(f.value, 4),
            "median": round(f.median, 4),
            "low": round(f.low, 4),
            "high": round(f.high, 4),
            "pairs": [
                {
                    "rep": p.rep,
                    "ours_first": p.ours_first,
                    "jps": p.ours_jps,
                    "raw_jps": p.raw_jps,
                    "ratio": round(p.ratio, 4),
                }
                for p in f.pairs
            ],
        }
        for name, f in paired.items()
    }
