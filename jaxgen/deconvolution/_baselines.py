"""Classical baselines in JAX: the NPMLE (Kiefer-Wolfowitz) by EM, and deconvolution KDE."""

import math
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from ..core import RESULTS, iterate
from ..core.checks import check_module, check_positive_int
from ._noise import AbstractNoiseModel, check_observations, check_scales


class NPMLEResult(NamedTuple):
    """What `npmle_em` returns.

    Attributes:
        weights: (M,) prior masses on the grid.
        log_likelihood: mean log-likelihood (1/n) sum_i log sum_m pi_m L_im.
        kkt_gap: max_m (1/n) sum_i L_im / sum_m' pi_m' L_im' - 1 (>= 0; 0 at the NPMLE).
        num_steps: EM iterations taken.
        result: `jaxgen.core.RESULTS` flag.
    """

    weights: Float[Array, " M"]
    log_likelihood: Float[Array, ""]
    kkt_gap: Float[Array, ""]
    num_steps: Int[Array, ""]
    result: RESULTS


def _check_noise(noise: AbstractNoiseModel) -> AbstractNoiseModel:
    return check_module(noise, AbstractNoiseModel, "noise")


def _check_grid(grid: Array, dim: int) -> Array:
    if grid.ndim != 2 or grid.shape[1] != dim or grid.shape[0] < 1:
        raise ValueError(f"`grid` must be (M >= 1, {dim}), got shape {grid.shape}.")
    return eqx.error_if(grid, ~jnp.all(jnp.isfinite(grid)), "`grid` contains NaN or inf.")


def _log_lik_matrix(x: Array, scales: Array, grid: Array, noise: AbstractNoiseModel) -> Array:
    """Log L_im = log f_{eps,i}(x_i - g_m), shape (n, M)."""
    return jax.vmap(lambda g: noise.log_density(x - g[None], scales), out_axes=1)(grid)


def npmle_em(
    x: Float[Array, "n dim"],
    scales: Float[Array, "n ..."],
    grid: Float[Array, "M dim"],
    *,
    noise: AbstractNoiseModel,
    max_steps: int = 2000,
    tol: float = 1e-6,
    throw: bool = True,
) -> NPMLEResult:
    r"""Grid NPMLE of the prior by EM in log space (Kiefer-Wolfowitz g-modeling).

    With $L_{im} = f_{\varepsilon,i}(x_i - g_m)$, each EM step is
    $\pi_m \leftarrow \pi_m \cdot \frac1n\sum_i L_{im} / \sum_{m'}\pi_{m'}L_{im'}$, computed
    with log-sum-exp (no underflow however far an observation is from the grid). The
    iteration (on `jaxgen.core.iterate`) stops when the KKT gap
    $\max_m \frac1n\sum_i L_{im}/\sum_{m'}\pi_{m'}L_{im'} - 1 \le$ ``tol``: the log-likelihood
    is concave in pi and this gap bounds its sub-optimality.

    Args:
        x: observations (n >= 2, dim).
        scales: per-observation noise scales.
        grid: (M, dim) support points.
        noise: the known `AbstractNoiseModel` (e.g. `NoiseModel("gaussian")`).
        max_steps: most EM iterations.
        tol: KKT-gap tolerance.
        throw: raise if ``max_steps`` is reached (else read ``result``).

    Returns:
        `NPMLEResult`.

    References:
        Kiefer & Wolfowitz (1956); Jiang & Zhang, Ann. Statist. 37 (2009).
    """
    noise = _check_noise(noise)
    if not tol > 0:
        raise ValueError(f"`tol` must be > 0, got {tol}.")
    return _npmle_em(x, scales, grid, jnp.asarray(tol), noise, max_steps, throw)


