"""A fitted allocation model as text (what `ragfunnel scale fit` prints), on hand-made fits."""

from ragfunnel.scaling.allocation import AllocationFit, DatasetScale, Informativeness, Observation, Task
from ragfunnel.scaling.fit_report import fit_report, format_r2
from ragfunnel.scaling.grid import Config


def task(name, dataset, i, n):
    configs = [Config("zero-shot", 0, 0), Config("rag", 1, 0), Config("drag", 0, 1)][:n]
    return Task(name, "drag", i, tuple(Observation(c, 0.5, 100.0) for c in configs), dataset=dataset)


def test_format_r2():
    assert [format_r2(v) for v in (1.0, 0.5, -0.25)] == ["1.0000", "0.5000", "-0.2500"]
    assert format_r2(None) == "n/a (constant metric)"


def test_report_of_a_fit_of_the_metric_itself():
    allocation = AllocationFit(
        metric="f1", a=(0.4, 0.15, 0.0), b=(0.0, 0.0, 0.0), c=-1.0, fixed=("a3", "b1", "b2"), r2_logit=1.0,
        mse_logit=0.0, r2_metric=None, mse_metric=0.000125,
        tasks=(task("run [drag]", "run", Informativeness(0.125, -0.05), 3),))
    assert fit_report(allocation).splitlines() == [
        "computation allocation model for f1, 3 points over 1 task(s)",
        "  a = (0.4000, 0.1500, 0.0000)  b = (0.0000, 0.0000, 0)  c = -1.0000",
        "  held at 0, not identifiable from these runs: a3, b1, b2",
        "  logit space: R² 1.0000  MSE 0.0000",
        "  f1: R² n/a (constant metric)  MSE 0.0001",
        "  i of run [drag]: i_doc +0.125  i_shot -0.050",
    ]


def test_report_of_a_fit_normalised_per_dataset_gives_the_sigmoid_and_each_datasets_scale():
    allocation = AllocationFit(
        metric="accuracy", a=(0.25, -0.5, 0.125), b=(1.5, 0.75, 0.0), c=0.5, fixed=(), r2_logit=0.875,
        mse_logit=0.0625, r2_metric=0.75, mse_metric=0.25,
        tasks=(task("a [drag]", "a", Informativeness(0.25, 0.0), 3),
               task("b [drag]", "b", Informativeness(0.0, 0.5), 2)),
        normalize="dataset", sigmoid=(-2.0, 1.5), scales=(DatasetScale("a", 0.25, 0.1), DatasetScale("b", 0.5, 0.125)))
    assert fit_report(allocation) == "\n".join([
        "computation allocation model for accuracy, 5 points over 2 task(s)",
        "  a = (0.2500, -0.5000, 0.1250)  b = (1.5000, 0.7500, 0)  c = 0.5000",
        "  σ(x) = -2.0000 + 3.5000 / (1 + e^-x), fitted to z-scores of accuracy per dataset: a mean 0.250 sd 0.100, "
        "b mean 0.500 sd 0.125",
        "  σ⁻¹ space: R² 0.8750  MSE 0.0625",
        "  accuracy: R² 0.7500  MSE 0.2500",
        "  i of a [drag]: i_doc +0.250  i_shot +0.000",
        "  i of b [drag]: i_doc +0.000  i_shot +0.500",
    ])
