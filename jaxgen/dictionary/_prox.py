"""Proximal operators of the PADL penalties, acting on one row of the code matrix.

All are pure and traceable; ``vmap`` them over the rows of ``R`` (one row per atom).
"""

import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from ..core.checks import check_finite, check_nonnegative


def _check_row(v: Array) -> Array:
    """One non-empty row, finite (a NaN compares false everywhere and would vanish)."""
    v = jnp.asarray(v)
    if v.ndim != 1 or v.shape[0] < 1:
        raise ValueError(f"`v` must have shape (n,) with n >= 1, got {v.shape}.")
    return check_finite(v, "v")


# The public operators check their arguments (``v`` finite, thresholds finite and >= 0); the
# solvers' FISTA loop calls the unchecked twins (``_soft_threshold``, ...), whose inputs it has
# checked once at entry.


def soft_threshold(v: Float[Array, "*shape"], t: Float[ArrayLike, ""]) -> Float[Array, "*shape"]:
    r"""Elementwise soft threshold, the prox of :math:`t\|\cdot\|_1`.

    .. math:: \operatorname{soft}(v, t) = \operatorname{sign}(v)\max(|v| - t, 0).

    Args:
        v: any array.
        t: the threshold, a scalar >= 0.

    Returns:
        An array of the shape and dtype of ``v``.

    Raises:
        ValueError: ``t`` NaN, inf or < 0 (an ``EquinoxRuntimeError`` under `jax.jit`).
    """
    return _soft_threshold(v, check_nonnegative(t, "t"))


def _soft_threshold(v: Array, t: ArrayLike) -> Array:
    t = jnp.asarray(t, dtype=v.dtype)
    return jnp.sign(v) * jnp.maximum(jnp.abs(v) - t, 0)


def project_l1_ball(v: Float[Array, " n"], z: Float[ArrayLike, ""]) -> Float[Array, " n"]:
    r"""Euclidean projection of ``v`` onto the l1 ball of radius ``z`` (sort-based).

    If :math:`\|v\|_1 \le z` the answer is ``v``; otherwise, with :math:`s` the magnitudes sorted in
    decreasing order, :math:`\rho = \max\{j : s_j > (\sum_{i \le j} s_i - z)/j\}` and
    :math:`\theta = (\sum_{i\le\rho} s_i - z)/\rho`, it is :math:`\operatorname{soft}(v, \theta)`.
    A radius ``z = 0`` gives 0.

    Args:
        v: a vector of shape (n,).
        z: the radius, a scalar >= 0.

    Returns:
        The projection, shape (n,).

    References:
        Duchi, Shalev-Shwartz, Singer, Chandra. Efficient projections onto the l1-ball for
        learning in high dimensions. ICML 2008.

    Raises:
        ValueError: ``v`` empty or not finite, ``z`` NaN, inf or < 0 (value conditions raise an
            ``EquinoxRuntimeError`` under `jax.jit`).
    """
    return _project_l1_ball(_check_row(v), check_nonnegative(z, "z"))


def _project_l1_ball(v: Array, z: ArrayLike) -> Array:
    z = jnp.asarray(z, dtype=v.dtype)
    a = jnp.abs(v)
    s = jnp.sort(a)[::-1]
    cumsum = jnp.cumsum(s)
    j = jnp.arange(1, v.shape[0] + 1, dtype=v.dtype)
    # The condition holds for a prefix of j; rho is its length (>= 1 whenever ||v||_1 > z >= 0).
    rho = jnp.maximum(jnp.sum(s > (cumsum - z) / j), 1)
    theta = (cumsum[rho - 1] - z) / rho.astype(v.dtype)
    projected = jnp.sign(v) * jnp.maximum(a - theta, 0)
    inside = jnp.sum(a) <= z
    return jnp.where(inside, v, jnp.where(z > 0, projected, jnp.zeros_like(v)))


def prox_row_l1_linf(
    v: Float[Array, " n"], t1: Float[ArrayLike, ""], t2: Float[ArrayLike, ""]
) -> Float[Array, " n"]:
    r"""Prox of :math:`t_1\|\cdot\|_1 + t_2\|\cdot\|_\infty` on one row.

    It is the composition :math:`\operatorname{prox}_{t_2\|\cdot\|_\infty}(\operatorname{soft}(v,
    t_1))`, and by Moreau's identity :math:`\operatorname{prox}_{t\|\cdot\|_\infty}(u) = u -
    P_{\|\cdot\|_1 \le t}(u)`. (The l-inf prox clips magnitudes without changing signs or support,
    so the l1 subgradient carries over.)

    Args:
        v: a row of shape (n,).
        t1: the l1 threshold (step x lambda_1) >= 0.
        t2: the l-inf threshold (step x lambda_2) >= 0.

    Returns:
        The prox, shape (n,).

    References:
        Zhao, Tang, Ren, Zhang, Li. A unified probabilistic framework for dictionary learning with
        parsimonious activation. arXiv 2509.25690.

    Raises:
        ValueError: ``v`` empty or not finite, ``t1`` or ``t2`` NaN, inf or < 0 (value
            conditions raise an ``EquinoxRuntimeError`` under `jax.jit`).
    """
    v = _check_row(v)
    return _prox_row_l1_linf(v, check_nonnegative(t1, "t1"), check_nonnegative(t2, "t2"))


def _prox_row_l1_linf(v: Array, t1: ArrayLike, t2: ArrayLike) -> Array:
    u = _soft_threshold(v, t1)
    return u - _project_l1_ball(u, t2)


def prox_row_l1_count(
    v: Float[Array, " n"], t1: Float[ArrayLike, ""], t0: Float[ArrayLike, ""]
) -> Float[Array, " n"]:
    r"""Exact prox of :math:`t_1\|\cdot\|_1 + t_0\,[\,r \ne 0\,]` on one row (atom-count penalty).

    The minimiser is either 0 or :math:`u = \operatorname{soft}(v, t_1)`; ``u`` wins when its gain
    :math:`\tfrac12\|v\|^2 - (\tfrac12\|u - v\|^2 + t_1\|u\|_1)` exceeds :math:`t_0`.

    Args:
        v: a row of shape (n,).
        t1: the l1 threshold (step x lambda_1) >= 0.
        t0: the activation price (step x lambda_0) >= 0.

    Returns:
        The prox, shape (n,).

    References:
        Zhao, Tang, Li. On the sparsity-storage-accuracy tradeoff in parsimoniously activated
        dictionary learning. arXiv 2606.22352.

    Raises:
        ValueError: ``v`` empty or not finite, ``t1`` or ``t0`` NaN, inf or < 0 (value
            conditions raise an ``EquinoxRuntimeError`` under `jax.jit`).
    """
    v = _check_row(v)
    return _prox_row_l1_count(v, check_nonnegative(t1, "t1"), check_nonnegative(t0, "t0"))


def _prox_row_l1_count(v: Array, t1: ArrayLike, t0: ArrayLike) -> Array:
    u = _soft_threshold(v, t1)
    gain = 0.5 * jnp.sum(v**2) - (0.5 * jnp.sum((u - v) ** 2) + t1 * jnp.sum(jnp.abs(u)))
    return jnp.where(gain > t0, u, jnp.zeros_like(u))
