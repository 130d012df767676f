r"""Normalizing Trajectory Models (NTM): exact trajectory likelihoods for few-step generation.

Time convention: **t = 1 is noise**, $x_t = (1 - t) x_0 + t \varepsilon$ (opposite to
`GaussianStraightProcess`). A trajectory is $x_{t_0}, \dots, x_{t_T}$ on a schedule
$t_0 = t_{\min} < \dots < t_T = 1$ (`ntm_schedule`); states are ``(L, c)`` token arrays.

Each reverse step is a conditional normalizing flow: $u_t = f_T(x_t, t)$ (a shared transporter)
and $u_s \mid u_t \sim N(\mu_P, \mathrm{diag}\,\sigma_P^2)$ (a predictor), so (the paper's Eq. 3.3)

$$\log p(x_s \mid x_t) = \log N(f_T(x_s, s); \mu_P(u_t, t, s, y), \sigma_P^2)
+ \log |\det \partial f_T(x_s, s) / \partial x_s|,$$

and the trajectory density $N(x_{t_T}; 0, I) \prod_k p(x_{t_{k-1}} \mid x_{t_k})$ is exact
(eq. 3.4). With $f_T = \mathrm{id}$ it is Gaussian few-step diffusion.

References:
    Gu, Chen, Shen, Berthelot, Zhai, Susskind, "Normalizing Trajectory Models",
    arXiv 2605.08078 (2026): eqs. 3.3-3.5, 3.9; Algorithms 1-3.
"""

import math
from collections.abc import Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, ArrayLike, Float, Int, PRNGKeyArray

from .._velocity import AbstractVelocityField
from ._closed import (
    T_ONE_EPS,
    _check_pair,
    _is_concrete,
    _kernel,
    check_times,
    forward_trajectory,
    gaussian_cfg,
    ntm_schedule,
    reverse_posterior_coeffs,
    shifted_levels,
    trajectory_covariance,
)
from ._predict import (
    AbstractGaussianPredictor,
    ConditionedMLP,
    _features,
    check_class,
    velocity_to_x0,
)
from ._transport import AbstractTransporter, _check_sizes, _check_state, _positive_int

MODES = ("end_to_end", "pairwise")
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def _gaussian_log_prob(x: Array, mu: Array, log_sigma: Array) -> Array:
    """Sum over all entries of log N(x; mu, exp(log_sigma)^2), all constants included."""
    z = (x - mu) * jnp.exp(-log_sigma)
    return -jnp.sum(0.5 * z**2 + log_sigma + _HALF_LOG_2PI)


def _std_normal_log_prob(x: Array) -> Array:
    return -jnp.sum(0.5 * x**2 + _HALF_LOG_2PI)


