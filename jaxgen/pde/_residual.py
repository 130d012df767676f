"""Fokker-Planck residual in log-density form (pure functions, autodiff in space and time)."""

from collections.abc import Callable

import jax
import jax.numpy as jnp

from ..core.checks import check_finite
from ..core.types import Array, Matrix, Scalar, ScalarLike, Vector

LogDensityFn = Callable[[Scalar, Vector], Scalar]
DriftFn = Callable[[Vector], Vector]
DiffusionFn = Callable[[Vector], Matrix]


def _check_x(x: Array, drift: DriftFn, diffusion: DiffusionFn) -> None:
    if x.ndim != 1:
        raise ValueError(f"`x` must be one state of shape (dim,), got shape {x.shape}.")
    b = jax.eval_shape(drift, x)
    a = jax.eval_shape(diffusion, x)
    if b.shape != x.shape:
        raise ValueError(f"`drift(x)` must have the shape of x {x.shape}, got {b.shape}.")
    if a.shape != x.shape * 2:
        raise ValueError(
            f"`diffusion(x)` must be the matrix a = sigma sigma^T of shape "
            f"{x.shape * 2}, got {a.shape}."
        )


def fp_log_rhs(
    logp_fn: LogDensityFn, t: ScalarLike, x: Vector, drift: DriftFn, diffusion: DiffusionFn
) -> Scalar:
    r"""Right-hand side F[l] of the Fokker-Planck equation written for l = log p.

    For dX = b(X) dt + sigma(X) dW with a = sigma sigma^T, p solves
    d_t p = -sum_i d_i(b_i p) + 1/2 sum_ij d_i d_j(a_ij p); dividing by p gives d_t l = F[l] with

        F[l] = -div b - b.g + 1/2 sum_ij d_i d_j a_ij + (div a).g + 1/2 tr(a H) + 1/2 g.a g,

    g = grad_x l, H = hess_x l, (div a)_j = sum_i d_i a_ij. All derivatives are by autodiff.

    Args:
        logp_fn: ``(t, x) -> log p(t, x)`` for one state.
        t: time (scalar).
        x: one state, shape ``(dim,)``.
        drift: ``x -> b(x)``, shape ``(dim,)`` (parameters closed over, time-homogeneous).
        diffusion: ``x -> a(x) = sigma sigma^T``, shape ``(dim, dim)``.

    Returns:
        ``F[l](t, x)``, a scalar.

    References:
        Saporiti and Nobile, Neural Galerkin normalizing flows for Bayesian inference of
        diffusions with inaccessible boundaries, arXiv 2606.04324 (2026); Risken, The
        Fokker-Planck Equation (1989).
    """
    x = jnp.asarray(x)
    _check_x(x, drift, diffusion)
    t = check_finite(jnp.asarray(t, dtype=x.dtype), "t")
    return _fp_log_rhs(logp_fn, t, x, drift, diffusion)


def _fp_log_rhs(
    logp_fn: LogDensityFn, t: Array, x: Array, drift: DriftFn, diffusion: DiffusionFn
) -> Array:
    # The body of `fp_log_rhs` (the Galerkin losses call it at every collocation point).

    def ell(y: Array) -> Array:
        return logp_fn(t, y)

    g = jax.grad(ell)(x)
    hess = jax.hessian(ell)(x)

    def div_a(y: Array) -> Array:
        jac = jax.jacfwd(diffusion)(y)  # [i, j, k] = d_k a_ij
        return jnp.einsum("iji->j", jac)

    div_b = jnp.trace(jax.jacfwd(drift)(x))
    dda = jnp.trace(jax.jacfwd(div_a)(x))  # sum_ij d_i d_j a_ij
    b = drift(x)
    a = diffusion(x)
    return -div_b - b @ g + 0.5 * dda + div_a(x) @ g + 0.5 * jnp.sum(a * hess) + 0.5 * g @ (a @ g)


def fp_log_residual(
    logp_fn: LogDensityFn, t: ScalarLike, x: Vector, drift: DriftFn, diffusion: DiffusionFn
) -> Scalar:
    r"""Fokker-Planck residual R = d_t l - F[l] of a log-density l(t, x) at one point.

    Zero wherever ``logp_fn`` is the log transition density of dX = b dt + sigma dW; the
    p-form residual is p R (the log form is scale-free and does not underflow). See
    `fp_log_rhs` for F. Vmap over ``(t, x)`` for collocation points.

    Args:
        logp_fn: ``(t, x) -> log p(t, x)``.
        t: time (scalar).
        x: one state, shape ``(dim,)``.
        drift: ``x -> b(x)``, shape ``(dim,)``.
        diffusion: ``x -> a(x)``, shape ``(dim, dim)``.

    Returns:
        R(t, x), a scalar.

    References:
        Saporiti and Nobile, arXiv 2606.04324 (2026).
    """
    x = jnp.asarray(x)
    _check_x(x, drift, diffusion)
    t = check_finite(jnp.asarray(t, dtype=x.dtype), "t")
    return _fp_log_residual(logp_fn, t, x, drift, diffusion)


def _fp_log_residual(
    logp_fn: LogDensityFn, t: ScalarLike, x: Array, drift: DriftFn, diffusion: DiffusionFn
) -> Array:
    # The body of `fp_log_residual` (the Galerkin losses call it at every collocation point).
    x = jnp.asarray(x)
    t = jnp.asarray(t, dtype=x.dtype)
    dl_dt = jax.grad(lambda s: logp_fn(s, x))(t)
    return dl_dt - _fp_log_rhs(logp_fn, t, x, drift, diffusion)
