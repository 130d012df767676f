"""Known additive measurement noise X_i = Z_i + eps_i with per-observation scales.

Scales are per observation:

- ``(n, dim)``: noise standard deviations s_i (independent coordinates). Gaussian noise is
  N(0, diag(s_i^2)); Laplace noise has coordinates Laplace(0, b) with scale b = s / sqrt(2), so
  that its standard deviation is s (the convention of the convMMD code).
- ``(n, dim, dim)``: lower-triangular L_i, Gaussian noise L_i u with u ~ N(0, I), covariance
  Sigma_i = L_i L_i^T (Gaussian noise only).
"""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import jax.scipy.linalg as jsl
from jaxtyping import Array, Float, PRNGKeyArray

NOISE_KINDS = ("gaussian", "laplace")


def check_observations(x: Array, name: str = "x") -> Array:
    """(n >= 2, dim) shape and finiteness of observations (finiteness via `eqx.error_if`)."""
    if not isinstance(x, jax.Array | jnp.ndarray) or x.ndim != 2:
        raise ValueError(f"`{name}` must be a 2-D array (n, dim), got shape {jnp.shape(x)}.")
    if x.shape[0] < 2:
        raise ValueError(f"`{name}` needs at least 2 rows, got {x.shape[0]}.")
    return eqx.error_if(x, ~jnp.all(jnp.isfinite(x)), f"`{name}` contains NaN or inf.")


def check_scales(scales: Array, x_shape: tuple[int, ...], kind: str) -> Array:
    """Shape of ``scales`` against observations of shape ``x_shape``; values > 0 and finite."""
    n, d = x_shape
    scales = jnp.asarray(scales)
    if scales.shape == (n, d):
        bad = ~jnp.all(jnp.isfinite(scales) & (scales > 0))
        msg = "`scales` (noise sds) must be finite and > 0."
    elif scales.shape == (n, d, d):
        if kind == "laplace":
            raise ValueError(
                "`scales` of shape (n, dim, dim) (Cholesky factors) are for Gaussian noise only; "
                f"Laplace noise takes (n, dim) sds, got {scales.shape}."
            )
        diag = jnp.diagonal(scales, axis1=-2, axis2=-1)
        bad = ~jnp.all(jnp.isfinite(scales)) | ~jnp.all(diag > 0)
        msg = "`scales` (Cholesky factors) must be finite with a diagonal > 0."
    else:
        raise ValueError(
            f"`scales` must have shape (n, dim) = {(n, d)} (sds) or (n, dim, dim) = {(n, d, d)} "
            f"(lower-triangular factors) for x of shape {(n, d)}, got {scales.shape}."
        )
    return eqx.error_if(scales, bad, msg)


def noise_covariances(scales: Float[Array, "n ..."]) -> Float[Array, "n dim dim"]:
    """Noise covariances Sigma_i: diag(s_i^2) for (n, dim) sds, L_i L_i^T for (n, dim, dim)."""
    if scales.ndim == 2:
        return jax.vmap(jnp.diag)(scales**2)
    chol = jnp.tril(scales)
    return chol @ jnp.swapaxes(chol, -1, -2)


def small_inv_logdet(mat: Float[Array, "... dim dim"]) -> tuple[Array, Array]:
    """Inverse and log-determinant of a batch of SPD matrices.

    Explicit formulas for dim 1 and 2 (batched LAPACK calls on tiny matrices dominate the cost
    of the closed-form losses and denoisers otherwise), Cholesky for larger dim.
    """
    d = mat.shape[-1]
    if d == 1:
        return 1.0 / mat, jnp.log(mat[..., 0, 0])
    if d == 2:
        a, b, c = mat[..., 0, 0], 0.5 * (mat[..., 0, 1] + mat[..., 1, 0]), mat[..., 1, 1]
        det = a * c - b**2
        inv = jnp.stack([jnp.stack([c, -b], -1), jnp.stack([-b, a], -1)], -2) / det[..., None, None]
        return inv, jnp.log(det)
    chol = jnp.linalg.cholesky(mat)
    eye = jnp.broadcast_to(jnp.eye(d, dtype=mat.dtype), mat.shape)
    inv = jax.scipy.linalg.cho_solve((chol, True), eye)
    return inv, 2.0 * jnp.sum(jnp.log(jnp.diagonal(chol, axis1=-2, axis2=-1)), -1)


