"""In-context estimators for one query: tangent local polynomials, kernel and Bayes predictors.

All functions are pure, act on ONE query ``x0 (D,)`` and one context ``x (n, D), y (n,)``, and
take an optional ``mask (n,)`` (True = real point; padding is ignored exactly). vmap over
queries and tasks. Gaussian weights ``w_i = exp(-|x_i - x0|^2 / (2 h^2))`` are evaluated
relative to the nearest context point (a common factor that cancels in every estimator below),
so a query far from the data gets the nearest point's value instead of 0/0.

References:
    Bickel and Li, Local polynomial regression on unknown manifolds (2007); Cheng and Wu, Local
    linear regression on manifolds and its geometric interpretation, JASA 108 (2013); Aamari and
    Levrard, Nonasymptotic rates for manifold, tangent space and curvature estimation (2019);
    Stone, Optimal global rates of convergence for nonparametric regression (1982).
"""

import itertools

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Bool, Float

from ...core.checks import check_finite
from ._tasks import ICLTask, prior_features


def rate_exponent(beta: float, d: int, kappa: float = 0.0) -> float:
    """Log-log slope of the minimax risk in n: ``-(1 - kappa) 2 beta / (2 beta + d)`` (eq. 2.2).

    With K_n ~ n^kappa equal pieces the risk is ``(n / K_n)^(-2 beta / (2 beta + d))``; e.g.
    (1.5, 1, 0) -> -0.75 and (1.5, 1, 0.25) -> -0.5625.
    """
    if not beta > 0:
        raise ValueError(f"`beta` must be > 0, got {beta!r}.")
    if not (isinstance(d, int) and d >= 1):
        raise ValueError(f"`d` must be an int >= 1, got {d!r}.")
    if not 0 <= kappa < 1:
        raise ValueError(f"`kappa` must lie in [0, 1), got {kappa!r}.")
    return -(1.0 - kappa) * 2.0 * beta / (2.0 * beta + d)


def _positive(name: str, value: ArrayLike) -> Array:
    """Trace-time check for Python numbers, `eqx.error_if` for traced ones."""
    if isinstance(value, (int, float)):
        if not value > 0:
            raise ValueError(f"`{name}` must be > 0, got {value!r}.")
        return jnp.asarray(value)
    value = jnp.asarray(value)
    if value.shape != ():
        raise ValueError(f"`{name}` must be a scalar, got shape {value.shape}.")
    return eqx.error_if(value, value <= 0, f"`{name}` must be > 0.")


def _context(
    x: Array, y: Array | None, x0: Array, mask: Array | None
) -> tuple[Array, Array | None, Array, Bool[Array, " n"]]:
    """Shape checks, then value checks: ``(x, y, x0, mask)`` carrying them (finite entries; an
    all-False mask rejected at run time).
    """
    if x.ndim != 2:
        raise ValueError(f"`x` must have shape (n, D), got {x.shape}.")
    n, D = x.shape
    if y is not None and y.shape != (n,):
        raise ValueError(f"`y` must have shape ({n},) to match x {x.shape}, got {y.shape}.")
    if x0.shape != (D,):
        raise ValueError(f"the query must have shape ({D},) to match x {x.shape}, got {x0.shape}.")
    # Value checks of the context: an inf coordinate would read as "infinitely far" (weight 0),
    # a NaN label as one more point. Padding must hold finite values too (zeros, say).
    x, x0 = check_finite(x, "x"), check_finite(x0, "x0")
    y = None if y is None else check_finite(y, "y")
    if mask is None:
        return x, y, x0, jnp.ones((n,), bool)
    if mask.shape != (n,):
        raise ValueError(f"`mask` must have shape ({n},) to match x {x.shape}, got {mask.shape}.")
    mask = mask.astype(bool)
    x = eqx.error_if(x, ~jnp.any(mask), "`mask` is all False: the context has no points.")
    return x, y, x0, mask


def _sq_dist(x: Array, x0: Array) -> Float[Array, " n"]:
    return jnp.sum((x - x0[None, :]) ** 2, axis=-1)


