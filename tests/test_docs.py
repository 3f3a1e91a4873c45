"""Every figure README.md and bench/RESULTS.md quote names a committed record made from a
clean tree, and is in that record (``bench.doc_figures``)."""

from __future__ import annotations

import pytest

from bench.doc_figures import ROOT, check_rows

RESULTS = ROOT / "bench" / "RESULTS.md"
ROW = "| replay | **{figure}** | [replay]({link}) @ {commit} |"
GOOD = {"figure": "5.02×", "link": "results/replay-2026-11-22.json", "commit": "28288d5"}


@pytest.mark.parametrize("doc", ["README.md", "bench/RESULTS.md"])
def test_every_quoted_figure_is_in_its_committed_clean_record(doc: str) -> None:
    assert check_rows(ROOT / doc) == []


def test_a_row_of_the_right_figure_record_and_commit_passes() -> None:
    assert check_rows(RESULTS, ROW.format(**GOOD)) == []


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"figure": "5.12×"}, "'5.12' is in none of its records"),
        ({"figure": "5.0×"}, None),  # fewer digits shown: still the record's figure
        ({"commit": "e9d20aa"}, "was made at 28288d5"),
        ({"link": "results/no-such-record.json"}, "is not a committed record"),
        ({"link": "HISTORY.md"}, "bold figures but no record named"),
    ],
)
def test_a_wrong_figure_commit_or_record_is_named(change: dict, problem: str | None) -> None:
    problems = check_rows(RESULTS, ROW.format(**{**GOOD, **change}))
    if problem is None:
        assert problems == []
    else:
        assert len(problems) == 1 and problem in problems[0], problems


def test_a_record_with_no_bold_figure_is_named() -> None:
    unchecked = "| replay | 5.02× | [replay](results/replay-2026-11-22.json) @ 28288d5 |"
    assert "shows no bold figure" in check_rows(RESULTS, unchecked)[0]


@pytest.mark.parametrize(
    ("shown", "recorded"),
    [
        ("852K", 852_400.0),
        ("1.01M", 1_006_950.0),
        ("909 MB", 908_915_000.0),
        ("108 MB", 108.36),
        ("1.48 GB", 1_477_980_000.0),
        ("100%", 1.0),
        ("92%", 92.0),
    ],
)
def test_suffixed_figures_match_records_in_bytes_fractions_or_their_own_unit(
    shown: str, recorded: float
) -> None:
    row = f"| x | **{shown}** | [replay](results/replay-2026-11-22.json) @ 28288d5 |"
    assert f"'{shown}' is in none" in check_rows(RESULTS, row)[0]  # not in that record
    from bench.doc_figures import occurs, quoted_numbers

    [(_, value, decimals, suffix)] = quoted_numbers(f"**{shown}**")
    assert occurs(value, decimals, suffix, [recorded])
    assert not occurs(value * 1.1, decimals, suffix, [recorded])


def test_a_leading_minus_is_a_figure_s_sign_and_a_dash_between_figures_is_not() -> None:
    from bench.doc_figures import occurs, quoted_numbers

    [(_, value, decimals, suffix)] = quoted_numbers("**-0.67**")
    assert value == -0.67 and occurs(value, decimals, suffix, [-0.6667])
    assert not occurs(value, decimals, suffix, [0.6667])
    assert [quoted[1] for quoted in quoted_numbers("**2.2-3.0**")] == [2.2, 3.0]
