"""In-context regression on manifold mixtures: closed forms, peers, masking, bad input."""

import functools as ft

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import jaxgen.transformers as T


@pytest.fixture(scope="module")
def task():
    # one compiled draw (sample_mixture and sample_task work under jit with their sizes static)
    return jax.jit(
        lambda k0, k1: T.sample_task(k1, T.sample_mixture(k0, 4, 2), 120, num_queries=4, J=8)
    )(jr.key(0), jr.key(1))


@jax.jit
def _lp(task, h=0.4, h_pca=0.4, ridge=0.0):
    """Tangent local-linear predictions at the queries; one compiled program for every task of
    the same shapes (bandwidths traced)."""
    U = jax.vmap(lambda q: T.local_pca_tangent(task.x, q, h_pca, 1))(task.xq)
    return jax.vmap(lambda q, u: T.local_poly_predict(task.x, task.y, q, u, h, ridge=ridge))(
        task.xq, U
    )


def test_polynomial_reproduction(getkey):
    # flat 2-plane in R^5, f quadratic in plane coordinates: LP2 exact for any h
    R = jnp.linalg.qr(jr.normal(getkey(), (5, 5)))[0]
    u = jr.normal(getkey(), (40, 2))
    x = u @ R[:, :2].T + 0.3
    y = 1.0 + u[:, 0] - 2 * u[:, 1] + 0.5 * u[:, 0] * u[:, 1] + u[:, 1] ** 2
    x0 = jnp.asarray([0.2, -0.1]) @ R[:, :2].T + 0.3
    f0 = 1.0 + 0.2 + 0.2 - 0.01 + 0.01
    lp2 = jax.jit(lambda h: T.local_poly_predict(x, y, x0, R[:, :2], h, degree=2, ridge=0.0))
    for h in (0.3, 3.0):  # one compiled program, h traced (eager == jit: estimator tests)
        got = lp2(h)
        np.testing.assert_allclose(got, f0, atol=1e-8)


def test_rigid_motion_and_padding(task, getkey):
    base = _lp(task)
    Q = jnp.linalg.qr(jr.normal(getkey(), (4, 4)))[0]
    moved = task._replace(x=task.x @ Q.T + 1.0, xq=task.xq @ Q.T + 1.0)
    np.testing.assert_allclose(_lp(moved), base, atol=1e-9)
    pad = jnp.concatenate([task.x, 100.0 + jnp.zeros((7, 4))])
    ypad = jnp.concatenate([task.y, jnp.ones(7)])
    mask = jnp.arange(pad.shape[0]) < task.x.shape[0]
    fns = (
        lambda x, y, q, m: T.nadaraya_watson(x, y, q, 0.3, mask=m),
        lambda x, y, q, m: T.ridge_predict(x, y, q, 0.1, mask=m),
        lambda x, y, q, m: T.kernel_ridge_predict(x, y, q, 0.5, 0.1, mask=m),
        lambda x, y, q, m: T.knn_predict(x, y, q, 5, mask=m),
        T.TwoStageConstruction(d=1, h_pca=0.4, h=0.4),
    )

    @jax.jit  # all five, unpadded and padded, in one program (eager == jit: estimator tests)
    def unpadded_and_padded(x, y, pad, ypad, q, mask):
        return [(fn(x, y, q, None), fn(pad, ypad, q, mask)) for fn in fns]

    for a, padded in unpadded_and_padded(task.x, task.y, pad, ypad, task.xq[0], mask):
        np.testing.assert_allclose(padded, a, rtol=1e-9, atol=1e-12)


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
    out = eqx.filter_jit(lsa)(Z, mask)[-1, -1]
    np.testing.assert_allclose(out, eta / n * (y @ x) @ xq, atol=1e-6)


