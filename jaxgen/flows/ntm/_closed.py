r"""Normalizing Trajectory Models: schedules and closed forms of the forward trajectory.

Time convention (Gu et al. 2026, opposite to `GaussianStraightProcess`): **t = 1 is noise**,
$x_t = (1 - t) x_0 + t \varepsilon$, so $q(x_t \mid x_0) = N((1 - t) x_0, t^2 I)$. A schedule is
$t_0 = t_{\min} < t_1 < \dots < t_T = 1$; consecutive levels $s < t$ are linked by the Markov
kernel (it preserves the marginals, the paper's Prop. 1)

$$x_t = \alpha_{s,t} x_s + \sigma_{s,t} \varepsilon, \quad
\alpha_{s,t} = \frac{1 - t}{1 - s}, \quad
\sigma_{s,t}^2 = \frac{(t - s)(t + s - 2ts)}{(1 - s)^2},$$

which preserves the marginals. Everything here is a pure function of arrays (jit/vmap-safe); value
checks on traced inputs go through `eqx.error_if`.

References:
    Gu, Chen, Shen, Berthelot, Zhai, Susskind, "Normalizing Trajectory Models",
    arXiv 2605.08078 (2026), Props. 1-3 and Appendix C.4.
"""

import math
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

from ...core.checks import check_positive

#: A level ``t`` counts as pure noise (transporter and predictor skipped) from ``1 - T_ONE_EPS`` on.
T_ONE_EPS = 1e-6


def _is_concrete(x: Any) -> bool:
    return not isinstance(x, jax.core.Tracer)


def check_times(ts: Float[ArrayLike, " T1"], name: str = "ts") -> Float[Array, " T1"]:
    """Validate a schedule: 1-D, >= 2 levels, strictly increasing, ``ts[0] >= 0``, ``ts[-1] = 1``.

    Shape errors raise ``ValueError`` at trace time; value errors go through `eqx.error_if`
    (the returned array must be used).
    """
    ts = jnp.asarray(ts)
    if ts.ndim != 1 or ts.shape[0] < 2:
        raise ValueError(f"`{name}` must be a 1-D schedule of >= 2 levels, got shape {ts.shape}.")
    if not jnp.issubdtype(ts.dtype, jnp.floating):
        ts = ts.astype(jnp.result_type(float))
    ts = eqx.error_if(ts, jnp.any(~jnp.isfinite(ts)), f"`{name}` must be finite (got NaN or inf).")
    ts = eqx.error_if(ts, jnp.any(jnp.diff(ts) <= 0), f"`{name}` must be strictly increasing.")
    ts = eqx.error_if(ts, ts[0] < 0, f"`{name}[0]` (t_min) must be >= 0.")
    ts = eqx.error_if(ts, jnp.abs(ts[-1] - 1) > T_ONE_EPS, f"`{name}` must end at t_T = 1 (noise).")
    return ts


def shifted_levels(num_steps: int, seq_len: int) -> list[float]:
    """``[sigma_1, ..., sigma_T]`` of `ntm_schedule` as Python floats (``sigma_T = 1`` exactly)."""
    mu = 0.5 + 0.65 * (seq_len - 256) / (4096 - 256)
    e = math.exp(mu)
    return [e / (e + (num_steps / k - 1)) for k in range(1, num_steps + 1)]


def ntm_schedule(
    num_steps: int, seq_len: int, t_min: float | Float[Array, ""] = 0.0
) -> Float[Array, " T1"]:
    r"""The shifted schedule $(t_{\min}, \sigma_1, \dots, \sigma_T)$ of Appendix C.4.

    $\tilde\sigma_k = k / T$ and $\sigma_k = e^\mu / (e^\mu + 1/\tilde\sigma_k - 1)$ with
    $\mu = 0.5 + 0.65 (L_{seq} - 256) / 3840$ (Esser et al.'s resolution shift, $L_{seq}$ the
    number of tokens); $\sigma_T = 1$ (noise, this module's convention).

    Args:
        num_steps: $T \geq 1$, the number of reverse steps.
        seq_len: number of tokens $L_{seq} \geq 1$ of one state.
        t_min: the first level $t_0 \in [0, t_1)$ (may be traced, e.g. sampled per example).

    Returns:
        The increasing schedule, shape ``(num_steps + 1,)``, ending at 1.
    """
    if not isinstance(num_steps, int) or isinstance(num_steps, bool) or num_steps < 1:
        raise ValueError(f"`num_steps` must be an int >= 1, got {num_steps!r}.")
    if not isinstance(seq_len, int) or isinstance(seq_len, bool) or seq_len < 1:
        raise ValueError(f"`seq_len` must be an int >= 1, got {seq_len!r}.")
    sigmas = shifted_levels(num_steps, seq_len)
    if _is_concrete(t_min) and not 0 <= float(t_min) < sigmas[0]:
        raise ValueError(
            f"`t_min` must lie in [0, t_1) = [0, {sigmas[0]:.4g}) for T = {num_steps}, "
            f"got {float(t_min)}."
        )
    t_min = jnp.asarray(t_min)
    dtype = t_min.dtype if jnp.issubdtype(t_min.dtype, jnp.floating) else jnp.result_type(float)
    t_min = eqx.error_if(
        t_min.astype(dtype),
        (t_min < 0) | (t_min >= sigmas[0]) | ~jnp.isfinite(t_min),
        "`t_min` must lie in [0, t_1).",
    )
    return jnp.concatenate([t_min[None], jnp.asarray(sigmas, dtype)])