@eqx.filter_jit
def _npmle_em(
    x: Array,
    scales: Array,
    grid: Array,
    tol: Array,
    noise: AbstractNoiseModel,
    max_steps: int,
    throw: bool,
) -> NPMLEResult:
    """`npmle_em` after its type checks: one compiled program per shape and ``max_steps``."""
    x = check_observations(x)
    scales = check_scales(scales, x.shape, noise).astype(x.dtype)
    grid = _check_grid(jnp.asarray(grid, x.dtype), x.shape[1])
    tol = tol.astype(x.dtype)
    log_l = _log_lik_matrix(x, scales, grid, noise)

    def ratio(log_pi: Array) -> tuple[Array, Array]:
        lse = jax.nn.logsumexp(log_l + log_pi[None], axis=1)
        log_ratio = jax.nn.logsumexp(log_l - lse[:, None], axis=0) - math.log(x.shape[0])
        return log_ratio, jnp.mean(lse)

    def step(state: tuple[Array, Array, Array]) -> tuple[Array, Array, Array]:
        log_pi, log_ratio, _ = state
        new = log_pi + log_ratio
        new = new - jax.nn.logsumexp(new)
        return (new, *ratio(new))

    m = grid.shape[0]
    log_pi0 = jnp.full((m,), -math.log(m), x.dtype)
    out = iterate(
        step,
        (log_pi0, *ratio(log_pi0)),
        converged_fn=lambda s: jnp.exp(jnp.max(s[1])) - 1.0 <= tol,
        max_steps=max_steps,
        throw=throw,
    )
    log_pi, log_ratio, ll = out.state
    return NPMLEResult(
        jnp.exp(log_pi), ll, jnp.exp(jnp.max(log_ratio)) - 1.0, out.num_steps, out.result
    )


def npmle_posterior_mean(
    x: Float[Array, "n dim"],
    scales: Float[Array, "n ..."],
    grid: Float[Array, "M dim"],
    weights: Float[Array, " M"],
    *,
    noise: AbstractNoiseModel,
    batch_size: int | None = 512,
) -> Float[Array, "n dim"]:
    r"""Posterior mean under the discrete prior $\sum_m \pi_m \delta_{g_m}$.

    $\hat z_i = \sum_m g_m \pi_m L_{im} / \sum_m \pi_m L_{im}$ in log space. With a fine
    quadrature grid and weights proportional to a density times the cell width, this is the
    oracle (true-prior) posterior mean.

    Args:
        x: observations (n >= 2, dim).
        scales: per-observation noise scales.
        grid: (M, dim) atoms.
        weights: (M,) non-negative masses (normalised here).
        noise: the known `AbstractNoiseModel` (e.g. `NoiseModel("gaussian")`).
        batch_size: observations per chunk (memory), ``None`` for all at once.

    Returns:
        (n, dim) posterior means.
    """
    return _npmle_posterior_mean(x, scales, grid, weights, _check_noise(noise), batch_size)


@eqx.filter_jit
def _npmle_posterior_mean(
    x: Array,
    scales: Array,
    grid: Array,
    weights: Array,
    noise: AbstractNoiseModel,
    batch_size: int | None,
) -> Array:
    """`npmle_posterior_mean` as one compiled program per shape."""
    x = check_observations(x)
    scales = check_scales(scales, x.shape, noise).astype(x.dtype)
    grid = _check_grid(jnp.asarray(grid, x.dtype), x.shape[1])
    weights = jnp.asarray(weights, x.dtype)
    if weights.shape != (grid.shape[0],):
        raise ValueError(f"`weights` must be ({grid.shape[0]},), got {weights.shape}.")
    weights = eqx.error_if(
        weights,
        jnp.any(weights < 0) | ~(jnp.sum(weights) > 0),
        "`weights` must be non-negative with a positive sum.",
    )
    log_w = jnp.where(weights > 0, jnp.log(jnp.where(weights > 0, weights, 1.0)), -jnp.inf)

    def one(args: tuple[Array, Array]) -> Array:
        xi, si = args
        ll = noise.log_density(xi[None] - grid, jnp.broadcast_to(si, (grid.shape[0], *si.shape)))
        return jax.nn.softmax(ll + log_w) @ grid

    return jax.lax.map(one, (x, scales), batch_size=batch_size)


