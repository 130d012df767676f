"""Known additive measurement noise X_i = Z_i + eps_i with per-observation scales.

Scales are per observation:

- ``(n, dim)``: noise standard deviations s_i (independent coordinates). Gaussian noise is
  N(0, diag(s_i^2)); Laplace noise has coordinates Laplace(0, b) with scale b = s / sqrt(2), so
  that its standard deviation is s (the convention of the convMMD code).
- ``(n, dim, dim)``: lower-triangular L_i, Gaussian noise L_i u with u ~ N(0, I), covariance
  Sigma_i = L_i L_i^T (Gaussian noise only).
"""

import abc
import math
from typing import ClassVar

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


def check_scales(
    scales: Array, x_shape: tuple[int, ...], kind: "str | AbstractNoiseModel"
) -> Array:
    """Shape of ``scales`` against observations of shape ``x_shape``; values > 0 and finite.

    ``kind``: the noise model (or its name); (n, dim, dim) factors are accepted only where the
    model's ``factor_scales`` is true (Gaussian noise).
    """
    n, d = x_shape
    scales = jnp.asarray(scales)
    if isinstance(kind, AbstractNoiseModel):
        factors, kind = kind.factor_scales, kind.kind
    else:
        factors = kind != "laplace"
    if scales.shape == (n, d):
        bad = ~jnp.all(jnp.isfinite(scales) & (scales > 0))
        msg = "`scales` (noise sds) must be finite and > 0."
    elif scales.shape == (n, d, d):
        if not factors:
            raise ValueError(
                "`scales` of shape (n, dim, dim) (Cholesky factors) are for Gaussian noise only; "
                f"{kind} noise takes (n, dim) sds, got {scales.shape}."
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


class AbstractNoiseModel(eqx.Module):
    """The noise slot: a known, symmetric noise family with per-observation scales.

    Subclasses give ``sample``, ``log_density`` and ``charfn`` for a batch of per-observation
    scales (``(n, dim)`` sds, or ``(n, dim, dim)`` lower-triangular factors where
    ``factor_scales`` is true), and two class variables: ``kind`` (a name, used in messages)
    and ``factor_scales``. The convMMD losses and `fit_convmmd` need ``sample`` only;
    `npmle_em`, `npmle_posterior_mean` and `posterior_mean_snis` use ``log_density``;
    `deconv_kde` uses ``charfn``.
    """

    kind: eqx.AbstractClassVar[str]
    factor_scales: eqx.AbstractClassVar[bool]

    @abc.abstractmethod
    def sample(self, key: PRNGKeyArray, scales: Float[Array, "n ..."]) -> Float[Array, "n dim"]:
        """One noise draw per row of ``scales`` (row i uses observation i's scale)."""

    @abc.abstractmethod
    def log_density(
        self, residuals: Float[Array, "n dim"], scales: Float[Array, "n ..."]
    ) -> Float[Array, " n"]:
        """Log f_{eps,i}(r_i) of the residuals r_i = x_i - z_i, one value per row."""

    @abc.abstractmethod
    def charfn(
        self, t: Float[Array, "T dim"], scales: Float[Array, "n ..."]
    ) -> Float[Array, "n T"]:
        """Characteristic functions of every row's noise at the frequencies ``t``."""


def _check_noise_scales(noise: AbstractNoiseModel, scales: Array) -> None:
    if scales.ndim not in (2, 3) or (scales.ndim == 3 and scales.shape[1] != scales.shape[2]):
        raise ValueError(f"`scales` must be (n, dim) or (n, dim, dim), got shape {scales.shape}.")
    if scales.ndim == 3 and not noise.factor_scales:
        raise ValueError(
            f"`scales` of shape (n, dim, dim) are for Gaussian noise only; {noise.kind} noise "
            f"takes (n, dim) sds, got {scales.shape}."
        )


def _check_residuals(residuals: Array, scales: Array) -> None:
    if residuals.ndim != 2 or residuals.shape != scales.shape[:2]:
        raise ValueError(
            f"`residuals` must have shape {scales.shape[:2]} to match `scales`, got "
            f"{residuals.shape}."
        )


def _check_frequencies(t: Array, scales: Array) -> None:
    if t.ndim != 2 or t.shape[1] != scales.shape[1]:
        raise ValueError(f"`t` must be (T, {scales.shape[1]}), got shape {t.shape}.")


class GaussianNoise(AbstractNoiseModel):
    """Gaussian noise N(0, diag(s_i^2)) for (n, dim) sds, N(0, L_i L_i^T) for factors L_i."""

    kind: ClassVar[str] = "gaussian"
    factor_scales: ClassVar[bool] = True

    def sample(self, key, scales):
        _check_noise_scales(self, scales)
        n, d = scales.shape[:2]
        u = jr.normal(key, (n, d), dtype=scales.dtype)
        if scales.ndim == 2:
            return u * scales
        return jnp.einsum("nij,nj->ni", jnp.tril(scales), u)

    def log_density(self, residuals, scales):
        _check_noise_scales(self, scales)
        _check_residuals(residuals, scales)
        d = residuals.shape[1]
        if scales.ndim == 2:
            u = residuals / scales
            log_det = jnp.sum(jnp.log(scales), -1)
        else:
            chol = jnp.tril(scales)
            u = jax.vmap(lambda c, r: jsl.solve_triangular(c, r, lower=True))(chol, residuals)
            log_det = jnp.sum(jnp.log(jnp.diagonal(chol, axis1=-2, axis2=-1)), -1)
        return -0.5 * jnp.sum(u**2, -1) - log_det - 0.5 * d * math.log(2.0 * math.pi)

    def charfn(self, t, scales):
        r"""$\exp(-\tfrac12 t^\top \Sigma_i t)$ (real: the noise is symmetric)."""
        _check_noise_scales(self, scales)
        _check_frequencies(t, scales)
        if scales.ndim == 2:
            return jnp.exp(-0.5 * jnp.sum((scales[:, None, :] * t[None, :, :]) ** 2, -1))
        proj = jnp.einsum("nji,tj->nti", jnp.tril(scales), t)  # L_i^T t
        return jnp.exp(-0.5 * jnp.sum(proj**2, -1))


class LaplaceNoise(AbstractNoiseModel):
    """Independent Laplace(0, b) coordinates with b = sd / sqrt(2) (sd s per coordinate)."""

    kind: ClassVar[str] = "laplace"
    factor_scales: ClassVar[bool] = False

    def sample(self, key, scales):
        _check_noise_scales(self, scales)
        n, d = scales.shape[:2]
        return jr.laplace(key, (n, d), dtype=scales.dtype) * scales / math.sqrt(2.0)

    def log_density(self, residuals, scales):
        _check_noise_scales(self, scales)
        _check_residuals(residuals, scales)
        b = scales / math.sqrt(2.0)
        return jnp.sum(-jnp.abs(residuals) / b - jnp.log(2.0 * b), -1)

    def charfn(self, t, scales):
        r"""$\prod_k 1 / (1 + s_k^2 t_k^2 / 2)$."""
        _check_noise_scales(self, scales)
        _check_frequencies(t, scales)
        st2 = (scales[:, None, :] * t[None, :, :]) ** 2
        return jnp.prod(1.0 / (1.0 + 0.5 * st2), -1)


_NOISES = {"gaussian": GaussianNoise, "laplace": LaplaceNoise}


def NoiseModel(kind: str) -> AbstractNoiseModel:  # noqa: N802 (the former class name)
    """The built-in noise family named ``kind``: `GaussianNoise` or `LaplaceNoise`.

    A convenience kept from when one class covered both; pass your own `AbstractNoiseModel`
    subclass for any other family.
    """
    if kind not in NOISE_KINDS:
        raise ValueError(f"`kind` must be one of {NOISE_KINDS}, got {kind!r}.")
    return _NOISES[kind]()
