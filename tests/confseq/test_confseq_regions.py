import dataclasses
import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from jaxgen.confseq import betting_cs, confidence_region, predmix_eb_bonferroni, subgaussian_ball

from ._peer import import_confseq

T, D = 100, 3


def _data(seed, T=T, d=D):
    mu = np.linspace(0.3, 0.7, d)
    # Beta(2, 2) noise of spread 0.25 around mu (numpy: no sampler compilation in the tests)
    x = mu[None, :] + 0.25 * (np.random.default_rng(seed).beta(2.0, 2.0, (T, d)) - 0.5)
    return jnp.asarray(x), jnp.asarray(mu)


@pytest.fixture(scope="module")
def regions():
    out = []
    for seed in range(3):
        x, mu = _data(seed)
        be = confidence_region(x, 0.05, kind="box_ellipsoid")
        out.append(
            dict(
                x=x,
                bonf=confidence_region(x, 0.05, kind="bonferroni"),
                maxw=confidence_region(x, 0.05, kind="max_wealth"),
                port=be.as_kind("portfolio"),
                box=be.as_kind("box"),
                ell=be.as_kind("ellipsoid"),
                be=be,
            )
        )
    return out


@jax.jit
def _memberships(rs, pts):
    return {k: jax.vmap(r.contains)(pts) for k, r in rs.items() if k != "x"}


@eqx.filter_jit
def _contains(region, pts):
    """vmap of ``contains`` over points, compiled once per kind (shared by the tests)."""
    return jax.vmap(region.contains)(pts)


def test_max_wealth_equals_bonferroni(regions):
    for r in regions:
        np.testing.assert_allclose(r["maxw"].lower, r["bonf"].lower, atol=1e-10)
        np.testing.assert_allclose(r["maxw"].upper, r["bonf"].upper, atol=1e-10)


def test_set_relations(regions):
    for i, r in enumerate(regions):
        b = r["bonf"]
        assert jnp.all(r["box"].lower >= b.lower - 1e-12) and jnp.all(
            r["box"].upper <= b.upper + 1e-12
        )
        width = b.upper - b.lower
        u = jr.uniform(jr.key(100 + i), (4000, D))
        pts = (b.lower - 0.05 * width)[None, :] + u * 1.1 * width[None, :]
        mem = _memberships(r, pts)
        P, BE, BX, E, B, M = (mem[k] for k in ("port", "be", "box", "ell", "bonf", "maxw"))
        assert int(jnp.sum(P)) > 50  # the test is not vacuous
        assert not jnp.any(P & ~BE), "P not in Box cap E_p"
        assert not jnp.any(P & ~E), "P not in E_p"
        assert not jnp.any(BE & ~BX), "Box cap E_p not in Box"
        assert not jnp.any(BX & ~B), "Box not in Bonferroni"
        # M = B up to points within 1e-9 of the boundary
        assert int(jnp.sum(M != B)) == 0
        # vmap == loop for contains
        for j in range(5):
            assert bool(r["port"].contains(pts[j])) == bool(P[j])


def test_volume_ordering(regions, getkey):
    for r in regions:
        lv = {k: float(r[k].log_volume()) for k in ("bonf", "box", "be", "port")}
        assert lv["port"] <= lv["be"] + 1e-3 <= lv["box"] + 2e-3 <= lv["bonf"] + 3e-3


@pytest.mark.slow
def test_fft_volume_matches_monte_carlo(regions):
    r = regions[0]
    for k in ("port", "be"):
        fft = float(r[k].log_volume())
        mc = float(r[k].log_volume(key=jr.key(7), n_mc=20000))
        frac = float(jnp.exp(mc - r["box"].log_volume()))
        se = np.sqrt((1 - frac) / (20000 * frac))
        assert abs(fft - mc) <= 5 * se + 0.01, (k, fft, mc, se)


@pytest.mark.parametrize("p", [2.0, 4.0])
def test_ellipsoid_volume_formula(regions, p):
    ell = dataclasses.replace(regions[0]["ell"], p=jnp.asarray(p))
    lo = ell.center - ell.delta - ell.r_minus
    hi = ell.center + ell.delta + ell.r_plus
    n = 100_000
    pts = lo[None, :] + jr.uniform(jr.key(3), (n, D)) * (hi - lo)[None, :]
    frac = float(jnp.mean(jax.jit(jax.vmap(ell.contains))(pts)))
    se = np.sqrt(frac * (1 - frac) / n)
    closed = float(jnp.exp(ell.log_volume() - jnp.sum(jnp.log(hi - lo))))
    assert abs(frac - closed) <= 3 * se + 2e-4 * closed, (frac, closed, se)


def test_d1_collapses_to_1d_cs():
    x, _ = _data(5, T=60, d=1)  # T = 60 shares the exact-mode compilation with test_betting
    bonf = confidence_region(x, 0.05, kind="bonferroni")
    box = confidence_region(x, 0.05, kind="box")
    lo, hi = betting_cs(x[:, 0], 0.05, grid_size=None)
    for r in (bonf, box):
        np.testing.assert_allclose(r.lower[0], lo[-1], atol=1e-9)
        np.testing.assert_allclose(r.upper[0], hi[-1], atol=1e-9)
    np.testing.assert_allclose(box.lower, bonf.lower, atol=1e-9)