def test_bayes_weight_space_equals_function_space():
    task = jax.jit(
        lambda k0, k1: T.sample_task(k1, T.sample_mixture(k0, 3, 2), 40, num_queries=3, J=8)
    )(jr.key(2), jr.key(3))
    bayes_predict = jax.jit(T.bayes_predict, static_argnames=("beta", "J", "sigma"))
    fs = bayes_predict(task, beta=1.5, J=8, sigma=0.1)  # n = 40 > F = 16: weight space
    sub = task._replace(
        x=task.x[:12], y=task.y[:12], piece=task.piece[:12], coords=task.coords[:12]
    )
    # numpy function-space reference on the small task
    from jaxgen.transformers import prior_kernel

    kern = jax.jit(
        jax.vmap(jax.vmap(lambda a, b: prior_kernel(a, b, beta=1.5, J=8), (None, 0)), (0, None))
    )
    both = np.asarray(kern(jnp.concatenate([sub.coords, sub.coords_q]), sub.coords))
    K_all, k_all = both[:12], both[12:]  # context-context and query-context, one program
    for q in range(3):
        same = np.asarray(sub.piece == sub.piece_q[q])
        K = K_all[np.ix_(same, same)]
        k = k_all[q][same]
        ref = k @ np.linalg.solve(K + 0.01 * np.eye(same.sum()), np.asarray(sub.y)[same])
        np.testing.assert_allclose(bayes_predict(sub, beta=1.5, J=8, sigma=0.1)[q], ref, rtol=1e-8)
    assert fs.shape == (3,)
    bayes_risk = jax.jit(T.bayes_risk, static_argnames=("beta", "J", "sigma"))
    assert bool(jnp.all(bayes_risk(task, beta=1.5, J=8, sigma=0.1) > 0))


def test_ridge_and_kernel_ridge_vs_references(task):
    X, y, q = np.asarray(task.x), np.asarray(task.y), np.asarray(task.xq[0])
    xb, yb = X.mean(0), y.mean()
    Xc = X - xb
    ref = yb + (q - xb) @ np.linalg.solve(Xc.T @ Xc + 0.3 * np.eye(4), Xc.T @ (y - yb))
    ridge = jax.jit(T.ridge_predict)  # eager == jit: test_estimators_eager_jit_vmap_loop
    np.testing.assert_allclose(ridge(task.x, task.y, task.xq[0], 0.3), ref, rtol=1e-10)
    sk = pytest.importorskip("sklearn.kernel_ridge")
    kr = sk.KernelRidge(alpha=0.1, kernel="rbf", gamma=1 / (2 * 0.5**2)).fit(X, y)
    got = jax.jit(T.kernel_ridge_predict)(task.x, task.y, task.xq[0], 0.5, 0.1)
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
    # Each of these gave a plausible task: NaN labels, no features (a zero function), one piece
    # whatever n, no query.
    with pytest.raises(ValueError, match="`sigma` must be finite and >= 0"):
        T.sample_task(jr.key(0), T.sample_mixture(jr.key(0), 3, 1), 5, sigma=float("nan"))
    with pytest.raises(ValueError, match="`J` must be an int >= 1"):
        T.prior_features(jnp.array([0.3]), beta=1.5, J=0)
    with pytest.raises(ValueError, match="`beta` must be finite and > 0"):
        T.prior_features(jnp.array([0.3]), beta=-1.0, J=4)
    with pytest.raises(ValueError, match="`amplitude` must be > 0"):
        T.prior_kernel(jnp.array([0.3]), jnp.array([0.1]), beta=1.5, J=4, amplitude=-1.0)
    with pytest.raises(ValueError, match="`c_K` must be > 0"):
        T.num_pieces(16, 0.5, -1.0)
    with pytest.raises(ValueError, match="`num_queries` must be an int >= 1"):
        T.task_batch(jr.key(0), batch=2, n_min=3, n_max=4, D=2, kappa=0.25, J=4, num_queries=0)


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


