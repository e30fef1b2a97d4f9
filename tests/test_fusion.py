import numpy as np
import pytest

from ragfunnel.errors import ConfigError
from ragfunnel.retrieve.fusion import forward_backward_scores, max_normalize, rank


def test_max_normalize_rows_and_keeps_zero_rows():
    out = max_normalize(np.array([[2.0, 4.0, 0.0], [0.0, 0.0, 0.0]]))
    np.testing.assert_allclose(out, [[0.5, 1.0, 0.0], [0.0, 0.0, 0.0]])


def test_forward_only_takes_max_over_samples():
    backward = np.array([3.0, 0.0, 1.0, 0.0])
    forward = np.array([[0.0, 2.0, 0.0, 1.0],   # sample 1 leans on chunk 1
                        [0.0, 0.0, 0.0, 8.0]])  # sample 2 on chunk 3
    f = forward_backward_scores(backward, forward, eta_backward=0.0, eta_forward=1.0)
    # per-sample normalised: [0, 1, 0, .5] and [0, 0, 0, 1] -> max [0, 1, 0, 1]
    np.testing.assert_allclose(f, [0.0, 1.0, 0.0, 1.0])


def test_equal_mix_of_backward_and_forward():
    backward = np.array([3.0, 0.0, 1.0, 0.0])  # normalised [1, 0, 1/3, 0]
    forward = np.array([[0.0, 2.0, 0.0, 1.0], [0.0, 0.0, 0.0, 8.0]])
    fb = forward_backward_scores(backward, forward, eta_backward=0.5, eta_forward=0.5)
    np.testing.assert_allclose(fb, [0.5, 0.5, 1 / 6, 0.5])


def test_rank_breaks_ties_by_tiebreak_then_position():
    scores = np.array([1.0, 2.0, 1.0, 1.0])
    assert rank(scores).tolist() == [1, 0, 2, 3]
    assert rank(scores, tiebreak=np.array([0.0, 0.0, 5.0, 1.0])).tolist() == [1, 2, 3, 0]


def test_raw_fusion_is_eq5_on_the_scores_as_they_are():
    backward = np.array([3.0, 0.0, 1.0, 0.0])
    forward = np.array([[0.0, 2.0, 0.0, 1.0], [0.0, 0.0, 0.0, 8.0]])  # raw max over drafts: [0, 2, 0, 8]
    fb = forward_backward_scores(backward, forward, eta_backward=0.5, eta_forward=0.5, fusion="raw")
    np.testing.assert_allclose(fb, [1.5, 1.0, 0.5, 4.0])  # 0.5*[3,0,1,0] + 0.5*[0,2,0,8]
    # The long draft's large scale now decides the order: chunk 3 first, where normalised fusion tied it.
    assert rank(fb).tolist()[0] == 3


def test_unknown_fusion_is_refused():
    with pytest.raises(ConfigError, match="unknown fusion 'max'; valid: normalized, raw"):
        forward_backward_scores(np.ones(2), np.ones((1, 2)), eta_backward=0.5, eta_forward=0.5, fusion="max")
