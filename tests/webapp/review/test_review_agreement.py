"""Agreement statistics against values worked out by hand (the arithmetic is in each comment)."""
from __future__ import annotations

import pytest

from webapp.review.agreement import (
    cohens_kappa,
    contingency,
    count_vectors,
    fleiss_kappa,
    krippendorff_alpha_nominal,
    pairwise_agreement,
    percent_agreement,
)

# Two raters, 10 items, labels a(pprove) / r(eject):
#   (a,a) x4, (a,r) x2, (r,a) x1, (r,r) x3
#   p_o = 7/10 = 0.7
#   rater A: a=6, r=4; rater B: a=5, r=5
#   p_e = 0.6*0.5 + 0.4*0.5 = 0.5
#   kappa = (0.7 - 0.5) / (1 - 0.5) = 0.4
TWO_LABEL_PAIRS = [("a", "a")] * 4 + [("a", "r")] * 2 + [("r", "a")] * 1 + [("r", "r")] * 3

# Two raters, 10 items, three labels a / s(wap) / r:
#   (a,a) x3, (s,s) x2, (r,r) x1, (a,s) x1, (s,r) x1, (r,a) x2
#   p_o = 6/10 = 0.6
#   rater A: a=4, s=3, r=3; rater B: a=5, s=3, r=2
#   p_e = (4*5 + 3*3 + 3*2) / 100 = 35/100 = 0.35
#   kappa = (0.6 - 0.35) / 0.65 = 0.25/0.65 = 5/13 = 0.384615...
THREE_LABEL_PAIRS = ([("a", "a")] * 3 + [("s", "s")] * 2 + [("r", "r")] + [("a", "s")] + [("s", "r")]
                     + [("r", "a")] * 2)


def test_percent_agreement_two_raters():
    assert percent_agreement(TWO_LABEL_PAIRS) == pytest.approx(0.7)
    assert percent_agreement(THREE_LABEL_PAIRS) == pytest.approx(0.6)


def test_cohens_kappa_two_labels():
    assert cohens_kappa(TWO_LABEL_PAIRS) == pytest.approx(0.4)


def test_cohens_kappa_three_labels():
    assert cohens_kappa(THREE_LABEL_PAIRS) == pytest.approx(5 / 13)


def test_cohens_kappa_accepts_a_contingency_table():
    table = {("a", "a"): 4, ("a", "r"): 2, ("r", "a"): 1, ("r", "r"): 3}
    assert contingency(TWO_LABEL_PAIRS) == table
    assert cohens_kappa(table) == pytest.approx(0.4)


def test_cohens_kappa_is_symmetric_in_the_two_raters():
    swapped = [(b, a) for a, b in THREE_LABEL_PAIRS]
    assert cohens_kappa(swapped) == pytest.approx(5 / 13)


def test_cohens_kappa_undefined_cases():
    assert cohens_kappa([]) is None
    # Both always say "a": p_o = p_e = 1, kappa = 0/0.
    assert cohens_kappa([("a", "a")] * 5) is None
    assert percent_agreement([]) is None


def test_cohens_kappa_perfect_and_chance():
    assert cohens_kappa([("a", "a"), ("r", "r")]) == pytest.approx(1.0)
    # (a,a),(a,r),(r,a),(r,r): p_o = 0.5, p_e = 0.5*0.5 + 0.5*0.5 = 0.5 -> kappa 0.
    assert cohens_kappa([("a", "a"), ("a", "r"), ("r", "a"), ("r", "r")]) == pytest.approx(0.0)


# Three raters, four items, categories (a, r):
#   item1 a,a,a -> (3,0); item2 a,a,r -> (2,1); item3 r,r,r -> (0,3); item4 a,r,r -> (1,2)
FLEISS_UNITS = [["a", "a", "a"], ["a", "a", "r"], ["r", "r", "r"], ["a", "r", "r"]]
FLEISS_VECTORS = [[3, 0], [2, 1], [0, 3], [1, 2]]


def test_count_vectors():
    assert count_vectors(FLEISS_UNITS, ["a", "r"]) == FLEISS_VECTORS
    with pytest.raises(ValueError, match="Unknown label"):
        count_vectors([["x"]], ["a", "r"])