# ---------------------------------------------------------------------------------------------
# embedding invariance, eager == jit, vmap == loop, a tiny training run, checks 7 and 8 (slow)


def _curve_task(n, D, seed=0):
    """A non-planar closed curve in R^3 isometrically embedded in R^D (pad with zeros, rotate)."""
    rng = np.random.default_rng(seed)
    t = rng.uniform(0, 2 * np.pi, n + 3)
    x3 = np.stack([np.cos(t), np.sin(t), 0.5 * np.sin(2 * t)], 1)
    tan3 = np.stack([-np.sin(t), np.cos(t), np.cos(2 * t)], 1)
    tan3 /= np.linalg.norm(tan3, axis=1, keepdims=True)
    y = np.sin(t) + 0.5 * np.cos(2 * t) + 0.1 * rng.normal(size=n + 3)
    Q = np.linalg.qr(np.random.default_rng(seed + 1).normal(size=(D, D)))[0] if D > 3 else np.eye(3)
    pad = lambda a: np.concatenate([a, np.zeros((a.shape[0], D - 3))], 1) @ Q.T  # noqa: E731
    x, y, tan = jnp.asarray(pad(x3)), jnp.asarray(y), jnp.asarray(pad(tan3))
    return x[:n], y[:n], x[n:], tan[n:, :, None]


@jax.jit
def _oracle_and_pca(x, y, xq, U):
    lp = jax.vmap(lambda q, u: T.local_poly_predict(x, y, q, u, 0.3))
    pca = jax.vmap(lambda q: T.local_pca_tangent(x, q, 0.4, 1))(xq)
    return lp(xq, U), lp(xq, pca)


@pytest.mark.filterwarnings("ignore:After 0.17:FutureWarning")  # statsmodels' own default RNG
def test_ambient_dimension_independence():
    # the same task in D = 3 and D = 30 gives the same tangent-LP predictions
    x3, y, q3, U3 = _curve_task(80, 3)
    x30, _, q30, U30 = _curve_task(80, 30)
    for a, b in zip(_oracle_and_pca(x3, y, q3, U3), _oracle_and_pca(x30, y, q30, U30), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-8)
    # peer: ambient local linear (U = I) and Nadaraya-Watson equal statsmodels' KernelReg ll/lc.
    # One might expect the ambient fit to change with D; it does not: KernelReg solves its
    # rank-deficient ambient system with pinv, whose minimum-norm solution ignores the padded
    # directions, so it is invariant to an exact isometric embedding as well (checked here).
    kr = pytest.importorskip("statsmodels.nonparametric.kernel_regression")
    ll = jax.jit(jax.vmap(lambda q: T.local_poly_predict(x3, y, q, jnp.eye(3), 0.3, ridge=0.0)))(q3)
    nw = jax.jit(jax.vmap(lambda q: T.nadaraya_watson(x3, y, q, 0.3)))(q3)
    for D, x, q in ((3, x3, q3), (30, x30, q30)):
        for reg, ours in (("ll", ll), ("lc", nw)):
            ref = kr.KernelReg(np.asarray(y), np.asarray(x), "c" * D, reg_type=reg, bw=[0.3] * D)
            np.testing.assert_allclose(ours, ref.fit(np.asarray(q))[0], rtol=1e-7)


_ESTIMATORS = {
    "nadaraya_watson": lambda x, y, q: T.nadaraya_watson(x, y, q, 0.3),
    "knn": lambda x, y, q: T.knn_predict(x, y, q, 5),
    "ridge": lambda x, y, q: T.ridge_predict(x, y, q, 0.1),
    "kernel_ridge": lambda x, y, q: T.kernel_ridge_predict(x, y, q, 0.5, 0.1),
    "local_pca": lambda x, y, q: T.local_pca_tangent(x, q, 0.4, 1),
    "local_poly2": lambda x, y, q: T.local_poly_predict(
        x, y, q, T.local_pca_tangent(x, q, 0.4, 1), 0.4, degree=2
    ),
}


