"""In-context regression on manifold mixtures: closed forms, peers, masking, bad input."""

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import jaxgen.transformers as T


@pytest.fixture(scope="module")
def task():
    pieces = T.sample_mixture(jr.key(0), 4, 2)
    return T.sample_task(jr.key(1), pieces, 120, num_queries=4, J=8)


def _lp(task, h=0.4, h_pca=0.4, ridge=0.0):
    U = jax.vmap(lambda q: T.local_pca_tangent(task.x, q, h_pca, 1))(task.xq)
    return jax.jit(
        jax.vmap(lambda q, u: T.local_poly_predict(task.x, task.y, q, u, h, ridge=ridge))
    )(task.xq, U)


def test_polynomial_reproduction(getkey):
    # flat 2-plane in R^5, f quadratic in plane coordinates: LP2 exact for any h
    R = jnp.linalg.qr(jr.normal(getkey(), (5, 5)))[0]
    u = jr.normal(getkey(), (40, 2))
    x = u @ R[:, :2].T + 0.3
    y = 1.0 + u[:, 0] - 2 * u[:, 1] + 0.5 * u[:, 0] * u[:, 1] + u[:, 1] ** 2
    x0 = jnp.asarray([0.2, -0.1]) @ R[:, :2].T + 0.3
    f0 = 1.0 + 0.2 + 0.2 - 0.01 + 0.01
    for h in (0.3, 3.0):
        got = T.local_poly_predict(x, y, x0, R[:, :2], h, degree=2, ridge=0.0)
        np.testing.assert_allclose(got, f0, atol=1e-8)


def test_rigid_motion_and_padding(task, getkey):
    base = _lp(task)
    Q = jnp.linalg.qr(jr.normal(getkey(), (4, 4)))[0]
    moved = task._replace(x=task.x @ Q.T + 1.0, xq=task.xq @ Q.T + 1.0)
    np.testing.assert_allclose(_lp(moved), base, atol=1e-9)
    pad = jnp.concatenate([task.x, 100.0 + jnp.zeros((7, 4))])
    ypad = jnp.concatenate([task.y, jnp.ones(7)])
    mask = jnp.arange(pad.shape[0]) < task.x.shape[0]
    for fn in (
        lambda x, y, q, m: T.nadaraya_watson(x, y, q, 0.3, mask=m),
        lambda x, y, q, m: T.ridge_predict(x, y, q, 0.1, mask=m),
        lambda x, y, q, m: T.kernel_ridge_predict(x, y, q, 0.5, 0.1, mask=m),
        lambda x, y, q, m: T.knn_predict(x, y, q, 5, mask=m),
        T.TwoStageConstruction(d=1, h_pca=0.4, h=0.4),
    ):
        a = fn(task.x, task.y, task.xq[0], None)
        np.testing.assert_allclose(fn(pad, ypad, task.xq[0], mask), a, rtol=1e-9, atol=1e-12)


def test_construction_equals_local_linear(task):
    con = T.TwoStageConstruction(d=1, h_pca=0.4, h=0.4)
    got = jax.jit(con)(task.x, task.y, task.xq)
    ref = _lp(task)
    np.testing.assert_allclose(got, ref, rtol=1e-7)
    U = T.local_pca_tangent(task.x, task.xq[0], 0.4, 1)
    np.testing.assert_allclose(con.projector(task.x, task.xq[0]), U @ U.T, atol=1e-8)
    # eager == jit
    np.testing.assert_allclose(con(task.x, task.y, task.xq[1]), got[1], rtol=1e-10)


def test_linear_attention_one_gd_step(getkey):
    n, D, eta = 16, 3, 0.7
    x, w = jr.normal(getkey(), (n, D)), jr.normal(getkey(), (D,))
    y, xq = x @ w, jr.normal(getkey(), (D,))
    lsa = T.LinearSelfAttention(D + 1, 1, D + 1, key=getkey())
    P = jnp.diag(jnp.asarray([1.0] * D + [0.0]))[None]
    V = jnp.zeros((1, D + 1, D + 1)).at[0, D, D].set(eta)
    lsa = lsa.__class__.__new__(lsa.__class__)
    object.__setattr__(lsa, "W_Q", P)
    object.__setattr__(lsa, "W_K", P)
    object.__setattr__(lsa, "W_V", V)
    object.__setattr__(lsa, "W_O", jnp.eye(D + 1)[None])
    Z = jnp.concatenate([jnp.concatenate([x, y[:, None]], 1), jnp.append(xq, 0.0)[None]])
    mask = jnp.arange(n + 1) < n
    out = lsa(Z, mask)[-1, -1]
    np.testing.assert_allclose(out, eta / n * (y @ x) @ xq, atol=1e-6)


