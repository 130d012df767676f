"""Path log-likelihoods of discretely observed diffusions: exact, Euler, learned surrogate."""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from jaxgen.core import gaussian_logpdf_chol

from ._flow import TransitionFlow
from ._models import AbstractDiffusionModel, exact_log_transition


def _check_path(
    model: AbstractDiffusionModel, xs: ArrayLike, delta: ArrayLike
) -> tuple[Array, Array]:
    xs = jnp.asarray(xs)
    if xs.ndim != 2 or xs.shape[1] != model.dim or xs.shape[0] < 2:
        raise ValueError(
            f"`xs` must be a path of shape (n + 1, {model.dim}) with n >= 1, got {xs.shape}."
        )
    delta = jnp.asarray(delta, dtype=xs.dtype)
    if delta.ndim != 0:
        raise ValueError(f"`delta` must be a scalar time step, got shape {delta.shape}.")
    delta = eqx.error_if(delta, ~(delta > 0), "`delta` must be > 0 (a positive time step).")
    return model.check_state(xs, "xs"), delta


def exact_path_loglik(
    model: AbstractDiffusionModel,
    xs: Float[Array, "n dim"],
    lam: Float[Array, " p"],
    delta: Float[ArrayLike, ""],
) -> Float[Array, ""]:
    """sum_k log p_lam(delta, x_{k+1} | x_k) with the exact transition (the model's
    ``log_transition``: OU, CIR or a user model).
    """
    xs, delta = _check_path(model, xs, delta)
    lam = model.check_params(lam)
    return jnp.sum(
        jax.vmap(lambda a, b: exact_log_transition(model, delta, b, a, lam))(xs[:-1], xs[1:])
    )


def euler_path_loglik(
    model: AbstractDiffusionModel,
    xs: Float[Array, "n dim"],
    lam: Float[Array, " p"],
    delta: Float[ArrayLike, ""],
) -> Float[Array, ""]:
    r"""Euler pseudo-likelihood: x_{k+1} | x_k ~ N(x_k + b(x_k) delta, a(x_k) delta).

    Biased for delta not small: for OU/CIR the Euler estimator of kappa targets
    (1 - e^{-kappa delta}) / delta.
    """
    xs, delta = _check_path(model, xs, delta)
    lam = model.check_params(lam)

    def one(x: Array, y: Array) -> Array:
        chol = jnp.linalg.cholesky(model.diffusion(x, lam) * delta)
        return gaussian_logpdf_chol(y - x - model.drift(x, lam) * delta, jnp.zeros_like(x), chol)

    return jnp.sum(jax.vmap(one)(xs[:-1], xs[1:]))


def surrogate_path_loglik(
    flow: TransitionFlow,
    xs: Float[Array, "n dim"],
    lam: Float[Array, " p"],
    delta: Float[ArrayLike, ""],
) -> Float[Array, ""]:
    """sum_k l_theta(delta, x_{k+1} | x_k, lam) with a trained `TransitionFlow` (theta at delta).

    Only meaningful inside the flow's training box and at the delta it was trained for.
    """
    xs, delta = _check_path(flow.model, xs, delta)
    lam = flow.model.check_params(lam)
    return jnp.sum(jax.vmap(lambda a, b: flow.log_density(delta, b, a, lam))(xs[:-1], xs[1:]))