@pytest.mark.parametrize("name", sorted(_ESTIMATORS))
def test_estimators_eager_jit_vmap_loop(task, name):
    fn = _ESTIMATORS[name]
    batched = jax.jit(jax.vmap(fn, (None, None, 0)))(task.x, task.y, task.xq[:2])
    loop = jnp.stack([fn(task.x, task.y, q) for q in task.xq[:2]])  # eager, one query at a time
    if name == "local_pca":  # eigenvector signs are arbitrary: compare the projectors
        batched, loop = (jnp.einsum("qia,qja->qij", u, u) for u in (batched, loop))
    np.testing.assert_allclose(batched, loop, rtol=1e-9, atol=1e-12)


@pytest.fixture(scope="module")
def tiny_batch(task):
    """Two padded contexts (14 slots, 12 real) with two queries each, cut from the module's
    task: slicing, no extra compiled task draw."""
    cut = lambda a, size: jnp.stack([a[:size], a[size : 2 * size]])  # noqa: E731
    return T.ICLBatch(
        x=cut(task.x, 14),
        y=cut(task.y, 14),
        mask=jnp.broadcast_to(jnp.arange(14) < 12, (2, 14)),
        xq=cut(task.xq, 2),
        yq=cut(task.fq, 2),
        fq=cut(task.fq, 2),
        n=jnp.asarray(12),
    )


@pytest.mark.parametrize("cls", [T.LinearAttentionICL, T.SoftmaxICL])
def test_models_eager_jit_vmap_loop(tiny_batch, cls):
    b = tiny_batch
    model = eqx.filter_jit(  # compiled initialisation; the forward pass below runs eagerly
        lambda k: cls(4, dim=8, num_layers=1, num_heads=2, num_frequencies=4, key=k)
    )(jr.key(0))
    batched = jax.jit(jax.vmap(model))(b.x, b.y, b.xq, b.mask)
    loop = jnp.stack([model(b.x[i], b.y[i], b.xq[i], b.mask[i]) for i in range(2)])  # eager
    np.testing.assert_allclose(batched, loop, rtol=1e-9, atol=1e-12)  # vmap + jit == eager loop
    assert batched.shape == (2, 2)


_TRAIN = dict(batch=16, n_min=24, n_max=24, D=2, kappa=0.0, J=4, amplitude=2.0, beta=1.0)


def _train_and_compare(cls, steps):
    """Train a tiny model by `fit` + `adamw_cosine`; held-out MSE vs the context-mean predictor."""
    from jaxgen.core import adamw_cosine, fit

    batches = ft.partial(T.task_batch, **_TRAIN)
    model = eqx.filter_jit(  # initialised as one compiled program, not op by op
        lambda k: cls(
            2, dim=16, num_layers=1, num_heads=2, num_frequencies=16, frequency_scale=1.0, key=k
        )
    )(jr.key(0))
    res = fit(T.icl_loss, model, batches, adamw_cosine(3e-3, steps), num_steps=steps,
              key=jr.key(1), progress=False)  # fmt: skip
    mse, const = _held_out(res.model, jr.key(99))
    return float(mse), float(const), res.losses


@eqx.filter_jit
def _held_out(model, key):
    """Held-out MSE of ``model`` and of the context-mean predictor on 256 fresh tasks (one
    compiled program: the batch draw and both losses)."""
    held = T.task_batch(key, **{**_TRAIN, "batch": 256})
    m = held.mask.astype(held.y.dtype)
    ybar = jnp.sum(held.y * m, 1) / jnp.sum(m, 1)
    return T.icl_loss(model, held, None), jnp.mean((ybar[:, None] - held.yq) ** 2)


def test_linear_attention_training_beats_constant():
    # constant (context mean) predictor: about 2.6 on these tasks; trained: about 0.8
    mse, const, losses = _train_and_compare(T.LinearAttentionICL, 100)
    assert np.all(np.isfinite(losses))
    assert mse < 0.6 * const


