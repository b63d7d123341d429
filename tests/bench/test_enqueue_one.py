"""The bench's enqueue-one target: judged on blocks alternated with the raw loop in the
same run (bench/__main__.py, _enqueue_one), the median of the blocks' ratios."""

from __future__ import annotations

import pytest

from bench import enqueue_cost, report


def test_the_ratio_is_raws_time_over_the_variants_in_each_block() -> None:
    # (wall, CPU) seconds per block: raw took 1.0 s, 2.0 s, 1.0 s; the variant 2.0 s each.
    raw = [(1.0, 0.1), (2.0, 0.1), (1.0, 0.1)]
    ours = [(2.0, 0.2), (2.0, 0.2), (2.0, 0.2)]
    median, overall = enqueue_cost.ratio_to_raw(ours, raw)
    assert median == pytest.approx(0.5)
    assert overall == pytest.approx(4.0 / 6.0)


@pytest.mark.parametrize(("median", "passed"), [(0.9, True), (0.89, False)])
def test_the_target_is_judged_on_the_median_of_the_alternated_blocks(
    median: float, passed: bool
) -> None:
    figure = {"blocks": 60, "block": 100, "median": median, "all": 0.95}
    (goal,) = [g for g in report.targets([], None, figure) if g.text.startswith("enqueue one")]
    assert goal.passed is passed
    assert goal.measured == f"{median:.2f}x (0.95x over all blocks)"
    assert "alternated, median of 60 blocks of 100" in goal.text


def test_without_the_blocks_the_target_is_not_measured() -> None:
    (goal,) = [g for g in report.targets([], None) if g.text.startswith("enqueue one")]
    assert goal.passed is None
    assert goal.measured == "not measured"