def _kernel(s: Array, t: Array) -> tuple[Array, Array]:
    """(alpha_{s,t}, sigma_{s,t}) of the forward kernel x_t = alpha x_s + sigma eps."""
    alpha = (1 - t) / (1 - s)
    sigma = jnp.sqrt((t - s) * (t + s - 2 * t * s)) / (1 - s)
    return alpha, sigma


@eqx.filter_jit  # eagerly, its checks, scan and draws would compile op by op
def forward_trajectory(
    key: PRNGKeyArray, x0: Float[Array, "..."], ts: Float[ArrayLike, " T1"]
) -> Float[Array, "T1 ..."]:
    r"""Sample the forward chain $x_{t_0}, \dots, x_{t_T}$ from clean data $x_0$.

    $x_{t_0} = (1 - t_0) x_0 + t_0 \varepsilon_0$, then
    $x_{t_{k+1}} = \alpha_{t_k, t_{k+1}} x_{t_k} + \sigma_{t_k, t_{k+1}} \varepsilon_k$; every
    marginal is $N((1 - t_k) x_0, t_k^2 I)$ and the joint covariance is `trajectory_covariance`.

    Args:
        key: PRNG key.
        x0: one clean sample of any shape (e.g. ``(L, c)``).
        ts: schedule, strictly increasing, ``ts[0] >= 0``, ``ts[-1] = 1`` (t = 1 is noise).

    Returns:
        The trajectory, shape ``(T + 1, *x0.shape)``; entry ``k`` is the level ``ts[k]``.
    """
    x0 = jnp.asarray(x0)
    ts = check_times(ts).astype(x0.dtype)
    noise = jr.normal(key, (ts.shape[0],) + x0.shape, x0.dtype)
    first = (1 - ts[0]) * x0 + ts[0] * noise[0]

    def step(x: Array, inputs: tuple[Array, Array, Array]) -> tuple[Array, Array]:
        s, t, eps = inputs
        alpha, sigma = _kernel(s, t)
        x = alpha * x + sigma * eps
        return x, x

    _, rest = jax.lax.scan(step, first, (ts[:-1], ts[1:], noise[1:]))
    return jnp.concatenate([first[None], rest])


def _check_pair(t: Any, s: Any) -> tuple[Array, Array]:
    t, s = jnp.asarray(t), jnp.asarray(s)
    if t.ndim or s.ndim:
        raise ValueError(f"`t` and `s` must be scalars, got shapes {t.shape} and {s.shape}.")
    if _is_concrete(t) and _is_concrete(s):
        if not (0 <= float(s) < float(t) <= 1):
            raise ValueError(
                f"need 0 <= s < t <= 1 (and s < 1), got s = {float(s)}, t = {float(t)}."
            )
    bad = (s < 0) | (s >= t) | (t > 1) | ~jnp.isfinite(s) | ~jnp.isfinite(t)
    s = eqx.error_if(s, bad, "need 0 <= s < t <= 1 (s = 1 would be a pair inside the noise level).")
    return t, s