def gaussian_weights(
    x: Float[Array, "n D"],
    x0: Float[Array, " D"],
    h: ArrayLike,
    mask: Bool[Array, " n"] | None = None,
) -> Float[Array, " n"]:
    """``exp(-(|x_i - x0|^2 - min_j |x_j - x0|^2) / (2 h^2))``, 0 on padding (nearest point: 1)."""
    x, _, x0, mask = _context(x, None, x0, mask)
    h = _positive("h", h).astype(x.dtype)
    d2 = _sq_dist(x, x0)
    shift = jax.lax.stop_gradient(jnp.min(jnp.where(mask, d2, jnp.inf)))
    return jnp.where(mask, jnp.exp(-(d2 - shift) / (2 * h**2)), 0.0)


def local_pca_tangent(
    x: Float[Array, "n D"],
    x0: Float[Array, " D"],
    h_pca: ArrayLike,
    d: int,
    mask: Bool[Array, " n"] | None = None,
) -> Float[Array, "D d"]:
    """Top-d eigenvectors of the Gaussian-weighted local covariance at ``x0``.

    ``C = sum_i v_i (x_i - mu)(x_i - mu)^T / sum_i v_i``, ``mu = sum_i v_i x_i / sum_i v_i``,
    ``v_i`` Gaussian weights at bandwidth ``h_pca``. Returns an orthonormal ``U (D, d)``
    (columns by decreasing eigenvalue; signs are arbitrary).
    """
    x, _, x0, mask = _context(x, None, x0, mask)
    D = x.shape[1]
    if not (isinstance(d, int) and 1 <= d <= D):
        raise ValueError(f"`d` must be an int in [1, D] = [1, {D}], got {d!r}.")
    v = gaussian_weights(x, x0, h_pca, mask)
    v = v / jnp.sum(v)
    mu = v @ x
    xc = x - mu[None, :]
    C = (xc * v[:, None]).T @ xc
    _, vecs = jnp.linalg.eigh(C)
    return vecs[:, ::-1][:, :d]


def _monomials(d: int, degree: int) -> list[tuple[int, ...]]:
    exps = [e for e in itertools.product(range(degree + 1), repeat=d) if sum(e) <= degree]
    return sorted(exps, key=lambda e: (sum(e), tuple(-a for a in e)))


def local_poly_predict(
    x: Float[Array, "n D"],
    y: Float[Array, " n"],
    x0: Float[Array, " D"],
    U: Float[Array, "D d"],
    h: ArrayLike,
    degree: int = 1,
    ridge: float = 1e-8,
    mask: Bool[Array, " n"] | None = None,
) -> Float[Array, ""]:
    """Tangent local-polynomial estimate ``theta_0`` at ``x0``.

    ``u_i = U^T (x_i - x0) / h`` (tangent coordinates, scaled for conditioning), weights
    ``w_i = exp(-|x_i - x0|^2 / (2 h^2))`` from ambient distances, features all monomials of
    total degree <= ``degree`` in ``u`` (constant first), and

        theta = argmin sum_i w_i (y_i - theta^T phi(u_i))^2 + tau |theta_{1:}|^2,
        tau = ridge * sum_i w_i,

    solved on the m x m normal equations, m = C(d + degree, degree). The intercept is invariant
    to the scaling of u, and to any rigid motion applied to x, x0 and U together.
    """
    x, y, x0, mask = _context(x, y, x0, mask)
    if U.ndim != 2 or U.shape[0] != x.shape[1]:
        raise ValueError(f"`U` must have shape (D, d) with D = {x.shape[1]}, got {U.shape}.")
    if not (isinstance(degree, int) and degree >= 0):
        raise ValueError(f"`degree` must be an int >= 0, got {degree!r}.")
    if ridge < 0:
        raise ValueError(f"`ridge` must be >= 0, got {ridge!r}.")
    h = _positive("h", h).astype(x.dtype)
    w = gaussian_weights(x, x0, h, mask)
    u = (x - x0[None, :]) @ U / h
    exps = _monomials(U.shape[1], degree)
    phi = jnp.stack([jnp.prod(u ** jnp.asarray(e, x.dtype)[None, :], axis=-1) for e in exps], -1)
    A = (phi * w[:, None]).T @ phi
    penalty = jnp.concatenate([jnp.zeros((1,), x.dtype), jnp.ones((len(exps) - 1,), x.dtype)])
    A = A + ridge * jnp.sum(w) * jnp.diag(penalty)
    b = phi.T @ (w * jnp.where(mask, y, 0.0))
    return jnp.linalg.solve(A, b)[0]


