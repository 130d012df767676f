"""Semi-relaxed GW: objective, gradient, line search, W-step, CG solver, rounding, POT agreement."""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from jaxgen.core import RESULTS
from jaxgen.transport import (
    exact_line_search,
    lmo_rows,
    round_argmax,
    round_greedy,
    solve_srgw_coupling,
    srgw_barycenter,
    srgw_grad_T,
    srgw_objective,
    w_step,
)


def _graph(rng, n, p=0.3):
    A = np.triu((rng.random((n, n)) < p).astype(float), 1)
    return A + A.T


def _sym(rng, K):
    W = rng.random((K, K))
    return (W + W.T) / 2


def _brute(A, T, W):
    return np.einsum("ijkl,ik,jl->", (A[:, :, None, None] - W[None, None]) ** 2, T, T)


@pytest.mark.parametrize("symmetric", [True, False])
def test_objective_matches_four_index_sum(symmetric):
    rng = np.random.default_rng(0)
    n, K = 7, 3
    A = _graph(rng, n) if symmetric else rng.random((n, n))
    W = _sym(rng, K) if symmetric else rng.random((K, K))
    T = rng.dirichlet(np.ones(K), n) / n
    F = srgw_objective(jnp.asarray(A), jnp.asarray(T), jnp.asarray(W))
    np.testing.assert_allclose(float(F), _brute(A, T, W), rtol=1e-12)
    # eager == jit
    chex.assert_trees_all_close(jax.jit(srgw_objective)(A, T, W), F, rtol=1e-12)
    # deterministic T = Z/n gives the least-squares SBM criterion
    z = rng.integers(0, K, n)
    Z = np.eye(K)[z] / n
    F_det = srgw_objective(jnp.asarray(A), jnp.asarray(Z), jnp.asarray(W))
    np.testing.assert_allclose(float(F_det), np.mean((A - W[z][:, z]) ** 2), rtol=1e-12)


@pytest.mark.parametrize("symmetric", [True, False])
def test_gradient_matches_finite_differences_and_autodiff(symmetric):
    rng = np.random.default_rng(1)
    n, K = 8, 3
    A = jnp.asarray(_graph(rng, n) if symmetric else rng.random((n, n)))
    W = jnp.asarray(_sym(rng, K) if symmetric else rng.random((K, K)))
    T = jnp.asarray(rng.dirichlet(np.ones(K), n) / n)
    E = jnp.asarray(rng.normal(size=(n, K)))
    G = jax.jit(srgw_grad_T)(A, T, W)
    eps = 1e-6
    fd = (srgw_objective(A, T + eps * E, W) - srgw_objective(A, T - eps * E, W)) / (2 * eps)
    np.testing.assert_allclose(float(jnp.sum(G * E)), float(fd), rtol=1e-6)
    auto = jax.jit(jax.grad(srgw_objective, argnums=1))(A, T, W)
    chex.assert_trees_all_close(G, auto, rtol=1e-10)
    check_grads(jax.jit(lambda t, w: srgw_objective(A, t, w)), (T, W), order=1, modes=["rev"])


def test_lmo_and_exact_line_search():
    rng = np.random.default_rng(2)
    n, K = 12, 4
    A, W = jnp.asarray(_graph(rng, n)), jnp.asarray(_sym(rng, K))
    T = jnp.asarray(rng.dirichlet(np.ones(K), n) / n)
    h = jnp.full((n,), 1.0 / n)
    G = srgw_grad_T(A, T, W)
    S = lmo_rows(G, h)
    chex.assert_trees_all_close(S.sum(1), h)
    # S minimises <G, .> over the product of simplices: compare with every vertex row by row
    np.testing.assert_allclose(np.asarray(jnp.sum(G * S, 1)), np.asarray(G.min(1) / n), rtol=1e-12)
    D = S - T
    gamma, F_new = jax.jit(exact_line_search)(A, T, W, D)
    np.testing.assert_allclose(float(F_new), float(srgw_objective(A, T + gamma * D, W)), rtol=1e-12)
    grid = jnp.linspace(0.0, 1.0, 201)
    on_grid = jax.jit(jax.vmap(lambda g: srgw_objective(A, T + g * D, W)))(grid)
    assert float(F_new) <= float(on_grid.min()) + 1e-12
    with pytest.raises(TypeError):  # the jaxtyping hook sees the shape mismatch first
        exact_line_search(A, T, W, D[:, :2])


