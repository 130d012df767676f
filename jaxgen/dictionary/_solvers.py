"""The jitted building blocks of PADL: objective, monotone FISTA codes, dictionary update, debias.

Inactive atoms are handled by boolean masks (never by shape changes), so every function compiles
once per problem size.
"""

import functools as ft

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Bool, Float

from ..core.checks import check_finite, check_nonnegative, check_positive_int
from ._prox import _prox_row_l1_count, _prox_row_l1_linf

PENALTIES = ("count", "linf")


def _check_penalty(penalty: str) -> None:
    if penalty not in PENALTIES:
        raise ValueError(f"`penalty` must be one of {PENALTIES}, got {penalty!r}.")


def _row_penalty(R: Float[Array, "K N"], lam_row: Float[ArrayLike, ""], penalty: str) -> Array:
    if penalty == "count":
        return lam_row * jnp.sum(jnp.any(R != 0, axis=1))
    return lam_row * jnp.sum(jnp.max(jnp.abs(R), axis=1))


def padl_objective(
    X: Float[Array, "d N"],
    D: Float[Array, "d K"],
    R: Float[Array, "K N"],
    lam1: Float[ArrayLike, ""],
    lam_row: Float[ArrayLike, ""],
    *,
    penalty: str = "count",
) -> Float[Array, ""]:
    r"""The PADL objective.

    - ``penalty="count"`` (P-0): :math:`\tfrac12\|X - DR\|_F^2 + \lambda_1\|R\|_1 + \lambda_0|A(R)|`
      with :math:`A(R) = \{k : r_k \ne 0\}` the atoms activated anywhere (``lam_row`` is
      :math:`\lambda_0`).
    - ``penalty="linf"`` (P-inf, the convex surrogate): :math:`\tfrac12\|X - DR\|_F^2 +
      \lambda_1\|R\|_1 + \lambda_2\sum_k\|r_k\|_\infty` (``lam_row`` is :math:`\lambda_2`).

    Args:
        X: data, columns are samples, shape (d, N).
        D: dictionary, shape (d, K).
        R: codes, one row per atom, shape (K, N).
        lam1: the l1 weight >= 0.
        lam_row: the row (activation) weight >= 0.
        penalty: ``"count"`` or ``"linf"``.

    Returns:
        The scalar objective.

    References:
        Zhao, Tang, Li. On the sparsity-storage-accuracy tradeoff in parsimoniously activated
        dictionary learning. arXiv 2606.22352.
    """
    _check_penalty(penalty)
    return _objective_parts(X, D, R, lam1, lam_row, penalty=penalty)[0]


def lipschitz_constant(D: Float[Array, "d K"], active: Bool[Array, " K"]) -> Float[Array, ""]:
    """``||D_A||_2^2``, the Lipschitz constant of the code gradient (exact, from the d x d Gram).

    Raises:
        ValueError: ``D`` empty or not finite (an ``EquinoxRuntimeError`` under `jax.jit`).
    """
    D = jnp.asarray(D)
    if D.ndim != 2 or min(D.shape) < 1:
        raise ValueError(f"`D` must have shape (d, K) with d, K >= 1, got {D.shape}.")
    return _lipschitz_constant(check_finite(D, "D"), active)


def _lipschitz_constant(D: Array, active: Array) -> Array:
    Dm = jnp.where(active[None, :], D, 0)
    L = jnp.linalg.eigvalsh(Dm @ Dm.T)[-1]
    return jnp.where(L > 0, L, jnp.ones_like(L))  # empty dictionary: any step, the codes stay 0


def fista_codes(
    X: Float[Array, "d N"],
    D: Float[Array, "d K"],
    R0: Float[Array, "K N"],
    lam1: Float[ArrayLike, ""],
    lam_row: Float[ArrayLike, ""],
    active: Bool[Array, " K"],
    *,
    penalty: str = "count",
    num_steps: int = 20,
) -> Float[Array, "K N"]:
    r"""Monotone FISTA on the codes with the dictionary fixed (``lam_row = 0`` is the lasso).

    Each step takes :math:`z = \operatorname{prox}_{F_{\text{row}}/L}(y - \nabla/L)` with the
    gradient :math:`D^\top(Dy - X)` and :math:`L = \|D_A\|_2^2`, then keeps the previous iterate
    when the objective would increase (Beck and Teboulle's MFISTA), so the objective never rises,
    also for the non-convex count penalty. Rows of inactive atoms stay 0.

    Args:
        X: data (d, N).
        D: dictionary (d, K).
        R0: warm start (K, N).
        lam1: l1 weight.
        lam_row: row weight (lambda_0 for ``"count"``, lambda_2 for ``"linf"``).
        active: mask of atoms allowed to be used, (K,).
        penalty: ``"count"`` or ``"linf"``.
        num_steps: number of FISTA iterations (a ``lax.scan``).

    Returns:
        The codes (K, N); their objective is <= that of ``R0`` (restricted to ``active``).

    References:
        Beck, Teboulle. Fast gradient-based algorithms for constrained total variation image
        denoising and deblurring problems (MFISTA). IEEE TIP 2009.

    Raises:
        ValueError: ``X``, ``D`` or ``R0`` not finite, ``lam1`` or ``lam_row`` NaN, inf or < 0
            (an ``EquinoxRuntimeError`` under `jax.jit`).
    """
    num_steps = check_positive_int(num_steps, "num_steps")
    X, D, R0 = check_finite(X, "X"), check_finite(D, "D"), check_finite(R0, "R0")
    lam1, lam_row = check_nonnegative(lam1, "lam1"), check_nonnegative(lam_row, "lam_row")
    # strongly typed scalars: python floats and arrays then share one compiled solver
    lam1 = jnp.asarray(lam1, X.dtype)
    lam_row = jnp.asarray(lam_row, X.dtype)
    return _fista(X, D, R0, lam1, lam_row, active, penalty=penalty, num_steps=num_steps)[0]