class NTM(eqx.Module):
    """A transporter ``f_T`` and a Gaussian predictor ``f_P``: one NTM, any schedule length.

    The number of steps ``T = len(ts) - 1`` of a schedule is given to both networks (one model
    can be trained for several ``T``).
    """

    transporter: AbstractTransporter
    predictor: AbstractGaussianPredictor

    def _check_traj(self, xs: Array, ts: Array) -> tuple[Array, int]:
        ts = check_times(ts).astype(xs.dtype)
        num_steps = ts.shape[0] - 1
        shape = (num_steps + 1, self.predictor.seq_len, self.predictor.channels)
        if xs.shape != shape:
            raise ValueError(
                f"`xs` must be one trajectory of shape (T+1, seq_len, channels) = {shape} for "
                f"len(ts) = {num_steps + 1}, got {xs.shape}."
            )
        return ts, num_steps

    def _latent(self, x: Array, t: Array, num_steps: Any) -> tuple[Array, Array]:
        """``f_T(x, t)``, skipped (identity, log-det 0) at the noise level t = 1."""
        u, logdet = self.transporter.forward(x, t, num_steps)
        noise = t >= 1 - T_ONE_EPS
        return jnp.where(noise, x, u), jnp.where(noise, 0.0, logdet).astype(x.dtype)

    def step_log_prob(
        self,
        x_s: Float[Array, "L c"],
        x_t: Float[Array, "L c"],
        s: Float[ArrayLike, ""],
        t: Float[ArrayLike, ""],
        y: Int[ArrayLike, ""] | None,
        T: Any,
    ) -> Float[Array, ""]:
        """``log p(x_s | x_t)`` (eq. 3.3), nats; the log-det enters at the target level only.

        Args:
            x_s: target state (level ``s``), shape ``(L, c)``.
            x_t: conditioning state (level ``t > s``).
            s: target level, ``0 <= s < t``.
            t: conditioning level, ``t <= 1`` (``t = 1``: ``u_t = x_t``).
            y: class id or ``None``.
            T: number of steps of the trajectory the pair belongs to.
        """
        _check_state(x_s, self.predictor.seq_len, self.predictor.channels, "x_s")
        _check_state(x_t, self.predictor.seq_len, self.predictor.channels, "x_t")
        s, t = jnp.asarray(s, x_s.dtype), jnp.asarray(t, x_s.dtype)
        t, s = _check_pair(t, s)  # fail before the transporter runs (eagerly: op by op)
        u_s, logdet = self._latent(x_s, s, T)
        u_t, _ = self._latent(x_t, t, T)
        mu, log_sigma = self.predictor(u_t, t, s, y, T)
        return _gaussian_log_prob(u_s, mu, log_sigma) + logdet

    def trajectory_nll(
        self,
        xs: Float[Array, "T1 L c"],
        ts: Float[ArrayLike, " T1"],
        y: Int[ArrayLike, ""] | None = None,
    ) -> Float[Array, ""]:
        r"""Exact $-\log p(x_{t_0}, \dots, x_{t_T})$ in nats (eq. 3.4, all constants).

        $N(0, I)$ at $t_T = 1$; levels $k < T$ go through $f_T$ in one batched call and all
        $T$ predictor calls are batched (teacher forcing).

        Args:
            xs: one trajectory, shape ``(T + 1, L, c)``, entry ``k`` at level ``ts[k]``.
            ts: its schedule (strictly increasing, ``ts[0] >= 0``, ``ts[-1] = 1``).
            y: class id (``None`` for an unconditional predictor).

        Returns:
            The negative log-likelihood of the whole trajectory (a scalar).
        """
        ts, num_steps = self._check_traj(xs, ts)
        y = check_class(y, self.predictor.num_classes)
        u, logdet = jax.vmap(lambda x, t: self.transporter.forward(x, t, num_steps))(
            xs[:-1], ts[:-1]
        )
        conditioning = jnp.concatenate([u[1:], xs[-1:]])
        mu, log_sigma = jax.vmap(lambda ut, t, s: self.predictor(ut, t, s, y, num_steps))(
            conditioning, ts[1:], ts[:-1]
        )
        steps = jax.vmap(_gaussian_log_prob)(u, mu, log_sigma) + logdet
        return -(_std_normal_log_prob(xs[-1]) + jnp.sum(steps))

    def _guided(
        self, u: Array, t: Array, s: Array, y: Any, num_steps: int, cfg_scale: Any
    ) -> tuple[Array, Array]:
        mu, log_sigma = self.predictor(u, t, s, y, num_steps)
        if cfg_scale is None:
            return mu, jnp.exp(log_sigma)
        null = jnp.asarray(self.predictor.num_classes, dtype=jnp.asarray(y).dtype)
        mu_u, log_sigma_u = self.predictor(u, t, s, null, num_steps)
        return gaussian_cfg(mu, jnp.exp(log_sigma), mu_u, jnp.exp(log_sigma_u), cfg_scale)

    def sample(
        self,
        key: PRNGKeyArray,
        ts: Float[ArrayLike, " T1"],
        y: Int[ArrayLike, ""] | None = None,
        cfg_scale: float | Float[ArrayLike, ""] = 0.0,
    ) -> tuple[Float[Array, "L c"], Float[Array, "T1 L c"]]:
        r"""Ancestral sampling in u-space (Algorithm 2), then one inversion of $f_T$ at $t_0$.

        $\hat u_{t_T} \sim N(0, I)$; for $k = T, \dots, 1$:
        $\hat u_{t_{k-1}} = \mu + \sigma z$ with $(\mu, \sigma)$ from the predictor (guided by
        `gaussian_cfg` when ``cfg_scale > 0``); $\hat x_{t_0} = f_T^{-1}(\hat u_{t_0}, t_0)$.

        Args:
            key: PRNG key.
            ts: schedule (``ts[-1] = 1``).
            y: class id (``None`` for an unconditional predictor).
            cfg_scale: guidance weight ``w >= 0`` (needs a class-conditional predictor trained
                with condition dropout; ``0``: no guidance, one predictor call per step).

        Returns:
            ``(x_t0, u_traj)``: the sample at level ``ts[0]``, shape ``(L, c)``, and the latent
            trajectory, shape ``(T + 1, L, c)`` (entry ``k`` at level ``ts[k]``).
        """
        dtype = jnp.result_type(float)
        ts = check_times(ts)
        dtype = ts.dtype if jnp.issubdtype(ts.dtype, jnp.floating) else dtype
        num_steps = ts.shape[0] - 1
        y = check_class(y, self.predictor.num_classes)
        if _is_concrete(cfg_scale) and float(cfg_scale) == 0:
            cfg_scale = None
        elif self.predictor.num_classes == 0:
            raise ValueError(
                "`cfg_scale` > 0 needs a class-conditional predictor (num_classes > 0)."
            )
        shape = (self.predictor.seq_len, self.predictor.channels)
        noise = jr.normal(key, (num_steps + 1,) + shape, dtype)

        def step(u: Array, inputs: tuple[Array, Array, Array]) -> tuple[Array, Array]:
            t, s, z = inputs
            mu, sigma = self._guided(u, t, s, y, num_steps, cfg_scale)
            u = mu + sigma * z
            return u, u

        levels = (ts[1:][::-1], ts[:-1][::-1], noise[1:])
        _, us = jax.lax.scan(step, noise[0], levels)
        u_traj = jnp.concatenate([us[::-1], noise[:1]])
        return self.transporter.inverse(u_traj[0], ts[0], num_steps), u_traj

    def invert_trajectory(
        self,
        u_traj: Float[Array, "T1 L c"],
        ts: Float[ArrayLike, " T1"],
        y: Int[ArrayLike, ""] | None = None,
    ) -> Float[Array, "T1 L c"]:
        """``x_{t_k} = f_T^{-1}(u_{t_k}, t_k)`` at every level (``x_{t_T} = u_{t_T}``).

        ``y`` is accepted for symmetry with `sample` (the transporter is not class-conditioned).
        """
        ts, num_steps = self._check_traj(u_traj, ts)
        check_class(y, self.predictor.num_classes)
        xs = jax.vmap(lambda u, t: self.transporter.inverse(u, t, num_steps))(u_traj[:-1], ts[:-1])
        return jnp.concatenate([xs, u_traj[-1:]])