def test_bayes_weight_space_equals_function_space():
    pieces = T.sample_mixture(jr.key(2), 3, 2)
    task = T.sample_task(jr.key(3), pieces, 40, num_queries=3, J=8)
    fs = T.bayes_predict(task, beta=1.5, J=8, sigma=0.1)  # n = 40 > F = 16: weight space
    sub = task._replace(
        x=task.x[:12], y=task.y[:12], piece=task.piece[:12], coords=task.coords[:12]
    )
    # numpy function-space reference on the small task
    from jaxgen.transformers import prior_kernel

    kern = jax.vmap(jax.vmap(lambda a, b: prior_kernel(a, b, beta=1.5, J=8), (None, 0)), (0, None))
    for q in range(3):
        same = np.asarray(sub.piece == sub.piece_q[q])
        K = np.asarray(kern(sub.coords, sub.coords))[np.ix_(same, same)]
        k = np.asarray(kern(sub.coords_q[q : q + 1], sub.coords))[0][same]
        ref = k @ np.linalg.solve(K + 0.01 * np.eye(same.sum()), np.asarray(sub.y)[same])
        np.testing.assert_allclose(
            T.bayes_predict(sub, beta=1.5, J=8, sigma=0.1)[q], ref, rtol=1e-8
        )
    assert fs.shape == (3,)
    assert bool(jnp.all(T.bayes_risk(task, beta=1.5, J=8, sigma=0.1) > 0))


def test_ridge_and_kernel_ridge_vs_references(task):
    X, y, q = np.asarray(task.x), np.asarray(task.y), np.asarray(task.xq[0])
    xb, yb = X.mean(0), y.mean()
    Xc = X - xb
    ref = yb + (q - xb) @ np.linalg.solve(Xc.T @ Xc + 0.3 * np.eye(4), Xc.T @ (y - yb))
    np.testing.assert_allclose(T.ridge_predict(task.x, task.y, task.xq[0], 0.3), ref, rtol=1e-10)
    sk = pytest.importorskip("sklearn.kernel_ridge")
    kr = sk.KernelRidge(alpha=0.1, kernel="rbf", gamma=1 / (2 * 0.5**2)).fit(X, y)
    got = T.kernel_ridge_predict(task.x, task.y, task.xq[0], 0.5, 0.1)
    np.testing.assert_allclose(got, kr.predict(q[None])[0], rtol=1e-8)


def test_bad_input(task):
    with pytest.raises(ValueError, match="h"):
        T.nadaraya_watson(task.x, task.y, task.xq[0], 0.0)
    with pytest.raises(ValueError, match="d"):
        T.local_pca_tangent(task.x, task.xq[0], 0.3, 5)
    with pytest.raises((ValueError, TypeError)):
        T.local_poly_predict(task.x, task.y[:3], task.xq[0], task.tangent_q[0], 0.3)
    with pytest.raises(ValueError, match="unknown"):
        T.sample_mixture(jr.key(0), 4, 2, kinds=("cube",))
    with pytest.raises(ValueError, match="D >= 3"):
        T.sample_mixture(jr.key(0), 2, 2, kinds=("sphere",))
    with pytest.raises(ValueError, match="sigma"):
        T.sample_task(jr.key(0), T.sample_mixture(jr.key(0), 3, 1), 5, sigma=-1.0)
    with pytest.raises(Exception, match="all False"):
        T.nadaraya_watson(task.x, task.y, task.xq[0], 0.3, mask=jnp.zeros(120, bool))


@pytest.mark.slow
def test_models_and_loss_shapes():
    b = T.task_batch(jr.key(5), batch=2, n_min=8, n_max=12, D=4, kappa=0.25, J=4)
    assert b.x.shape == (2, 12, 4) and b.mask.shape == (2, 12)
    for cls in (T.LinearAttentionICL, T.SoftmaxICL):
        m = cls(4, dim=8, num_layers=1, num_heads=2, num_frequencies=4, key=jr.key(0))
        loss = T.icl_loss(m, b, None)
        assert jnp.isfinite(loss)
        one = m(b.x[0], b.y[0], b.xq[0, 0], b.mask[0])
        np.testing.assert_allclose(one, m(b.x[0], b.y[0], b.xq[0], b.mask[0])[0], rtol=1e-10)