def deconv_kde(
    x: Float[Array, "n ..."],
    scales: Float[Array, "n ..."],
    z_grid: Float[Array, " G"],
    bandwidth: float | Float[Array, ""],
    *,
    noise: AbstractNoiseModel,
    num_t: int = 2048,
) -> Float[Array, " G"]:
    r"""Deconvolution kernel density estimate in 1-D (heteroscedastic Delaigle-Meister form).

    $\hat f(z) = \frac{1}{2\pi}\int e^{-itz}\varphi_K(th)
    \frac{\sum_j e^{itX_j}}{\sum_j \varphi_{\varepsilon_j}(t)}\,dt$ with
    $\varphi_K(s) = (1 - s^2)^3$ on |s| <= 1; the real part, by the trapezoid rule on
    ``num_t`` points of [-1/h, 1/h]. Homoscedastic noise gives Stefanski-Carroll. The estimate
    can be negative (clip and renormalise before computing an ISE).

    Args:
        x: observations (n,) (or (n, 1)).
        scales: noise sds (n,) (or (n, 1)).
        z_grid: (G,) evaluation points.
        bandwidth: h > 0.
        noise: the known `AbstractNoiseModel` (``charfn`` supplies phi_eps).
        num_t: quadrature points.

    Returns:
        (G,) density values.

    References:
        Stefanski & Carroll (1990); Delaigle & Meister, JASA 103 (2008).
    """
    noise = _check_noise(noise)
    num_t = check_positive_int(num_t, "num_t", minimum=2)
    x, scales = jnp.asarray(x), jnp.asarray(scales)
    if x.ndim == 2 and x.shape[1] == 1:
        x = x[:, 0]
    if scales.ndim == 2 and scales.shape[1] == 1:
        scales = scales[:, 0]
    if x.ndim != 1 or scales.shape != x.shape:
        raise ValueError(
            f"`x` and `scales` must be (n,) (1-D data), got {x.shape}, {scales.shape}."
        )
    if z_grid.ndim != 1:
        raise ValueError(f"`z_grid` must be 1-D (G,), got shape {z_grid.shape}.")
    return _deconv_kde(x, scales, z_grid, jnp.asarray(bandwidth, x.dtype), noise, num_t)


@eqx.filter_jit
def _deconv_kde(
    x: Array, scales: Array, z_grid: Array, h: Array, noise: AbstractNoiseModel, num_t: int
) -> Array:
    """`deconv_kde` after its shape checks, as one compiled program (h stays dynamic)."""
    x = check_observations(x[:, None])[:, 0]
    scales = check_scales(scales[:, None], (x.shape[0], 1), noise)[:, 0].astype(x.dtype)
    h = eqx.error_if(h, ~(h > 0) | ~jnp.isfinite(h), "`bandwidth` must be finite and > 0.")
    t = jnp.linspace(-1.0, 1.0, num_t, dtype=x.dtype) / h
    phi_k = (1.0 - (t * h) ** 2) ** 3
    tx = t[:, None] * x[None, :]
    re, im = jnp.sum(jnp.cos(tx), 1), jnp.sum(jnp.sin(tx), 1)
    den = jnp.sum(noise.charfn(t[:, None], scales[:, None]), 0)  # (T,)
    ok = phi_k > 0
    ratio = jnp.where(ok, phi_k / jnp.where(ok, jnp.maximum(den, 1e-300), 1.0), 0.0)
    tz = z_grid[:, None].astype(x.dtype) * t[None, :]
    integrand = ratio[None] * (jnp.cos(tz) * re[None] + jnp.sin(tz) * im[None])
    # Trapezoid rule on the uniform t grid (the end points carry phi_K = 0).
    dt = t[1] - t[0]
    total = jnp.sum(integrand, 1) - 0.5 * (integrand[:, 0] + integrand[:, -1])
    return dt * total / (2.0 * math.pi)