# ------------------------------------------------------------------------------------------------
# Losses


def _split_batch(batch: Any, num_classes: int) -> tuple[Array, Array | None]:
    if isinstance(batch, tuple | list):
        if len(batch) != 2:
            raise ValueError("`batch` must be x0 of shape (B, L, c) or a pair (x0, y).")
        x0, y = jnp.asarray(batch[0]), jnp.asarray(batch[1])
    else:
        x0, y = jnp.asarray(batch), None
    if x0.ndim != 3:
        raise ValueError(f"`batch` x0 must have shape (B, seq_len, channels), got {x0.shape}.")
    if num_classes and y is None:
        raise ValueError("a class-conditional model needs `batch = (x0, y)` with y of shape (B,).")
    if not num_classes and y is not None:
        raise ValueError("an unconditional model (num_classes=0) takes `batch = x0` only.")
    if y is not None and (y.shape != (x0.shape[0],) or not jnp.issubdtype(y.dtype, jnp.integer)):
        raise ValueError(
            f"class ids `y` must be integers of shape ({x0.shape[0]},), got {y.shape}."
        )
    x0 = eqx.error_if(x0, jnp.any(~jnp.isfinite(x0)), "`batch` x0 contains NaN or inf.")
    return x0, y


def _check_steps(steps: Sequence[int], mode: str, t_min_range: Sequence[float], seq_len: int):
    steps = tuple(steps)
    if not steps:
        raise ValueError("`steps` must name at least one trajectory length T.")
    for num in steps:
        _positive_int("steps", num)
    if mode not in MODES:
        raise ValueError(f"`mode` must be one of {MODES}, got {mode!r}.")
    lo, hi = (float(v) for v in t_min_range)
    t1 = shifted_levels(max(steps), seq_len)[0]
    if not 0 <= lo <= hi < t1:
        raise ValueError(
            f"`t_min_range` must satisfy 0 <= lo <= hi < t_1 = {t1:.4g} (T = {max(steps)}), "
            f"got {(lo, hi)}."
        )
    return steps, lo, hi


