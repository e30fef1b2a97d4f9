"""Leave-one-dataset-out results as text (what `ragfunnel scale loo` prints), on hand-made results."""

from ragfunnel.scaling.allocation import AllocationFit
from ragfunnel.scaling.grid import Config
from ragfunnel.scaling.leave_one_out import (
    HeldOutBudget,
    HeldOutDataset,
    LeaveOneOut,
    Scored,
    format_theta,
    leave_one_out_report,
)

FIT = AllocationFit(metric="f1", a=(0.0, 0.0, 0.0), b=(0.0, 0.0, 0.0), c=0.0, fixed=(), r2_logit=None, mse_logit=0.0,
                    r2_metric=None, mse_metric=0.0, tasks=())


def scored(strategy, k, m, metric, tokens, n=1):
    return Scored(Config(strategy, k, m, n), metric, tokens)


def held_out(name, correlation, *budgets):
    return HeldOutDataset(name, FIT, {}, 1, correlation, budgets)


def test_format_theta():
    assert format_theta(scored("iterdrag", 5, 1, 0.8, 9000.0, n=3)) == "iterdrag (5,1,3)"
    assert format_theta(scored("zero-shot", 0, 0, 0.1, 100.0)) == "zero-shot (0,0,1)"
    assert format_theta(None) == "-"


def test_report_tabulates_each_cell_then_the_means_and_rank_correlations():
    drag22 = scored("drag", 2, 2, 0.35, 800.0)
    zero = scored("zero-shot", 0, 0, 0.15, 100.0)
    result = LeaveOneOut("f1", "none", 8, (
        held_out("a", 0.5,
                 HeldOutBudget(1000, drag22, 0.3, 5, drag22, scored("drag", 1, 4, 0.3, 800.0)),
                 HeldOutBudget(4000, scored("rag", 10, 0, 0.25, 1100.0), 0.2, 9, scored("drag", 10, 2, 0.5, 3200.0),
                               None)),
        held_out("b", None, HeldOutBudget(1500, zero, 0.1, 3, zero, scored("drag", 0, 1, 0.1, 150.0)))))
    # Means over the 3 cells: the choice (0.35 + 0.25 + 0.15) / 3 = 0.250, the oracle (0.35 + 0.5 + 0.15) / 3
    # = 0.333, so 75.0%; 2 cells match. The 2 cells with a baseline: 0.200 against the choice's 0.250 there.
    assert leave_one_out_report(result).split("\n") == [
        "Leave one dataset out: f1, normalize none; each row's model is fitted on the other runs, its choice is "
        "among the held-out run's configurations",
        "",
        "| held out | L_max | baseline θ | f1 | model's θ | f1 | oracle θ | f1 |",
        "|---|---|---|---|---|---|---|---|",
        "| a | 1k | drag (1,4,1) | 0.300 | drag (2,2,1) | 0.350 | drag (2,2,1) | 0.350 |",
        "| a | 4k | - | - | rag (10,0,1) | 0.250 | drag (10,2,1) | 0.500 |",
        "| b | 1.5k | drag (0,1,1) | 0.100 | zero-shot (0,0,1) | 0.150 | zero-shot (0,0,1) | 0.150 |",
        "",
        "model's choice 0.250 = 75.0% of the oracle's 0.333 over 3 (dataset, budget) cells; as good as the oracle "
        "in 2",
        "baseline 0.200 vs the model's 0.250 on the 2 cells with a baseline",
        "Spearman ρ of predicted vs actual on the held-out configurations: a +0.500, b n/a",
    ]


def test_report_without_a_baseline_or_an_oracle_score():
    nothing = scored("zero-shot", 0, 0, 0.0, 100.0)
    result = LeaveOneOut("em", "dataset", 8, (held_out("c", -0.25, HeldOutBudget(500, nothing, -1.0, 1, nothing,
                                                                                   None)),))
    lines = leave_one_out_report(result).split("\n")
    assert lines[0].startswith("Leave one dataset out: em, normalize dataset; ")
    assert lines[2] == "| held out | L_max | baseline θ | em | model's θ | em | oracle θ | em |"
    assert lines[4:] == [
        "| c | 500 | - | - | zero-shot (0,0,1) | 0.000 | zero-shot (0,0,1) | 0.000 |",
        "",
        "model's choice 0.000 = n/a of the oracle's 0.000 over 1 (dataset, budget) cells; as good as the oracle in 1",
        "Spearman ρ of predicted vs actual on the held-out configurations: c -0.250",
    ]