_solve = jax.jit(functools.partial(solve_srgw_coupling, max_steps=500, tol=1e-12, throw=False))
_w_step = jax.jit(w_step)


def test_block_coordinate_monotone_feasible_and_w_step_optimal():
    rng = np.random.default_rng(3)
    n, K = 60, 4
    A = jnp.asarray(_graph(rng, n))
    T = jnp.asarray(rng.dirichlet(np.ones(K), n) / n)
    h = T.sum(1)
    W = _w_step(A, T, jnp.zeros((K, K)))
    F_prev = float(srgw_objective(A, T, W))
    for _ in range(20):
        out = _solve(A, W, T)
        T = out.coupling
        assert float(jnp.min(T)) >= 0.0
        chex.assert_trees_all_close(T.sum(1), h, atol=1e-12)
        F_t = float(srgw_objective(A, T, W))
        np.testing.assert_allclose(float(out.objective), F_t, rtol=1e-12)
        assert F_t <= F_prev + 1e-12
        W = _w_step(A, T, W)
        F_w = float(srgw_objective(A, T, W))
        assert F_w <= F_t + 1e-12
        F_prev = F_w
    # W-step optimality: +-1e-3 symmetric perturbations never lower F; W in [0, 1]
    assert 0.0 <= float(W.min()) and float(W.max()) <= 1.0
    F_best = float(srgw_objective(A, T, W))
    E = jnp.zeros((K, K))
    pert = []
    for k in range(K):
        for m in range(k, K):
            for s in (1e-3, -1e-3):
                pert.append(E.at[k, m].add(s).at[m, k].set(E[k, m] + s))
    vals = jax.jit(jax.vmap(lambda P: srgw_objective(A, T, W + P)))(jnp.stack(pert))
    assert float(vals.min()) >= F_best - 1e-14


def test_float32_dtype_preserved():
    rng = np.random.default_rng(4)
    A = jnp.asarray(_graph(rng, 20), dtype=jnp.float32)
    T0 = jnp.asarray(np.eye(3)[rng.integers(0, 3, 20)] / 20, dtype=jnp.float32)
    out = srgw_barycenter(A, T0, max_steps=50, tol=1e-5, throw=False)
    assert out.coupling.dtype == jnp.float32 and out.structure.dtype == jnp.float32
    chex.assert_trees_all_close(
        out.coupling.sum(1), jnp.full((20,), 1 / 20, jnp.float32), atol=1e-7
    )


def test_vmap_over_starts_equals_loop():
    rng = np.random.default_rng(5)
    n, K = 30, 3
    A, W = jnp.asarray(_graph(rng, n)), jnp.asarray(_sym(rng, K))
    T0s = jnp.asarray(np.stack([np.eye(K)[rng.integers(0, K, n)] / n for _ in range(3)]))
    batched = jax.vmap(lambda t: _solve(A, W, t))(T0s)
    for b in range(3):
        one = _solve(A, W, T0s[b])
        chex.assert_trees_all_close(batched.coupling[b], one.coupling, atol=1e-12)


def test_rounding_bound():
    rng = np.random.default_rng(6)
    greedy = jax.jit(round_greedy)
    for n in (50, 400):
        K = 5
        A = jnp.asarray(_graph(rng, n))
        T = jnp.asarray(rng.dirichlet(np.ones(K), n) / n)
        W = jnp.asarray(_sym(rng, K))
        z = greedy(A, T, W)
        T_round = jax.nn.one_hot(z, K, dtype=T.dtype) / n
        gap = float(srgw_objective(A, T_round, W) - srgw_objective(A, T, W))
        assert gap <= float(jnp.max(W**2)) / n + 1e-12
        # argmax rounding of a one-hot coupling is the identity
        chex.assert_trees_all_equal(round_argmax(T_round), z)