def ntm_loss(
    model: NTM,
    batch: Array | tuple[Array, Array],
    key: PRNGKeyArray,
    *,
    steps: Sequence[int] = (4,),
    mode: str = "end_to_end",
    t_min_range: tuple[float, float] = (0.0, 0.05),
    cond_dropout: float = 0.0,
) -> Float[Array, ""]:
    r"""Maximum-likelihood NTM loss on clean data (Algorithm 1), nats per dimension.

    Per example: $t_{\min} \sim U(t_{\min}$ ``_range``$)$, schedule `ntm_schedule`(T, L,
    $t_{\min}$), forward chain, then

    - ``"end_to_end"``: the exact trajectory NLL (`NTM.trajectory_nll`, all $T$ factors);
    - ``"pairwise"``: $T \times (-\log p(x_{t_{k-1}} \mid x_{t_k}))$ for one uniformly drawn
      $k$ (an unbiased estimate of the end-to-end loss without its parameter-free prior term),
      with only the two levels drawn from their exact joint.

    Several trajectory lengths: the batch is split into ``len(steps)`` contiguous, near-equal
    parts, part ``i`` trained at ``T = steps[i]`` (a stratified draw of T). The result is the
    batch mean divided by the state size ``L c``. Use with `jaxgen.core.fit` through
    ``functools.partial(ntm_loss, steps=..., ...)``.

    Args:
        model: the `NTM`.
        batch: clean data ``x0`` of shape ``(B, L, c)``, or ``(x0, y)`` with integer classes
            ``(B,)`` for a class-conditional predictor.
        key: PRNG key.
        steps: trajectory lengths ``T`` to train (one model for all).
        mode: ``"end_to_end"`` or ``"pairwise"``.
        t_min_range: ``(lo, hi)``, ``0 <= lo <= hi < t_1``.
        cond_dropout: probability of replacing a class by the null class (for guidance).

    Returns:
        The scalar loss.
    """
    num_classes = model.predictor.num_classes
    x0, y = _split_batch(batch, num_classes)
    seq_len = x0.shape[1]
    steps, lo, hi = _check_steps(steps, mode, t_min_range, seq_len)
    if not 0 <= cond_dropout <= 1:
        raise ValueError(f"`cond_dropout` must lie in [0, 1], got {cond_dropout}.")
    if cond_dropout and y is None:
        raise ValueError("`cond_dropout` > 0 needs a class-conditional model and batch (x0, y).")
    num = x0.shape[0]
    if num < len(steps):
        raise ValueError(f"batch size {num} is smaller than the number of `steps` {len(steps)}.")
    drop_key, key = jr.split(key)
    if y is not None and cond_dropout:
        y = jnp.where(jr.bernoulli(drop_key, cond_dropout, (num,)), num_classes, y)

    def one(x: Array, label: Array | None, k: PRNGKeyArray, num_steps: int) -> Array:
        k_t, k_traj, k_pair = jr.split(k, 3)
        t_min = jr.uniform(k_t, (), x.dtype, lo, hi)
        ts = ntm_schedule(num_steps, seq_len, t_min)
        if mode == "end_to_end":
            return model.trajectory_nll(forward_trajectory(k_traj, x, ts), ts, label)
        j = jr.randint(k_pair, (), 0, num_steps)
        s, t = ts[j], ts[j + 1]
        e1, e2 = jr.normal(k_traj, (2,) + x.shape, x.dtype)
        x_s = (1 - s) * x + s * e1
        alpha, sigma = _kernel(s, t)
        x_t = alpha * x_s + sigma * e2
        return -num_steps * model.step_log_prob(x_s, x_t, s, t, label, num_steps)

    def part(x: Array, labels: Array | None, keys: Array, num_steps: int) -> Array:
        if labels is None:
            return jnp.sum(jax.vmap(lambda a, k: one(a, None, k, num_steps))(x, keys))
        return jnp.sum(jax.vmap(lambda a, b, k: one(a, b, k, num_steps))(x, labels, keys))

    bounds = [round(i * num / len(steps)) for i in range(len(steps) + 1)]
    keys = jr.split(key, num)
    total = jnp.zeros((), x0.dtype)
    for i, num_steps in enumerate(steps):
        sl = slice(bounds[i], bounds[i + 1])
        total = total + part(x0[sl], None if y is None else y[sl], keys[sl], num_steps)
    return total / (num * x0.shape[1] * x0.shape[2])