def test_fleiss_kappa_hand_computed():
    # N=4, n=3. Totals: a = 3+2+0+1 = 6, r = 6 -> p_a = p_r = 6/12 = 0.5, P_e = 0.25 + 0.25 = 0.5
    # P_i = (sum_j n_ij^2 - n) / (n(n-1)):
    #   item1 (9-3)/6 = 1, item2 (4+1-3)/6 = 1/3, item3 1, item4 1/3 -> P_bar = (8/3)/4 = 2/3
    # kappa = (2/3 - 1/2) / (1 - 1/2) = (1/6)/(1/2) = 1/3
    assert fleiss_kappa(FLEISS_VECTORS) == pytest.approx(1 / 3)


def test_fleiss_kappa_with_weights_equals_repeated_units():
    # Vector (3,0) twice and (1,2) once, given once each with multiplicities.
    repeated = [[3, 0], [3, 0], [1, 2]]
    # Hand: N=3, n=3. a = 3+3+1 = 7, r = 2 -> p_a = 7/9, p_r = 2/9, P_e = 49/81 + 4/81 = 53/81
    # P_i: 1, 1, 1/3 -> P_bar = (7/3)/3 = 7/9 = 63/81
    # kappa = (63/81 - 53/81) / (28/81) = 10/28 = 5/14
    assert fleiss_kappa(repeated) == pytest.approx(5 / 14)
    assert fleiss_kappa([[3, 0], [1, 2]], weights=[2, 1]) == pytest.approx(5 / 14)


def test_fleiss_kappa_rejects_unequal_rating_counts():
    with pytest.raises(ValueError, match="same number of ratings"):
        fleiss_kappa([[2, 0], [1, 2]])
    assert fleiss_kappa([]) is None


def test_krippendorff_alpha_complete_data():
    # Same data as Fleiss. Coincidences o_ck = sum_u n_uc (n_uk - [c==k]) / (m_u - 1), m_u = 3:
    #   item1: o_aa += 3*2/2 = 3
    #   item2: o_aa += 2*1/2 = 1, o_ar += 2*1/2 = 1, o_ra += 1
    #   item3: o_rr += 3
    #   item4: o_ar += 1, o_ra += 1, o_rr += 2*1/2 = 1
    #   o_aa = 4, o_ar = o_ra = 2, o_rr = 4; n = 12, n_a = n_r = 6
    # alpha = ((n-1)(o_aa+o_rr) - sum n_c(n_c-1)) / (n(n-1) - sum n_c(n_c-1))
    #       = (11*8 - 60) / (132 - 60) = 28/72 = 7/18
    assert krippendorff_alpha_nominal(FLEISS_VECTORS) == pytest.approx(7 / 18)


def test_krippendorff_alpha_with_missing_ratings():
    # item A: a,a (m=2); item B: a,r,r (m=3); item C: r alone (m=1, not pairable); item D: a,a (m=2)
    #   A: o_aa += 2*1/1 = 2
    #   B: o_ar += 1*2/2 = 1, o_ra += 1, o_rr += 2*1/2 = 1
    #   D: o_aa += 2
    #   o_aa = 4, o_ar = o_ra = 1, o_rr = 1; n = 7, n_a = 5, n_r = 2
    # alpha = (6*(4+1) - (5*4 + 2*1)) / (7*6 - 22) = (30 - 22)/20 = 0.4
    # check: D_o = 2/7, D_e = 2*5*2/42 = 10/21, 1 - (2/7)/(10/21) = 1 - 0.6 = 0.4
    units = [[2, 0], [1, 2], [0, 1], [2, 0]]
    assert krippendorff_alpha_nominal(units) == pytest.approx(0.4)
    assert krippendorff_alpha_nominal([[2, 0], [1, 2], [0, 1]], weights=[2, 1, 5]) == pytest.approx(0.4)


def test_krippendorff_alpha_undefined_and_perfect():
    assert krippendorff_alpha_nominal([]) is None
    assert krippendorff_alpha_nominal([[0, 1]]) is None  # nothing pairable
    assert krippendorff_alpha_nominal([[2, 0], [3, 0]]) is None  # one category only
    assert krippendorff_alpha_nominal([[2, 0], [0, 2]]) == pytest.approx(1.0)


def test_pairwise_agreement():
    # Agreeing ordered pairs sum n_uc(n_uc-1): 6 + 2 + 6 + 2 = 16; all pairs sum m(m-1) = 4*6 = 24 -> 2/3
    assert pairwise_agreement(FLEISS_VECTORS) == pytest.approx(2 / 3)
    # Two raters: pairwise agreement equals percent agreement (7 of 10 items agree).
    vectors = count_vectors([[a, b] for a, b in TWO_LABEL_PAIRS], ["a", "r"])
    assert pairwise_agreement(vectors) == pytest.approx(0.7)
    assert pairwise_agreement([[1, 0]]) is None