def nadaraya_watson(
    x: Float[Array, "n D"],
    y: Float[Array, " n"],
    x0: Float[Array, " D"],
    h: ArrayLike,
    mask: Bool[Array, " n"] | None = None,
) -> Float[Array, ""]:
    """Gaussian Nadaraya-Watson estimate ``sum_i w_i y_i / sum_i w_i`` (ambient distances)."""
    x, y, x0, mask = _context(x, y, x0, mask)
    w = gaussian_weights(x, x0, h, mask)
    return jnp.sum(w * jnp.where(mask, y, 0.0)) / jnp.sum(w)


def knn_predict(
    x: Float[Array, "n D"],
    y: Float[Array, " n"],
    x0: Float[Array, " D"],
    k: int,
    mask: Bool[Array, " n"] | None = None,
) -> Float[Array, ""]:
    """Mean label of the ``k`` nearest context points (Euclidean; ties by index)."""
    x, y, x0, mask = _context(x, y, x0, mask)
    if not (isinstance(k, int) and 1 <= k <= x.shape[0]):
        raise ValueError(f"`k` must be an int in [1, n] = [1, {x.shape[0]}], got {k!r}.")
    x = eqx.error_if(x, jnp.sum(mask) < k, "`k` exceeds the number of unmasked points.")
    _, idx = jax.lax.top_k(-jnp.where(mask, _sq_dist(x, x0), jnp.inf), k)
    return jnp.mean(y[idx])


def ridge_predict(
    x: Float[Array, "n D"],
    y: Float[Array, " n"],
    x0: Float[Array, " D"],
    lam: ArrayLike,
    mask: Bool[Array, " n"] | None = None,
) -> Float[Array, ""]:
    """Global ridge regression, intercept unpenalised.

    ``ybar + (x0 - xbar)^T (Xc^T Xc + lam I)^-1 Xc^T yc`` with ``Xc, yc`` centred at the means.
    """
    x, y, x0, mask = _context(x, y, x0, mask)
    lam = _positive("lam", lam).astype(x.dtype)
    m = mask.astype(x.dtype)
    n = jnp.sum(m)
    xbar = m @ x / n
    ybar = jnp.sum(m * y) / n
    xc = (x - xbar[None, :]) * m[:, None]
    yc = (y - ybar) * m
    coef = jnp.linalg.solve(xc.T @ xc + lam * jnp.eye(x.shape[1], dtype=x.dtype), xc.T @ yc)
    return ybar + (x0 - xbar) @ coef


def kernel_ridge_predict(
    x: Float[Array, "n D"],
    y: Float[Array, " n"],
    x0: Float[Array, " D"],
    h: ArrayLike,
    lam: ArrayLike,
    mask: Bool[Array, " n"] | None = None,
) -> Float[Array, ""]:
    """Gaussian kernel ridge ``k(x0, X) (K + lam I)^-1 y`` (no intercept; scikit-learn's form).

    ``k(a, b) = exp(-|a - b|^2 / (2 h^2))``; padded points become decoupled unit-diagonal rows
    with zero label, which leaves the prediction unchanged.
    """
    x, y, x0, mask = _context(x, y, x0, mask)
    h = _positive("h", h).astype(x.dtype)
    lam = _positive("lam", lam).astype(x.dtype)
    m = mask.astype(x.dtype)
    d2 = jnp.sum((x[:, None, :] - x[None, :, :]) ** 2, axis=-1)
    K = jnp.exp(-d2 / (2 * h**2)) * (m[:, None] * m[None, :]) + jnp.diag(1.0 - m)
    k0 = jnp.exp(-_sq_dist(x, x0) / (2 * h**2)) * m
    alpha = jnp.linalg.solve(K + lam * jnp.eye(x.shape[0], dtype=x.dtype), y * m)
    return k0 @ alpha


