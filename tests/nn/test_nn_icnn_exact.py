"""Exact constructions: MAX_n as an ICNN and a ReLU tree; f_k."""

import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from jaxgen.nn import (
    convexity_gap,
    icnn_max_affine_exact,
    icnn_max_exact,
    lattice_points,
    max_affine,
    max_n,
    relu_max_tree,
    separation_fk,
)


def _data(seed, shape, low=None, high=None):
    # numpy draws: a `jr` draw per new shape would cost a threefry compile
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape) if low is None else rng.uniform(low, high, shape)
    return jnp.asarray(x)


@jax.jit
def _max_err(model, x):
    return jnp.max(jnp.abs(jax.vmap(model)(x) - max_n(x)) / (1 + jnp.abs(max_n(x))))


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_icnn_max_exact(n, getkey):
    model = icnn_max_exact(n)
    assert model.n_hidden == n - 1 and model.depth == n and model.widths == (1,) * (n - 1)
    ws, w = model.effective_weights()
    assert all(float(jnp.min(v)) >= 0 for v in (*ws, w))
    x = 10.0 * _data(n, (10_000, n))
    assert float(_max_err(model, x)) <= 1e-12
    if n != 8:  # float32 on one size keeps the suite fast
        return
    m32 = icnn_max_exact(n, dtype=jnp.float32)
    x32 = x.astype(jnp.float32)
    assert jax.vmap(m32)(x32).dtype == jnp.float32
    assert float(_max_err(m32, x32)) <= 1e-5


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_relu_max_tree(n, getkey):
    model = relu_max_tree(n)
    assert model.n_hidden == math.ceil(math.log2(n)) and model.depth == model.n_hidden + 1
    x = 10.0 * _data(n, (10_000, n))
    assert float(_max_err(model, x)) <= 1e-12
    if n != 8:
        return
    m32 = relu_max_tree(n, dtype=jnp.float32)
    assert float(_max_err(m32, x.astype(jnp.float32))) <= 1e-5


def test_max_affine_exact_matches_and_grads(getkey):
    G, h = _data(0, (6, 3)), _data(1, (6,))
    model = icnn_max_affine_exact(G, h)
    assert model.n_hidden == 5
    x = _data(2, (500, 3))
    chex.assert_trees_all_close(jax.jit(jax.vmap(model))(x), max_affine(G, h)(x), atol=1e-12)
    check_grads(jax.jit(lambda y: model(y)), (x[0],), order=1, modes=["rev"], eps=1e-6)
    check_grads(jax.jit(max_n), (x,), order=1, modes=["rev"], eps=1e-6)


def test_bad_n():
    with pytest.raises(ValueError, match="`n` must be an int >= 2, got 1"):
        icnn_max_exact(1)
    with pytest.raises(ValueError, match="`n` must be an int >= 2"):
        relu_max_tree(0)
    with pytest.raises(TypeError, match="n"):
        icnn_max_exact(3.0)
    with pytest.raises(ValueError, match="M >= 2"):
        icnn_max_affine_exact(np.ones((1, 2)), np.zeros(1))
    with pytest.raises((TypeError, ValueError), match="h"):
        max_affine(np.ones((3, 2)), np.zeros(2))
    with pytest.raises(ValueError, match="end in dimension 2"):
        max_affine(np.ones((3, 2)), np.zeros(3))(jnp.ones((4, 3)))
    with pytest.raises((TypeError, ValueError), match="x"):
        separation_fk(jnp.ones((4, 3)), 2)
    with pytest.raises(ValueError, match="`family` must be one of"):
        lattice_points(2, family="square")
    with pytest.raises(ValueError, match="`k` must be an int >= 1"):
        lattice_points(0)


def test_fk_lattice_identities(getkey):
    """Check 8 (+ identities): brute force, convexity, one Voronoi cell per lattice point."""
    k = 3
    P = lattice_points(k)
    assert P.shape == ((k + 1) ** 2, 2)
    lo, hi = P.min(0) - 1.0, P.max(0) + 1.0
    x = _data(3, (10_000, 2), lo, hi)
    xn = np.asarray(x)
    brute = np.max(xn @ P.T - 0.5 * np.sum(P**2, 1), axis=1)
    fk = jax.jit(separation_fk, static_argnums=1)
    np.testing.assert_allclose(np.asarray(fk(x, k)), brute, atol=1e-6, rtol=0)
    # f_k(x) = |x|^2/2 - dist(x, Lambda)^2/2, and f_k(p) = |p|^2/2 on the lattice
    dist2 = np.min(np.sum((xn[:, None, :] - P[None]) ** 2, -1), axis=1)
    np.testing.assert_allclose(
        np.asarray(fk(x, k)), 0.5 * np.sum(xn**2, 1) - 0.5 * dist2, atol=1e-9
    )
    np.testing.assert_allclose(np.asarray(fk(jnp.asarray(P), k)), 0.5 * np.sum(P**2, 1), atol=1e-12)
    y = _data(4, (10_000, 2), lo, hi)
    gap = convexity_gap(lambda z: separation_fk(z, k), x, y)
    assert float(jnp.max(gap)) <= 1e-6
    g1, g2 = np.meshgrid(np.linspace(lo[0], hi[0], 300), np.linspace(lo[1], hi[1], 300))
    grid = np.stack([g1.ravel(), g2.ravel()], -1)
    owners = np.argmax(grid @ P.T - 0.5 * np.sum(P**2, 1), axis=1)
    assert len(np.unique(owners)) == (k + 1) ** 2
