"""Kernel spectra against scipy's Bessel functions, quadrature and limits."""

import numpy as np
import pytest
from scipy.integrate import quad
from scipy.special import iv, spherical_in

import meanfield as mf


@pytest.mark.parametrize("beta", [0.3, 3.0, 20.0])
def test_sphere_spectrum_is_4pi_spherical_bessel(beta):
    l = np.arange(12)
    np.testing.assert_allclose(mf.attention_spectrum(beta, 11, 3), 4 * np.pi * spherical_in(l, beta), rtol=1e-12)


@pytest.mark.parametrize("beta", [0.3, 3.0, 20.0])
def test_circle_spectrum_is_2pi_modified_bessel(beta):
    k = np.arange(12)
    np.testing.assert_allclose(mf.attention_spectrum(beta, 11, 2), 2 * np.pi * iv(k, beta), rtol=1e-12)


@pytest.mark.parametrize("d", [2, 3, 4, 7])
def test_general_dimension_matches_funk_hecke_quadrature(d):
    beta = 2.5
    exact = mf.attention_spectrum(beta, 8, d)
    numeric = mf.funk_hecke_spectrum(lambda s: np.exp(beta * s), 8, d)
    # Quadrature of an oscillating integrand: absolute error ~ eps * int |W|.
    np.testing.assert_allclose(numeric, exact, rtol=1e-12, atol=1e-13 * exact[0])


def test_circle_spectrum_against_direct_convolution_integral():
    beta, k = 1.7, 3
    integral = quad(lambda t: np.exp(beta * np.cos(t)) * np.cos(k * t), 0, 2 * np.pi, epsabs=1e-14)[0]
    assert mf.attention_spectrum(beta, k, 2)[k] == pytest.approx(integral, rel=1e-12)


def test_scaled_spectrum_is_finite_at_large_beta_and_consistent():
    scaled = mf.attention_spectrum(1000.0, 40, 3, scaled=True)
    assert np.all(np.isfinite(scaled)) and np.all(scaled > 0)
    np.testing.assert_allclose(mf.attention_spectrum(50.0, 40, 3, scaled=True),
                               np.exp(-50.0) * mf.attention_spectrum(50.0, 40, 3), rtol=1e-12)
    with pytest.raises(OverflowError, match="scaled=True"):
        mf.attention_spectrum(1000.0, 4, 3)


@pytest.mark.parametrize("d", [2, 3, 5])
def test_spectrum_over_beta_is_continuous_at_zero(d):
    at_zero = mf.attention_spectrum_over_beta(0.0, 4, d)
    near_zero = mf.attention_spectrum_over_beta(1e-7, 4, d)
    # Degree 1 tends to |S^{d-1}|/d with an O(beta^2) correction; degree l >= 2 is O(beta^{l-1}).
    np.testing.assert_allclose(near_zero[1:], at_zero[1:], rtol=1e-12, atol=1e-6)
    assert at_zero[1] == pytest.approx(mf.sphere_area(d) / d, rel=1e-15)


@pytest.mark.parametrize("beta", [5e-9, 2e-8])
@pytest.mark.parametrize("d", [2, 3, 5])
def test_small_beta_branches_match_bessel_formula(beta, d):
    l = np.arange(4)
    direct = (2 * np.pi) ** (d / 2) * beta ** (-d / 2) * iv(l + d / 2 - 1, beta)
    np.testing.assert_allclose(mf.attention_spectrum_over_beta(beta, 3, d)[1:], direct[1:], rtol=1e-12)


def test_sphere_area():
    assert mf.sphere_area(2) == pytest.approx(2 * np.pi, rel=1e-15)
    assert mf.sphere_area(3) == pytest.approx(4 * np.pi, rel=1e-15)
    assert mf.sphere_area(4) == pytest.approx(2 * np.pi**2, rel=1e-15)


def test_bad_spectrum_arguments():
    with pytest.raises(ValueError, match="beta"):
        mf.attention_spectrum(-1.0, 3, 3)
    with pytest.raises(TypeError, match="max_degree"):
        mf.attention_spectrum(1.0, 2.5, 3)
    with pytest.raises(ValueError, match="max_degree"):
        mf.attention_spectrum(1.0, -1, 3)
    with pytest.raises(ValueError, match="d"):
        mf.attention_spectrum(1.0, 3, 1)


def test_the_keyword_lmax_of_0_1_is_refused_since_0_3():
    with pytest.raises(TypeError, match="lmax"):
        mf.SelfAttention(2.0, normalized=False).potential_spectrum(lmax=5, d=2)
    with pytest.raises(TypeError, match="lmax"):
        mf.attention_spectrum(1.0, lmax=3, d=2)


def test_a_spectrum_handed_out_is_the_callers_own():
    """The Bessel values are kept between calls (every solver of a run asks for the same ones):
    a caller that edits its array (as solvers zero mode 0) must not change the next caller's."""
    first = mf.attention_spectrum(5.0, 12, 2)
    expected = 2 * np.pi * iv(np.arange(13), 5.0)
    first[:] = -1.0
    np.testing.assert_allclose(mf.attention_spectrum(5.0, 12, 2), expected, rtol=1e-13)