def mean_alignment_loss(
    model: NTM,
    frozen_fm: AbstractVelocityField,
    xs: Float[Array, "T1 L c"],
    ts: Float[ArrayLike, " T1"],
    y: Int[ArrayLike, ""] | None = None,
) -> Float[Array, ""]:
    r"""Finetuning regulariser $\sum_k \|\mu_P^{(k)} - \mu_{FM}^{(k)}\|^2$.

    $\mu_P^{(k)}$ is the predictor's mean from $u_{t_k} = f_T(x_{t_k}, t_k)$;
    $\mu_{FM}^{(k)} = A x_{t_k} + B \hat x_0$ is the Gaussian-posterior mean of the frozen
    flow-matching field applied to $x_{t_k}$ in x-space ($\hat x_0$ by `velocity_to_x0`: the field
    is in jaxgen's convention, data at its $\tau = 1$). Add $\lambda$ times this to the NTM loss
    (paper: $\lambda = 2.5$, cosine-decayed); without it finetuning drifts.

    Args:
        model: the NTM being finetuned.
        frozen_fm: the pretrained field (wrap in ``jax.lax.stop_gradient`` or keep out of the
            trained pytree).
        xs: one trajectory ``(T + 1, L, c)``.
        ts: its schedule.
        y: class id (one-hot ``args`` of a conditional field; the null class gives zeros).

    Returns:
        The summed squared difference over levels and coordinates.
    """
    ts, num_steps = model._check_traj(xs, ts)
    y = check_class(y, model.predictor.num_classes)
    args = None
    if y is not None:
        k = model.predictor.num_classes
        args = jax.nn.one_hot(y, k + 1, dtype=xs.dtype)[:k]
    u, _ = jax.vmap(lambda x, t: model._latent(x, t, num_steps))(xs[1:], ts[1:])

    def pair(x_t: Array, u_t: Array, t: Array, s: Array) -> Array:
        mu_p, _ = model.predictor(u_t, t, s, y, num_steps)
        a, b, _ = reverse_posterior_coeffs(t, s)
        mu_fm = a * x_t + b * velocity_to_x0(frozen_fm, x_t, t, args)
        return jnp.sum((mu_p - jax.lax.stop_gradient(mu_fm)) ** 2)

    loss = jnp.sum(jax.vmap(pair)(xs[1:], u, ts[1:], ts[:-1]))
    # On the loss: the first level xs[0] is not read, so a check on `xs` itself would be dropped.
    return eqx.error_if(loss, ~jnp.all(jnp.isfinite(xs)), "`xs` must be finite (no NaN/inf).")


# ------------------------------------------------------------------------------------------------
# Trajectory score denoising, learned denoiser, ELBO