def _posterior_one(
    task: ICLTask, q: int | Array, beta: float, J: int, amplitude: float, sigma: float
) -> tuple[Array, Array]:
    """Posterior mean and variance of f at query q from the query's own piece."""
    feats = jax.vmap(lambda t: prior_features(t, beta=beta, J=J, amplitude=amplitude))
    same = (task.piece == task.piece_q[q]).astype(task.y.dtype)
    phi_q = feats(task.coords_q[q][None, :])[0]
    phi = feats(task.coords) * same[:, None]
    n, F = phi.shape
    s2 = jnp.asarray(sigma, task.y.dtype) ** 2
    if n > F:  # weight space: O(n F^2); f = Phi w, w ~ N(0, I)
        M = phi.T @ phi + s2 * jnp.eye(F, dtype=phi.dtype)
        mean = phi_q @ jnp.linalg.solve(M, phi.T @ (same * task.y))
        var = s2 * phi_q @ jnp.linalg.solve(M, phi_q)
        return mean, var
    # function space: O(n^3); points of other pieces become decoupled unit rows. One LU solve
    # with two right-hand sides: under vmap (queries) XLA's CPU Cholesky is not batched through
    # LAPACK and runs ~50x slower than the batched LU.
    Kmat = phi @ phi.T + jnp.diag(1.0 - same)
    k_q = phi @ phi_q
    sol = jnp.linalg.solve(
        Kmat + s2 * jnp.eye(n, dtype=phi.dtype), jnp.stack([same * task.y, k_q], 1)
    )
    return k_q @ sol[:, 0], phi_q @ phi_q - k_q @ sol[:, 1]


def _bayes_checks(task: ICLTask, beta: float, J: int, sigma: float, amplitude: float) -> None:
    if not beta > 0:
        raise ValueError(f"`beta` must be > 0, got {beta!r}.")
    if not (isinstance(J, int) and J >= 1):
        raise ValueError(f"`J` must be an int >= 1, got {J!r}.")
    if not sigma > 0:
        raise ValueError(f"`sigma` must be > 0 for the Bayes predictor, got {sigma!r}.")
    if not amplitude > 0:
        raise ValueError(f"`amplitude` must be > 0, got {amplitude!r}.")
    if task.coords.ndim != 2 or task.coords.shape[0] != task.y.shape[0]:
        raise ValueError(f"task.coords must have shape (n, d), got {task.coords.shape}.")


def bayes_predict(
    task: ICLTask, *, beta: float, J: int, amplitude: float = 1.0, sigma: float
) -> Float[Array, " Q"]:
    """Exact Bayes predictor: the posterior mean of f at each query.

    Pieces carry independent GPs, so only the points of the query's own piece enter. Weight
    space (``O(n F^2)``, ``F = (2J)^d`` features) when ``n > F``, function space otherwise; the
    two agree to round-off.
    """
    _bayes_checks(task, beta, J, sigma, amplitude)
    Q = task.xq.shape[0]
    return jax.vmap(lambda q: _posterior_one(task, q, beta, J, amplitude, sigma)[0])(jnp.arange(Q))


def bayes_risk(
    task: ICLTask, *, beta: float, J: int, amplitude: float = 1.0, sigma: float
) -> Float[Array, " Q"]:
    """Posterior variance of f at each query: the Bayes risk given the context (the floor)."""
    _bayes_checks(task, beta, J, sigma, amplitude)
    Q = task.xq.shape[0]
    return jax.vmap(lambda q: _posterior_one(task, q, beta, J, amplitude, sigma)[1])(jnp.arange(Q))
