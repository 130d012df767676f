"""Metrics of context-dependent autoencoders: reconstruction, idempotency, geometry.

Every function takes batches (``X (n, N)``, ``C (n, p)``) and vmaps a one-sample model inside.
Each is one compiled program (`eqx.filter_jit`: the model's arrays are traced, Python numbers
such as ``n_iter`` and ``delta`` are static), so evaluating a metric eagerly does not dispatch
the model's operations one by one.
"""

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from ._cae import AbstractAutoencoder


def _check_batch(X: Array, C: Array, names: tuple[str, str] = ("X", "C")) -> tuple[Array, Array]:
    """Shapes ``(n, N)``, ``(n, p)`` with ``n >= 1`` (trace time)."""
    X, C = jnp.asarray(X), jnp.asarray(C)
    a, b = names
    if X.ndim != 2 or C.ndim != 2 or X.shape[0] != C.shape[0] or X.shape[0] < 1:
        raise ValueError(
            f"`{a}` (n, N) and `{b}` (n, p) with n >= 1 expected, got {X.shape} and {C.shape}."
        )
    return X, C


def _finite_inputs(out: Array, **inputs: Array) -> Array:
    """``out`` carrying the check that every input is finite.

    Attached to the result rather than the inputs: a model that ignores its context would drop
    a check attached to ``C`` (and hide its NaN).
    """
    for name, value in inputs.items():
        out = eqx.error_if(
            out, ~jnp.all(jnp.isfinite(value)), f"`{name}` must be finite (no NaN/inf)."
        )
    return out


@eqx.filter_jit
def recon_rel_mse(project: Callable, X: Array, C: Array) -> Float[Array, ""]:
    """``mean ||P_c(x) - x||^2 / mean ||x - mean(X)||^2`` over the given points."""
    X, C = _check_batch(X, C)
    proj = jax.vmap(project)(X, C)
    centred = X - jnp.mean(X, axis=0, keepdims=True)
    out = jnp.mean(jnp.sum((proj - X) ** 2, -1)) / jnp.mean(jnp.sum(centred**2, -1))
    return _finite_inputs(out, X=X, C=C)


@eqx.filter_jit
def idempotency_error(project: Callable, X: Array, C: Array, n_iter: int = 1) -> Float[Array, ""]:
    """``mean ||P_c^(1+n_iter)(x) - P_c(x)|| / mean ||P_c(x)||`` (0 for a projection).

    Evaluate it off the manifold too (e.g. ``X + noise``): a model can look idempotent on data
    it reconstructs well without being a projection.
    """
    if not isinstance(n_iter, int) or n_iter < 1:
        raise ValueError(f"`n_iter` must be an int >= 1, got {n_iter!r}.")
    X, C = _check_batch(X, C)

    def one(x: Array, c: Array) -> tuple[Array, Array]:
        p = project(x, c)
        q = p
        for _ in range(n_iter):
            q = project(q, c)
        return jnp.linalg.norm(q - p), jnp.linalg.norm(p)

    num, den = jax.vmap(one)(X, C)
    return _finite_inputs(jnp.mean(num) / jnp.mean(den), X=X, C=C)


@eqx.filter_jit
def left_inverse_error(model: AbstractAutoencoder, X: Array, C: Array) -> Float[Array, ""]:
    """``mean ||E_c(D_c(z)) - z|| / mean ||z||`` at the latents ``z = E_c(x)`` of the data."""
    X, C = _check_batch(X, C)
    z = jax.vmap(model.encode)(X, C)
    back = jax.vmap(lambda zz, c: model.encode(model.decode(zz, c), c))(z, C)
    out = jnp.mean(jnp.linalg.norm(back - z, axis=-1)) / jnp.mean(jnp.linalg.norm(z, axis=-1))
    return _finite_inputs(out, X=X, C=C)


@eqx.filter_jit
def decoder_condition(model: AbstractAutoencoder, X: Array, C: Array) -> Float[Array, ""]:
    """Median over the data of ``cond(J_D^T J_D)``, the decoder's metric distortion."""
    X, C = _check_batch(X, C)
    z = jax.vmap(model.encode)(X, C)

    def cond(zz: Array, c: Array) -> Array:
        J = jax.jacfwd(lambda u: model.decode(u, c))(zz)
        sv = jnp.linalg.svd(J, compute_uv=False)
        return (sv[0] / sv[-1]) ** 2

    return _finite_inputs(jnp.median(jax.vmap(cond)(z, C)), X=X, C=C)


@eqx.filter_jit
def context_lipschitz(
    model: AbstractAutoencoder, Z: Array, C: Array, delta: float
) -> Float[Array, ""]:
    """``mean ||D_{c+delta}(z) - D_c(z)|| / delta`` (stable in delta => smooth in c)."""
    Z, C = _check_batch(Z, C, ("Z", "C"))
    if not delta > 0:
        raise ValueError(f"`delta` must be > 0, got {delta}.")
    diff = jax.vmap(lambda z, c: model.decode(z, c + delta) - model.decode(z, c))(Z, C)
    return _finite_inputs(jnp.mean(jnp.linalg.norm(diff, axis=-1)) / delta, Z=Z, C=C)


@eqx.filter_jit
def procrustes_consistency(Z_a: Array, Z_b: Array) -> Float[Array, ""]:
    """Procrustes disparity between two latent clouds of the same points (0 = congruent).

    Both are centred and scaled to unit Frobenius norm; the disparity is
    ``1 - (sum of singular values of Z_a^T Z_b)^2`` (as `scipy.spatial.procrustes`).
    """
    Z_a, Z_b = jnp.asarray(Z_a), jnp.asarray(Z_b)
    if Z_a.shape != Z_b.shape or Z_a.ndim != 2:
        raise ValueError(f"latent clouds must share a shape (n, r), got {Z_a.shape}, {Z_b.shape}.")

    def standard(Z: Array) -> Array:
        Z = Z - jnp.mean(Z, axis=0, keepdims=True)
        return Z / jnp.linalg.norm(Z)

    A, B = standard(Z_a), standard(Z_b)
    return 1.0 - jnp.sum(jnp.linalg.svd(A.T @ B, compute_uv=False)) ** 2