def trajectory_score_denoise(
    model: NTM,
    xs: Float[Array, "T1 L c"],
    ts: Float[ArrayLike, " T1"],
    y: Int[ArrayLike, ""] | None = None,
    clip_percentile: float | None = None,
) -> Float[Array, "T L c"]:
    r"""Tweedie denoising with the exact trajectory score (eq. 3.5, Algorithm 3).

    Given $x_{t_i} = (1 - t_i) x_0 + n_i$ with $n \sim N(0, S \otimes I)$
    (`trajectory_covariance`), $E[x_0 \mid x] = (x_i + \sum_j S_{ij} \nabla_j \log p(x))/(1 - t_i)$;
    with $g = \nabla_x L_{NTM}$: $\hat x_{0,i} = (x_i - \sum_j S_{ij} g_j) / (1 - t_i)$ for every
    level $i < T$ (the noise level is excluded).

    Args:
        model: the NTM whose trajectory density gives the score.
        xs: one trajectory ``(T + 1, L, c)`` (e.g. `NTM.invert_trajectory` of a sample).
        ts: its schedule.
        y: class id or ``None``.
        clip_percentile: clip ``|g|`` elementwise at this percentile (in ``(0, 100]``) of
            ``|g|`` over the trajectory; ``None``: no clipping.

    Returns:
        The denoised estimates of ``x0`` from every level ``0..T-1``, shape ``(T, L, c)``; entry
        0 is the output of Algorithm 3.
    """
    ts, num_steps = model._check_traj(xs, ts)
    grad = jax.grad(model.trajectory_nll)(xs, ts, y)
    if clip_percentile is not None:
        if not 0 < clip_percentile <= 100:
            raise ValueError(f"`clip_percentile` must lie in (0, 100], got {clip_percentile}.")
        bound = jnp.percentile(jnp.abs(grad), clip_percentile)
        grad = jnp.clip(grad, -bound, bound)
    cov = trajectory_covariance(ts)[:-1].astype(xs.dtype)
    shrunk = xs[:-1] - jnp.tensordot(cov, grad, axes=1)
    return shrunk / (1 - ts[:-1])[:, None, None]


class Denoiser(eqx.Module):
    """One-pass denoiser ``g_phi(u_t0, t0, y) -> x0_hat`` (eq. 3.9): ``u + MLP(...)``.

    Distilled from `trajectory_score_denoise` targets (`denoiser_targets`, `denoiser_loss`): at
    inference it replaces the sequential inversion of ``f_T`` after the predictor's ``T`` steps.
    """

    seq_len: int = eqx.field(static=True)
    channels: int = eqx.field(static=True)
    net: ConditionedMLP

    def __init__(
        self,
        seq_len: int,
        channels: int,
        *,
        width: int = 256,
        depth: int = 3,
        num_classes: int = 0,
        key: PRNGKeyArray,
    ):
        """Build the MLP (``depth`` hidden layers of ``width``, SiLU, zero-initialised output)."""
        _check_sizes(seq_len=seq_len, channels=channels, width=width, depth=depth)
        dim = seq_len * channels
        self.net = ConditionedMLP(dim, 1, dim, width, depth, num_classes, key=key)
        self.seq_len, self.channels = seq_len, channels

    @property
    def num_classes(self) -> int:
        """Number of classes (0: unconditional)."""
        return self.net.num_classes

    def __call__(
        self,
        u_t0: Float[Array, "L c"],
        t0: Float[ArrayLike, ""],
        y: Int[ArrayLike, ""] | None = None,
    ) -> Float[Array, "L c"]:
        """Clean-data estimate from the first latent ``u_t0`` of a sampled trajectory."""
        _check_state(u_t0, self.seq_len, self.channels, "u_t0")
        time = _features(jnp.asarray(t0, u_t0.dtype), 1000.0, u_t0.dtype)
        return u_t0 + self.net(u_t0, [time], y).reshape(u_t0.shape)


def denoiser_targets(
    key: PRNGKeyArray,
    model: NTM,
    x0: Float[Array, "L c"],
    ts: Float[ArrayLike, " T1"],
    y: Int[ArrayLike, ""] | None = None,
    clip_percentile: float | None = None,
) -> tuple[Float[Array, "L c"], Float[Array, "L c"]]:
    """``(u_t0, target)`` for one clean sample: forward chain, ``f_T`` at ``t0``, Algorithm 3."""
    xs = forward_trajectory(key, x0, ts)
    ts = jnp.asarray(ts, xs.dtype)
    u0, _ = model.transporter.forward(xs[0], ts[0], ts.shape[0] - 1)
    target = trajectory_score_denoise(model, xs, ts, y, clip_percentile)[0]
    return jax.lax.stop_gradient(u0), jax.lax.stop_gradient(target)