@pytest.mark.slow
def test_softmax_training_beats_constant():
    mse, const, _ = _train_and_compare(T.SoftmaxICL, 600)
    assert mse < 0.8 * const


def _draw_tasks(key, n, K, num_tasks, **kw):
    def one(k):
        kp, kt = jr.split(k)
        return T.sample_task(kt, T.sample_mixture(kp, 10, K), n, num_queries=8, **kw)

    return jax.jit(jax.vmap(one))(jr.split(key, num_tasks))


@ft.partial(jax.jit, static_argnames=("degree",))
def _lp_mse(tasks, h, degree):
    lp = lambda x, y, q, u: T.local_poly_predict(x, y, q, u, h, degree=degree)  # noqa: E731
    pred = jax.vmap(jax.vmap(lp, (None, None, 0, 0)))(tasks.x, tasks.y, tasks.xq, tasks.tangent_q)
    return jnp.mean((pred - tasks.fq) ** 2)


@jax.jit
def _nw_mse(tasks, h):
    nw = lambda x, y, q: T.nadaraya_watson(x, y, q, h)  # noqa: E731
    pred = jax.vmap(jax.vmap(nw, (None, None, 0)))(tasks.x, tasks.y, tasks.xq)
    return jnp.mean((pred - tasks.fq) ** 2)


GRID = (0.25, 0.5, 0.75, 1.0, 1.5, 2.0)


# kappa = 0.25 is borderline: with sample_task's earlier random stream the slope was -0.73
# against -0.5625 (MSE at n = 128, K = 4, n_k = 32 was 3.1x the n = 256 value: heavy-tailed
# local-linear errors with ~30 points per piece); from n_k = 64 to 512 the slope per log n_k was
# -0.79. With the current stream it passes; the benchmark's n <= 2048 version misses by 0.03.
@pytest.mark.slow
@pytest.mark.parametrize("kappa", [0.0, 0.25])
def test_oracle_local_linear_rate(kappa):
    # rate check: c_h tuned at n = 256 on separate tasks, then fixed; 50 tasks x 8 queries per n
    beta, d = 1.5, 1
    rule = lambda n: (n / T.num_pieces(n, kappa)) ** (-1 / (2 * beta + d))  # noqa: E731
    val = _draw_tasks(jr.key(10), 256, T.num_pieces(256, kappa), 50, beta=beta)
    c = min(GRID, key=lambda c: float(_lp_mse(val, c * rule(256), 1)))
    ns = [128, 256, 512, 1024, 2048, 4096]
    mse = [float(_lp_mse(_draw_tasks(jr.key(n), n, T.num_pieces(n, kappa), 50, beta=beta),
                         c * rule(n), 1)) for n in ns]  # fmt: skip
    slope = np.polyfit(np.log(ns), np.log(mse), 1)[0]
    assert abs(slope - T.rate_exponent(beta, d, kappa)) <= 0.15, (slope, mse)


@pytest.mark.slow
def test_local_quadratic_beats_nadaraya_watson_on_smooth_functions():
    # smooth test (beta 1, J 8, A 2), bandwidths tuned at n = 256 on separate tasks
    kw = dict(beta=1.0, J=8, amplitude=2.0)
    val = _draw_tasks(jr.key(20), 256, 1, 50, **kw)
    c2 = min(GRID, key=lambda c: float(_lp_mse(val, c * 256 ** (-0.2), 2)))
    c0 = min(GRID, key=lambda c: float(_nw_mse(val, c * 256 ** (-0.2))))
    for n in (256, 1024):
        tasks = _draw_tasks(jr.key(n + 1), n, 1, 50, **kw)
        h = n ** (-0.2)
        assert float(_lp_mse(tasks, c2 * h, 2)) < float(_nw_mse(tasks, c0 * h)), n