@ft.partial(jax.jit, static_argnames=("penalty", "num_steps"))
def _fista(X, D, R0, lam1, lam_row, active, *, penalty, num_steps):
    """Monotone FISTA; returns the codes and the objective after each step, shape (num_steps,)."""
    _check_penalty(penalty)
    dtype = X.dtype
    lam1 = jnp.asarray(lam1, dtype)
    lam_row = jnp.asarray(lam_row, dtype)
    Dm = jnp.where(active[None, :], D, 0)
    step = 1 / _lipschitz_constant(D, active)
    row_prox = _prox_row_l1_count if penalty == "count" else _prox_row_l1_linf
    batched_prox = jax.vmap(row_prox, in_axes=(0, None, None))

    def prox(V):
        return jnp.where(active[:, None], batched_prox(V, step * lam1, step * lam_row), 0)

    def objective(R, DR):
        return (
            0.5 * jnp.sum((X - DR) ** 2)
            + lam1 * jnp.sum(jnp.abs(R))
            + _row_penalty(R, lam_row, penalty)
        )

    x0 = jnp.where(active[:, None], R0, 0)
    Dx0 = Dm @ x0

    # The products D x and D y are carried along (D y is a combination of D x and D z), so an
    # iteration costs two (d, K) x (K, N) products: D z and the gradient D^T (D y - X).
    def body(carry, _):
        x, Dx, y, Dy, t, fx = carry
        z = prox(y - step * (Dm.T @ (Dy - X)))
        Dz = Dm @ z
        fz = objective(z, Dz)
        better = fz <= fx
        x_new = jnp.where(better, z, x)
        Dx_new = jnp.where(better, Dz, Dx)
        t_new = (1 + jnp.sqrt(1 + 4 * t**2)) / 2
        a, b = t / t_new, (t - 1) / t_new
        y_new = x_new + a * (z - x_new) + b * (x_new - x)
        Dy_new = Dx_new + a * (Dz - Dx_new) + b * (Dx_new - Dx)
        f_new = jnp.where(better, fz, fx)
        return (x_new, Dx_new, y_new, Dy_new, t_new, f_new), f_new

    init = (x0, Dx0, x0, Dx0, jnp.ones((), dtype), objective(x0, Dx0))
    (x, *_), trace = jax.lax.scan(body, init, None, length=num_steps)
    return x, trace


@jax.jit
def dict_update(
    X: Float[Array, "d N"],
    D: Float[Array, "d K"],
    R: Float[Array, "K N"],
    active: Bool[Array, " K"],
) -> Float[Array, "d K"]:
    r"""One sweep of block-coordinate atom updates with the codes fixed.

    With :math:`A = RR^\top` and :math:`B = XR^\top`, each active atom with :math:`A_{kk} > 0`
    becomes :math:`P_{\|\cdot\|\le1}(d_k + (B_k - DA_k)/A_{kk})`, the exact minimiser of the
    objective over the unit ball in that block, so the objective never rises. Inactive atoms are
    neither updated nor re-initialised.

    References:
        Mairal, Bach, Ponce, Sapiro. Online learning for matrix factorization and sparse coding.
        JMLR 2010, Algorithm 2.
    """
    return _dict_sweep(D, R @ R.T, X @ R.T, active)


def _dict_sweep(D, A, B, active):
    """The block-coordinate sweep of `dict_update` from the statistics A = R R^T, B = X R^T."""

    def body(k, D):
        akk = A[k, k]
        use = active[k] & (akk > 0)
        u = D[:, k] + (B[:, k] - D @ A[:, k]) / jnp.where(use, akk, 1)
        u = u / jnp.maximum(1, jnp.linalg.norm(u))
        return D.at[:, k].set(jnp.where(use, u, D[:, k]))

    return jax.lax.fori_loop(0, D.shape[1], body, D)