def denoiser_loss(
    denoiser: Denoiser, batch: tuple[Array, ...], key: PRNGKeyArray
) -> Float[Array, ""]:
    r"""$L_{den} = \mathrm{mean}\,\|g_\phi(u_{t_0}, t_0, y) - \hat x_{den}\|^2$ (eq. 3.9).

    Args:
        denoiser: the `Denoiser` being trained.
        batch: ``(u_t0, t0, target)`` or ``(u_t0, t0, target, y)`` with leading axis ``B``
            (from `denoiser_targets` of a frozen NTM; ``t0`` of shape ``(B,)``).
        key: unused (the loss is deterministic); kept for `jaxgen.core.fit`.

    Returns:
        Mean squared error per coordinate.
    """
    if not isinstance(batch, tuple | list) or len(batch) not in (3, 4):
        raise ValueError("`batch` must be (u_t0, t0, target) or (u_t0, t0, target, y).")
    u, t0, target = batch[0], batch[1], batch[2]
    if u.shape != target.shape or t0.shape != u.shape[:1]:
        raise ValueError(
            f"`batch` shapes disagree: u_t0 {u.shape}, t0 {t0.shape}, target {target.shape}."
        )
    if len(batch) == 4:
        pred = jax.vmap(denoiser)(u, t0, batch[3])
    else:
        pred = jax.vmap(lambda a, b: denoiser(a, b))(u, t0)
    return jnp.mean((pred - target) ** 2)


def ntm_elbo(
    key: PRNGKeyArray,
    model: NTM,
    x_t0: Float[Array, "L c"],
    ts: Float[ArrayLike, " T1"],
    y: Int[ArrayLike, ""] | None = None,
    num_samples: int = 1,
) -> Float[Array, ""]:
    r"""Lower bound on $\log p(x_{t_0})$ in nats, importance-weighted over K paths.

    Paths continue from the given $x_{t_0}$ with the forward kernels (they do not
    depend on $x_0$): $w = \log p(x_{t_0:t_T}) - \sum_k \log q(x_{t_{k+1}} \mid x_{t_k})$ and the
    bound is $\log \frac1K \sum_i e^{w_i}$ (the ELBO for $K = 1$; tighter as $K$ grows).

    Args:
        key: PRNG key of the forward paths.
        model: the NTM.
        x_t0: one state at level ``ts[0]``, shape ``(L, c)``.
        ts: schedule.
        y: class id or ``None``.
        num_samples: ``K >= 1``.

    Returns:
        The bound (nats, the whole state; divide by ``L c`` for nats/dim).
    """
    _positive_int("num_samples", num_samples)
    _check_state(x_t0, model.predictor.seq_len, model.predictor.channels, "x_t0")
    ts = check_times(ts).astype(x_t0.dtype)
    x_t0 = eqx.error_if(x_t0, jnp.any(~jnp.isfinite(x_t0)), "`x_t0` contains NaN or inf.")

    def weight(k: PRNGKeyArray) -> Array:
        noise = jr.normal(k, (ts.shape[0] - 1,) + x_t0.shape, x_t0.dtype)

        def step(x: Array, inputs: tuple[Array, Array, Array]) -> tuple[Array, tuple]:
            s, t, eps = inputs
            alpha, sigma = _kernel(s, t)
            x_new = alpha * x + sigma * eps
            log_q = _gaussian_log_prob(x_new, alpha * x, jnp.log(sigma) * jnp.ones_like(x))
            return x_new, (x_new, log_q)

        _, (rest, log_q) = jax.lax.scan(step, x_t0, (ts[:-1], ts[1:], noise))
        xs = jnp.concatenate([x_t0[None], rest])
        return -model.trajectory_nll(xs, ts, y) - jnp.sum(log_q)

    w = jax.vmap(weight)(jr.split(key, num_samples))
    return jax.nn.logsumexp(w) - jnp.log(jnp.asarray(num_samples, w.dtype))