def test_pot_agreement_fixed_w():
    ot = pytest.importorskip("ot")
    rng = np.random.default_rng(7)
    n, K = 60, 4
    A, W = _graph(rng, n), _sym(rng, K)
    h = np.full(n, 1.0 / n)
    for seed in range(3):
        T0 = np.eye(K)[np.random.default_rng(seed).integers(0, K, n)] / n
        ours = _solve(jnp.asarray(A), jnp.asarray(W), jnp.asarray(T0))
        assert ours.result == RESULTS.successful
        _, log = ot.gromov.semirelaxed_gromov_wasserstein(
            A, W, h, G0=T0, log=True, tol_rel=1e-12, tol_abs=0.0
        )
        np.testing.assert_allclose(float(ours.objective), log["srgw_dist"], rtol=1e-6)


def test_pot_agreement_directed():
    ot = pytest.importorskip("ot")
    rng = np.random.default_rng(8)
    n, K = 25, 3
    A, W = (rng.random((n, n)) < 0.3).astype(float), rng.random((K, K))
    h = np.full(n, 1.0 / n)
    T0 = np.eye(K)[rng.integers(0, K, n)] / n
    ours = solve_srgw_coupling(
        jnp.asarray(A), jnp.asarray(W), jnp.asarray(T0), tol=1e-12, symmetric=False
    )
    _, log = ot.gromov.semirelaxed_gromov_wasserstein(
        A, W, h, G0=T0, log=True, symmetric=False, tol_rel=1e-12, tol_abs=0.0
    )
    np.testing.assert_allclose(float(ours.objective), log["srgw_dist"], rtol=1e-6)


@pytest.mark.slow
def test_pot_barycenter_objective_within_5_percent():
    ot = pytest.importorskip("ot")
    rng = np.random.default_rng(9)
    n, K = 120, 4
    A = _graph(rng, n, 0.2)
    h = np.full(n, 1.0 / n)
    ours, theirs = [], []
    fit = jax.jit(lambda T0: srgw_barycenter(jnp.asarray(A), T0, tol=1e-7, throw=False).objective)
    for seed in range(5):
        T0 = np.eye(K)[np.random.default_rng(seed).integers(0, K, n)] / n
        ours.append(float(fit(jnp.asarray(T0))))
        Wp, log = ot.gromov.semirelaxed_gromov_barycenters(
            K,
            [A],
            [h],
            [1.0],
            loss_fun="square_loss",
            symmetric=True,
            G0="kmeans",
            log=True,
            tol=1e-7,
            warmstartT=True,
            random_state=seed,
        )
        theirs.append(
            float(srgw_objective(jnp.asarray(A), jnp.asarray(log["T"][0]), jnp.asarray(Wp)))
        )
    assert min(ours) <= 1.05 * min(theirs)


def test_solver_reports_max_steps_and_bad_input():
    rng = np.random.default_rng(10)
    n, K = 20, 3
    A, W = jnp.asarray(_graph(rng, n)), jnp.asarray(_sym(rng, K))
    T0 = jnp.asarray(rng.dirichlet(np.ones(K), n) / n)
    out = srgw_barycenter(A, T0, max_steps=1, tol=0.0, throw=False)
    assert out.result == RESULTS.max_steps_reached
    with pytest.raises(Exception, match="max_steps"):
        srgw_barycenter(A, T0, max_steps=1, tol=0.0, throw=True)
    # shape mismatches: the jaxtyping hook raises TypeCheckError (a TypeError) first
    for args in ((A[:, :5], T0, W), (A, T0[:5], W), (A, T0, W[:2, :2])):
        with pytest.raises(TypeError):
            srgw_objective(*args)
    with pytest.raises(ValueError, match="`max_steps` must be a Python int"):
        solve_srgw_coupling(A, W, T0, max_steps=0)
    with pytest.raises(ValueError, match="`tol` must be a float"):
        solve_srgw_coupling(A, W, T0, tol=-1.0)
    with pytest.raises(TypeError):
        lmo_rows(W, jnp.ones(5))