def test_monotone_in_alpha_and_permutation(regions):
    x = regions[0]["x"]
    w = jnp.array([0.5, 0.3, 0.2])
    a1 = confidence_region(x, 0.05, kind="bonferroni", weights=w)
    a2 = confidence_region(x, 0.2, kind="bonferroni", weights=w)
    assert jnp.all(a2.lower >= a1.lower) and jnp.all(a2.upper <= a1.upper)
    assert jnp.all(a2.upper - a2.lower < a1.upper - a1.lower)
    perm = jnp.array([2, 0, 1])
    ap = confidence_region(x[:, perm], 0.05, kind="bonferroni", weights=w[perm])
    np.testing.assert_allclose(ap.lower, a1.lower[perm], atol=1e-12)
    np.testing.assert_allclose(ap.upper, a1.upper[perm], atol=1e-12)
    # the portfolio set shrinks with alpha too (membership on random points)
    p1 = regions[0]["port"]
    p2 = confidence_region(x, 0.2, kind="box_ellipsoid").as_kind("portfolio")
    pts = p1.lower[None, :] + jr.uniform(jr.key(4), (2000, D)) * (p1.upper - p1.lower)[None, :]
    m1 = _contains(p1, pts)
    m2 = _contains(p2, pts)
    assert not jnp.any(m2 & ~m1) and int(jnp.sum(m1 & ~m2)) > 0


def test_prefix_time_argument(regions):
    x = regions[0]["x"]
    full = confidence_region(x, 0.05, kind="bonferroni", t=T)
    np.testing.assert_allclose(full.lower, regions[0]["bonf"].lower)
    at = confidence_region(x, 0.05, kind="bonferroni", t=60)
    # the region at t = 60 ignores x_61.. (same shapes, so no new compilation) ...
    other = confidence_region(x.at[60:].set(1.0 - x[60:]), 0.05, kind="bonferroni", t=60)
    np.testing.assert_array_equal(at.lower, other.lower)
    np.testing.assert_array_equal(at.upper, other.upper)
    # ... and equals each coordinate's 1-D exact CS on x_1..x_60 at level alpha/d
    for j in range(D):
        lo, hi = betting_cs(x[:60, j], 0.05 / D, grid_size=None)
        np.testing.assert_allclose([at.lower[j], at.upper[j]], [lo[-1], hi[-1]], atol=1e-9)


def test_baselines():
    x, mu = _data(6)
    # the PrPl-EB box covers mu here; the ball has the closed-form radius
    path = predmix_eb_bonferroni(x, 0.05)
    assert path.shape == (T, D, 2)
    assert jnp.all((path[-1, :, 0] < mu) & (mu < path[-1, :, 1]))
    centre, radius = subgaussian_ball(x, 0.05)
    s2, rho, t = D / 4, 100 * D / 4, T
    r_ref = np.sqrt(2 * (rho + s2 * t) * (np.log(20) + D / 2 * np.log1p(s2 * t / rho))) / t
    np.testing.assert_allclose(radius[-1], r_ref, rtol=1e-12)
    np.testing.assert_allclose(centre[-1], x.mean(0), rtol=1e-12)


@pytest.mark.slow
def test_baseline_region_kinds():
    x, mu = _data(6)
    path = predmix_eb_bonferroni(x, 0.05)
    reg = confidence_region(x, 0.05, kind="predmix_eb")
    np.testing.assert_allclose(reg.lower, path[-1, :, 0])
    centre, radius = subgaussian_ball(x, 0.05)
    ball = confidence_region(x, 0.05, kind="subgaussian_ball")
    assert bool(ball.contains(mu)) and bool(ball.contains(centre[-1]))
    assert not bool(ball.contains(centre[-1] + 1.01 * radius[-1] / np.sqrt(D)))


def test_predmix_matches_confseq():
    cs = import_confseq()
    for i in range(3):
        x = np.random.default_rng(20 + i).beta(2.0, 3.0 + i, 300)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            lo, hi = cs.predmix.predmix_empbern_twosided_cs(x, 0.05, truncation=0.5)
        b = predmix_eb_bonferroni(jnp.asarray(x)[:, None], 0.05, confseq_compat=True)
        np.testing.assert_allclose(b[:, 0, 0], lo, atol=1e-8)
        np.testing.assert_allclose(b[:, 0, 1], hi, atol=1e-8)


@pytest.mark.slow
@pytest.mark.parametrize("d", [2, 5, 10])
def test_set_relations_paper_scale(d):
    viol = 0
    for seed in range(20):
        x, _ = _data(1000 + seed, T=300, d=d)
        be = confidence_region(x, 0.05, kind="box_ellipsoid")
        b = confidence_region(x, 0.05, kind="bonferroni")
        pts = b.lower[None, :] + jr.uniform(jr.key(seed), (20000, d)) * (b.upper - b.lower)[None, :]
        P = jax.lax.map(be.as_kind("portfolio").contains, pts, batch_size=512)
        E = jax.vmap(be.as_kind("ellipsoid").contains)(pts)
        BX = jax.vmap(be.as_kind("box").contains)(pts)
        viol += int(jnp.sum(P & ~E)) + int(jnp.sum(P & ~BX))
        assert jnp.all(be.lower >= b.lower - 1e-12) and jnp.all(be.upper <= b.upper + 1e-12)
    assert viol == 0