def _fit_from_stats(D, A, B):
    """``1/2 ||X - D R||_F^2 - 1/2 ||X||_F^2`` from A = R R^T and B = X R^T."""
    return 0.5 * jnp.sum((D.T @ D) * A) - jnp.sum(D * B)


def _r_step(X, D, R, lam1, lam_row, active, *, penalty, num_steps, deactivate):
    # `deactivate` is traced (not static): one compiled R-step serves warm-up and main loop
    return _r_step_jit(
        X,
        D,
        R,
        lam1,
        lam_row,
        active,
        jnp.asarray(deactivate),
        penalty=penalty,
        num_steps=num_steps,
    )


@ft.partial(jax.jit, static_argnames=("penalty", "num_steps"))
def _r_step_jit(X, D, R, lam1, lam_row, active, deactivate, *, penalty, num_steps):
    R = _fista(X, D, R, lam1, lam_row, active, penalty=penalty, num_steps=num_steps)[0]
    # a row the penalty zeroed is dropped for good (never re-initialised)
    active = jnp.where(deactivate, active & jnp.any(R != 0, axis=1), active)
    return R, active


@ft.partial(jax.jit, static_argnames=("penalty",))
def _objective_parts(X, D, R, lam1, lam_row, *, penalty):
    rss = jnp.sum((X - D @ R) ** 2)
    objective = 0.5 * rss + lam1 * jnp.sum(jnp.abs(R)) + _row_penalty(R, lam_row, penalty)
    return objective, rss, jnp.sum(R != 0), jnp.sum(jnp.any(R != 0, axis=1))


@ft.partial(jax.jit, static_argnames=("num_steps",))
def _refit_without(XS, D, RS, lam1, active, *, num_steps):
    """Lasso re-fit of a column subset on ``active``; returns the codes and both costs."""

    def cost(R):
        return 0.5 * jnp.sum((XS - D @ R) ** 2) + lam1 * jnp.sum(jnp.abs(R))

    old = cost(RS)
    new_RS = _fista(XS, D, RS, lam1, 0.0, active, penalty="count", num_steps=num_steps)[0]
    return new_RS, cost(new_RS) - old


@ft.partial(jax.jit, static_argnames=("num_steps",))
def _refit_realign(XS, D, RS, lam1, active, trial, A, B, *, num_steps):
    """Removal test of one atom with the dictionary re-aligned (see `prune_refit`).

    ``XS``, ``RS``: the (zero-padded) columns that use the atom; ``trial`` = ``active`` without
    it; ``A = R R^T`` and ``B = X R^T`` over all N columns. The columns are re-coded on ``trial``
    (lasso), the statistics updated by the change of those columns only, and each side gets one
    exact dictionary sweep: ``delta`` = F(remove, re-code, sweep) - F(keep, sweep) without the
    lambda_0 terms, so the removal lowers F_0 below even the kept-and-swept value iff
    ``delta < lambda_0``. Returns the new codes of the columns, the swept dictionary, A, B, delta.
    """
    new_RS = _fista(XS, D, RS, lam1, 0.0, trial, penalty="count", num_steps=num_steps)[0]
    A_new = A - RS @ RS.T + new_RS @ new_RS.T
    B_new = B - XS @ RS.T + XS @ new_RS.T
    D_keep = _dict_sweep(D, A, B, active)
    D_rm = _dict_sweep(D, A_new, B_new, trial)
    delta = (
        _fit_from_stats(D_rm, A_new, B_new)
        - _fit_from_stats(D_keep, A, B)
        + lam1 * (jnp.sum(jnp.abs(new_RS)) - jnp.sum(jnp.abs(RS)))
    )
    return new_RS, D_rm, A_new, B_new, delta


@ft.partial(jax.jit, static_argnames=("max_support",))
def _debias(X, D, R, *, max_support):
    def one(x, r):
        (idx,) = jnp.nonzero(r != 0, size=max_support, fill_value=0)
        valid = jnp.arange(max_support) < jnp.sum(r != 0)
        Ds = jnp.where(valid[None, :], D[:, idx], 0)
        coef = jnp.linalg.lstsq(Ds, x)[0]
        coef = jnp.where(valid, coef, 0)
        return jnp.zeros_like(r).at[idx].add(coef)

    return jax.vmap(one, in_axes=(1, 1), out_axes=1)(X, R)


def _error_if_nonfinite(x: Array, name: str) -> Array:
    return eqx.error_if(x, ~jnp.all(jnp.isfinite(x)), f"`{name}` contains NaN or inf.")