class NoiseModel(eqx.Module):
    """A known noise family with per-observation scales: ``"gaussian"`` or ``"laplace"``.

    Attributes:
        kind: ``"gaussian"`` (scales (n, dim) sds or (n, dim, dim) Cholesky factors) or
            ``"laplace"`` (scales (n, dim) sds; Laplace scale b = sd / sqrt(2)).
    """

    kind: str = eqx.field(static=True)

    def __init__(self, kind: str):
        if kind not in NOISE_KINDS:
            raise ValueError(f"`kind` must be one of {NOISE_KINDS}, got {kind!r}.")
        self.kind = kind

    def _check(self, scales: Array, ndim: int) -> None:
        if scales.ndim not in (2, 3) or (scales.ndim == 3 and scales.shape[1] != scales.shape[2]):
            raise ValueError(
                f"`scales` must be (n, dim) or (n, dim, dim), got shape {scales.shape}."
            )
        if scales.ndim == 3 and self.kind == "laplace":
            raise ValueError(
                "`scales` of shape (n, dim, dim) are for Gaussian noise only; Laplace noise takes "
                f"(n, dim) sds, got {scales.shape}."
            )

    def sample(self, key: PRNGKeyArray, scales: Float[Array, "n ..."]) -> Float[Array, "n dim"]:
        """One noise draw per row of ``scales`` (row i uses observation i's scale)."""
        self._check(scales, 2)
        n, d = scales.shape[:2]
        if self.kind == "laplace":
            return jr.laplace(key, (n, d), dtype=scales.dtype) * scales / math.sqrt(2.0)
        u = jr.normal(key, (n, d), dtype=scales.dtype)
        if scales.ndim == 2:
            return u * scales
        return jnp.einsum("nij,nj->ni", jnp.tril(scales), u)

    def log_density(
        self, residuals: Float[Array, "n dim"], scales: Float[Array, "n ..."]
    ) -> Float[Array, " n"]:
        """Log f_{eps,i}(r_i) of the residuals r_i = x_i - z_i, one value per row."""
        self._check(scales, 2)
        if residuals.ndim != 2 or residuals.shape != scales.shape[:2]:
            raise ValueError(
                f"`residuals` must have shape {scales.shape[:2]} to match `scales`, got "
                f"{residuals.shape}."
            )
        d = residuals.shape[1]
        if self.kind == "laplace":
            b = scales / math.sqrt(2.0)
            return jnp.sum(-jnp.abs(residuals) / b - jnp.log(2.0 * b), -1)
        if scales.ndim == 2:
            u = residuals / scales
            log_det = jnp.sum(jnp.log(scales), -1)
        else:
            chol = jnp.tril(scales)
            u = jax.vmap(lambda c, r: jsl.solve_triangular(c, r, lower=True))(chol, residuals)
            log_det = jnp.sum(jnp.log(jnp.diagonal(chol, axis1=-2, axis2=-1)), -1)
        return -0.5 * jnp.sum(u**2, -1) - log_det - 0.5 * d * math.log(2.0 * math.pi)

    def charfn(
        self, t: Float[Array, "T dim"], scales: Float[Array, "n ..."]
    ) -> Float[Array, "n T"]:
        r"""Characteristic functions $\varphi_{\varepsilon_i}(t)$ (real: the noise is symmetric).

        Gaussian: $\exp(-\tfrac12 t^\top \Sigma_i t)$; Laplace with sd s:
        $\prod_k 1 / (1 + s_k^2 t_k^2 / 2)$.
        """
        self._check(scales, 2)
        if t.ndim != 2 or t.shape[1] != scales.shape[1]:
            raise ValueError(f"`t` must be (T, {scales.shape[1]}), got shape {t.shape}.")
        if self.kind == "laplace":
            st2 = (scales[:, None, :] * t[None, :, :]) ** 2
            return jnp.prod(1.0 / (1.0 + 0.5 * st2), -1)
        if scales.ndim == 2:
            return jnp.exp(-0.5 * jnp.sum((scales[:, None, :] * t[None, :, :]) ** 2, -1))
        proj = jnp.einsum("nji,tj->nti", jnp.tril(scales), t)  # L_i^T t
        return jnp.exp(-0.5 * jnp.sum(proj**2, -1))