def reverse_posterior_coeffs(
    t: Float[ArrayLike, ""], s: Float[ArrayLike, ""]
) -> tuple[Float[Array, ""], Float[Array, ""], Float[Array, ""]]:
    r"""Coefficients of the Gaussian posterior $q(x_s \mid x_t, x_0) = N(A x_t + B x_0, C^2 I)$.

    Prop. 2 (eqs. A.10-A.12), for $0 \le s < t \le 1$:

    $$A = \frac{s^2 (1 - t)}{t^2 (1 - s)}, \quad B = \frac{(t - s)(t + s - 2ts)}{t^2 (1 - s)},
    \quad C^2 = \frac{s^2 (t - s)(t + s - 2ts)}{t^2 (1 - s)^2}.$$

    Limits: $t = 1$ gives $(0, 1 - s, s)$; $s \to t$ gives $(1, 0, 0)$. (The paper's Table 3 does
    not follow from these equations; the equations are implemented.)

    Args:
        t: the conditioning (noisier) level, ``0 < t <= 1``.
        s: the target level, ``0 <= s < t`` (so ``s < 1``).

    Returns:
        ``(A, B, C)`` with ``C`` a standard deviation (not a variance).
    """
    t, s = _check_pair(t, s)
    dtype = jnp.result_type(t, s, float)
    t, s = t.astype(dtype), s.astype(dtype)
    gap = (t - s) * (t + s - 2 * t * s)
    a = s**2 * (1 - t) / (t**2 * (1 - s))
    b = gap / (t**2 * (1 - s))
    c = s * jnp.sqrt(gap) / (t * (1 - s))
    return a, b, c


def trajectory_covariance(ts: Float[ArrayLike, " T1"]) -> Float[Array, "T1 T1"]:
    r"""Covariance $S$ of the trajectory given $x_0$, per coordinate (Prop. 3).

    $S_{ij} = t_i^2 (1 - t_j) / (1 - t_i)$ for $t_i \le t_j$ (symmetric); $S_{ii} = t_i^2$ is set
    explicitly (the formula is 0/0 at $t = 1$) and entries with $t_j = 1$, $i \ne j$ are 0: the
    noise level forgets the past. The full covariance of a trajectory of $d$ coordinates is
    $S \otimes I_d$.

    Args:
        ts: a valid schedule (strictly increasing, ``ts[-1] = 1``).

    Returns:
        ``S``, shape ``(T + 1, T + 1)``.
    """
    ts = check_times(ts)
    lo, hi = jnp.minimum(ts[:, None], ts[None, :]), jnp.maximum(ts[:, None], ts[None, :])
    safe = jnp.where(lo >= 1 - T_ONE_EPS, 0.5, lo)  # only the (T, T) entry has lo = 1
    off = safe**2 * (1 - hi) / (1 - safe)
    return jnp.where(jnp.eye(ts.shape[0], dtype=bool), ts[:, None] ** 2 * jnp.ones_like(off), off)


def gaussian_cfg(
    mu_c: Float[ArrayLike, "..."],
    sig_c: Float[ArrayLike, "..."],
    mu_u: Float[ArrayLike, "..."],
    sig_u: Float[ArrayLike, "..."],
    w: float | Float[Array, ""],
) -> tuple[Float[Array, "..."], Float[Array, "..."]]:
    r"""Classifier-free guidance of diagonal Gaussians: the Gaussian $\propto p_c^{1+w} / p_u^w$.

    With $s = \mathrm{clip}(\sigma_c^2 / \sigma_u^2, 0, 1)$ (elementwise; clipping keeps the
    precision positive):

    $$\sigma = \frac{\sigma_c}{\sqrt{1 + w - w s}}, \qquad
    \mu = \frac{(1 + w) \mu_c - w s \mu_u}{1 + w - w s}.$$

    Exact for $\sigma_c \le \sigma_u$; $w = 0$ returns $(\mu_c, \sigma_c)$.

    Args:
        mu_c: conditional mean.
        sig_c: conditional standard deviation (> 0), broadcastable with ``mu_c``.
        mu_u: unconditional mean.
        sig_u: unconditional standard deviation (> 0).
        w: guidance weight ``>= 0``.

    Returns:
        ``(mu, sigma)`` of the guided Gaussian.
    """
    if _is_concrete(w) and float(w) < 0:
        raise ValueError(f"guidance weight `w` must be >= 0, got {float(w)}.")
    mu_c, sig_c, mu_u, sig_u = (jnp.asarray(a) for a in (mu_c, sig_c, mu_u, sig_u))
    w = jnp.asarray(w, jnp.result_type(mu_c, sig_c, float))
    w = eqx.error_if(w, (w < 0) | ~jnp.isfinite(w), "guidance weight `w` must be >= 0.")
    sig_c = check_positive(sig_c, "sig_c")
    sig_u = check_positive(sig_u, "sig_u")
    s = jnp.clip((sig_c / sig_u) ** 2, 0, 1)
    denom = 1 + w - w * s
    return ((1 + w) * mu_c - w * s * mu_u) / denom, sig_c / jnp.sqrt(denom)
