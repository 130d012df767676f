r"""Average velocities (mean flows): one- and few-step sampling by interval jumps.

Time convention, **opposite to `GaussianStraightProcess` and `flow_matching_loss`**: t = 1 is
noise and t = 0 is data, $z_t = (1 - t) x + t \varepsilon$, and the conditional velocity is
$v(z, t, c) = E[\varepsilon - x \mid z_t = z, c]$; the probability-flow ODE $dz/dt = v$ runs from
t = 1 down to 0. (`NoiseAtOneVelocity` turns a field trained in the library's t = 0-noise
convention into this one.)

The average velocity over $[r, t]$ along the ODE solution through $z_t$,

$$u(z_t, r, t, c) = \frac{1}{t - r} \int_r^t v(z_\tau, \tau, c)\, d\tau, \qquad
z_r = z_t - (t - r)\, u(z_t, r, t, c), \qquad u(z, t, t, c) = v(z, t, c),$$

turns a jump of any length into one network call: $\hat x = \varepsilon - u(\varepsilon, 0, 1, c)$.
Additivity of the integral gives Interval Splitting Consistency (ISC): for
$s = (1 - \lambda) t + \lambda r$,

$$u(z_t, r, t) = (1 - \lambda)\, u(z_s, r, s) + \lambda\, u(z_t, s, t), \qquad
z_s = z_t - (t - s)\, u(z_t, s, t),$$

which `splitmeanflow_loss` enforces without Jacobian-vector products; as $s \to t$ it becomes the
MeanFlow identity $u = v - (t - r)(\partial_z u\, v + \partial_t u)$ of `meanflow_loss`.

References:
    Guo et al., "SplitMeanFlow: Interval Splitting Consistency in Few-Step Generative
    Modeling", arXiv 2507.16884. Geng et al., "Mean Flows for One-step Generative Modeling",
    arXiv 2505.13447. Zhu et al., "Noise-Started One-Step Real-World Super-Resolution via
    LR-Conditioned SplitMeanFlow and GAN Refinement", arXiv 2605.09328.
"""

import abc
import math
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

from ...core.checks import check_floating, check_in_interval, check_module, check_tuple
from ...nn import sinusoidal_embedding
from .._velocity import AbstractVelocityField

TIME_SAMPLERS = ("uniform", "logit_normal")


# --------------------------------------------------------------------------------------------
# Interfaces
# --------------------------------------------------------------------------------------------


class AbstractAverageVelocity(eqx.Module):
    """An average velocity $u(z, r, t, c)$ on one sample (t = 1 noise); vmap for batches.

    Subclasses implement ``__call__`` only. ``z`` has any shape; ``r <= t`` are scalars in
    ``[0, 1]``; the output has the shape of ``z``. A jump is ``z_r = z - (t - r) u(z, r, t, c)``.
    """

    @abc.abstractmethod
    def __call__(
        self, z: Float[Array, "*shape"], r: Any, t: Any, cond: Any = None
    ) -> Float[Array, "*shape"]:
        """Average velocity over ``[r, t]`` at ``z_t = z`` under condition ``cond``."""


class AbstractTimeEmbeddedVelocity(AbstractVelocityField):
    """A velocity field that reads time only through an embedding ``h = embed_time(t)``.

    ``v(t, z, c) = velocity_from_embedding(embed_time(t), z, c)``. This split is what lets
    `IntervalConditionedNet` add an interval branch to the time embedding.
    """

    emb_dim: eqx.AbstractVar[int]

    @abc.abstractmethod
    def embed_time(self, t: Any) -> Float[Array, " emb"]:
        """The ``(emb_dim,)`` embedding of a scalar time."""

    @abc.abstractmethod
    def velocity_from_embedding(
        self, emb: Float[Array, " emb"], z: Float[Array, " dim"], cond: Any = None
    ) -> Float[Array, " dim"]:
        """The velocity given a time embedding (possibly shifted by an interval branch)."""

    def __call__(self, t, x, args=None):
        return self.velocity_from_embedding(self.embed_time(t), x, args)


class _RawTime(AbstractTimeEmbeddedVelocity):
    """Any velocity field seen as time-embedded with the identity embedding ``h = [t]``."""

    field: AbstractVelocityField
    dim: int = eqx.field(static=True)
    emb_dim: int = eqx.field(static=True)

    def __init__(self, field: AbstractVelocityField):
        self.field = field
        self.dim = field.dim
        self.emb_dim = 1

    def embed_time(self, t):
        return jnp.reshape(jnp.asarray(t), (1,))

    def velocity_from_embedding(self, emb, z, cond=None):
        return self.field(emb[0], z, cond)


class NoiseAtOneVelocity(AbstractTimeEmbeddedVelocity):
    r"""Adapter from the library's t = 0-noise convention to the t = 1-noise one.

    A field $f$ trained by `flow_matching_loss` with ``x0`` = noise and ``x1`` = data
    ($x_s = (1 - s)\varepsilon + s x$, target $x - \varepsilon$) becomes
    $v(t, z, c) = -f(1 - t, z, c)$, the velocity of $z_t = (1 - t) x + t \varepsilon$ used by
    every mean-flow function. If $f$ is itself time-embedded, its embedding is reused (at time
    $1 - t$) so that `IntervalConditionedNet.from_velocity` can extend it.
    """

    field: AbstractVelocityField
    dim: int = eqx.field(static=True)
    emb_dim: int = eqx.field(static=True)

    def __init__(self, field: AbstractVelocityField):
        if not isinstance(field, AbstractVelocityField):
            raise TypeError(
                f"`field` must be an AbstractVelocityField, got {type(field).__name__}."
            )
        self.field = field
        self.dim = field.dim
        self.emb_dim = field.emb_dim if isinstance(field, AbstractTimeEmbeddedVelocity) else 1

    def embed_time(self, t):
        t = jnp.asarray(t)
        if isinstance(self.field, AbstractTimeEmbeddedVelocity):
            return self.field.embed_time(1 - t)
        return jnp.reshape(1 - t, (1,))

    def velocity_from_embedding(self, emb, z, cond=None):
        if isinstance(self.field, AbstractTimeEmbeddedVelocity):
            return -self.field.velocity_from_embedding(emb, z, cond)
        return -self.field(emb[0], z, cond)


class IntervalConditionedNet(AbstractAverageVelocity):
    r"""$u_\theta(z, r, t, c) = v_{\mathrm{backbone}}(h(t) + g([e(r), e(t)]), z, c)$.

    The backbone is a time-embedded velocity field (its own embedding $h$); the interval branch
    $g$ maps the sinusoidal embeddings of $r$ and $t$ through Linear, SiLU, Linear, and its
    output is added to $h(t)$. `from_velocity` zero-initialises the last layer of $g$, so the
    student starts as the teacher for every $r$ (tested). A plain
    `AbstractVelocityField` is accepted too; its "embedding" is then the scalar time itself
    (a learned time shift: little capacity, prefer a time-embedded backbone).
    """

    backbone: AbstractTimeEmbeddedVelocity
    interval: eqx.nn.MLP
    freq_dim: int = eqx.field(static=True)

    def __init__(
        self,
        backbone: AbstractVelocityField,
        interval: eqx.nn.MLP,
        freq_dim: int,
    ):
        if not isinstance(backbone, AbstractVelocityField):
            raise TypeError(
                f"`backbone` must be an AbstractVelocityField, got {type(backbone).__name__}."
            )
        if not isinstance(backbone, AbstractTimeEmbeddedVelocity):
            backbone = _RawTime(backbone)
        self.backbone = backbone
        self.interval = interval
        self.freq_dim = freq_dim

    @classmethod
    def from_velocity(
        cls,
        teacher: AbstractVelocityField,
        *,
        key: PRNGKeyArray,
        freq_dim: int = 64,
        width: int | None = None,
    ) -> "IntervalConditionedNet":
        """A student equal to ``teacher`` for every ``r``: a copy plus a zero-output branch.

        Args:
            teacher: the velocity field v(t, z, c) (t = 1 noise), time-embedded or not.
            key: PRNG key of the branch's first layer.
            freq_dim: sinusoidal features per time (even).
            width: hidden width of the branch (default: the backbone's embedding size).
        """
        if not isinstance(freq_dim, int) or freq_dim < 2 or freq_dim % 2:
            raise ValueError(f"`freq_dim` must be an even int >= 2, got {freq_dim!r}.")
        backbone = teacher if isinstance(teacher, AbstractTimeEmbeddedVelocity) else None
        emb_dim = 1 if backbone is None else backbone.emb_dim
        width = max(emb_dim, 32) if width is None else width
        dtype = jnp.zeros(()).dtype
        mlp = eqx.nn.MLP(2 * freq_dim, emb_dim, width, 1, jax.nn.silu, key=key, dtype=dtype)
        last = mlp.layers[-1]
        last = eqx.tree_at(
            lambda lin: (lin.weight, lin.bias),
            last,
            (jnp.zeros_like(last.weight), jnp.zeros_like(last.bias)),
        )
        mlp = eqx.tree_at(lambda m: m.layers[-1], mlp, last)
        return cls(teacher, mlp, freq_dim)

    def __call__(self, z, r, t, cond=None):
        r = jnp.asarray(r, z.dtype)
        t = jnp.asarray(t, z.dtype)
        feats = jnp.concatenate(
            [
                sinusoidal_embedding(1000 * r, self.freq_dim),
                sinusoidal_embedding(1000 * t, self.freq_dim),
            ]
        )
        emb = self.backbone.embed_time(t)
        emb = emb + self.interval(feats).astype(emb.dtype)
        return self.backbone.velocity_from_embedding(emb, z, cond)


# --------------------------------------------------------------------------------------------
# Closed form
# --------------------------------------------------------------------------------------------


def _check_times(r: Any, t: Any, dtype: Any, *, name_r: str = "r", name_t: str = "t"):
    r = jnp.asarray(r, dtype)
    t = jnp.asarray(t, dtype)
    if r.ndim or t.ndim:
        raise ValueError(f"`{name_r}` and `{name_t}` must be scalars, got {r.shape}, {t.shape}.")
    bad = ~((0 <= r) & (r <= t) & (t <= 1))
    t = eqx.error_if(t, bad, f"need 0 <= {name_r} <= {name_t} <= 1 (t = 1 is noise).")
    return r, t


def gaussian_average_velocity(
    z: Float[Array | np.ndarray, "*shape"],
    r: ArrayLike,
    t: ArrayLike,
    mu: ArrayLike,
    s: ArrayLike,
) -> Float[Array, "*shape"]:
    r"""Exact average velocity for data $x \mid c \sim N(\mu, \mathrm{diag}\, s^2)$.

    With $m_\tau = (1 - \tau)\mu$ and $\sigma_\tau^2 = (1 - \tau)^2 s^2 + \tau^2$ the flow map is
    $z_r = m_r + (\sigma_r / \sigma_t)(z - m_t)$, so
    $u = (z - m_r - (\sigma_r/\sigma_t)(z - m_t)) / (t - r)$. It is evaluated in the
    cancellation-free form (divide $\sigma_t^2 - \sigma_r^2$ by $t - r$ analytically)

    $$u(z, r, t) = -\mu + \frac{(t + r) - s^2 (2 - t - r)}{\sigma_t (\sigma_t + \sigma_r)}
    (z - m_t),$$

    which at $r = t$ is the velocity $v = -\mu + (\dot\sigma_t / \sigma_t)(z - m_t)$,
    $\dot\sigma_t = (t - (1 - t) s^2)/\sigma_t$: no division by $t - r$, never NaN.

    Args:
        z: the point $z_t$, any shape.
        r: start of the interval, scalar in ``[0, t]``.
        t: end of the interval, scalar in ``[r, 1]``.
        mu: data mean, broadcastable to ``z``.
        s: data standard deviation (> 0), a scalar or broadcastable to ``z``.

    Returns:
        $u(z, r, t)$ with the shape of ``z``.
    """
    z = jnp.asarray(z)
    dtype = z.dtype
    mu = jnp.asarray(mu, dtype)
    s = jnp.asarray(s, dtype)
    for name, arr in (("mu", mu), ("s", s)):
        if jnp.broadcast_shapes(arr.shape, z.shape) != z.shape:
            raise ValueError(f"`{name}` must broadcast to `z` {z.shape}, got shape {arr.shape}.")
    r, t = _check_times(r, t, dtype)
    s = eqx.error_if(s, jnp.any(~(s > 0)), "`s` (data standard deviation) must be > 0.")
    mu = jnp.broadcast_to(mu, z.shape)
    s2 = jnp.broadcast_to(s, z.shape) ** 2
    sig_t = jnp.sqrt((1 - t) ** 2 * s2 + t**2)
    sig_r = jnp.sqrt((1 - r) ** 2 * s2 + r**2)
    slope = ((t + r) - s2 * (2 - t - r)) / (sig_t * (sig_t + sig_r))
    return -mu + slope * (z - (1 - t) * mu)


class GaussianAverageVelocity(AbstractAverageVelocity):
    r"""`gaussian_average_velocity` as a model: data $x \mid c \sim N(W c + b, s^2)$.

    With ``weight=None`` the mean is ``bias`` whatever the condition; otherwise
    $\mu_c = W c + b$ (the affine-Gaussian toy of the tests).
    """

    bias: Float[Array, " dim"]
    scale: Float[Array, "..."]
    weight: Float[Array, "dim k"] | None

    def __init__(self, bias: ArrayLike, scale: ArrayLike, weight: ArrayLike | None = None):
        # Integer means are valid data: cast to the default float (never the scale to ints).
        self.bias = check_floating(bias, "bias", allow_int=True)
        self.scale = jnp.asarray(scale, self.bias.dtype)
        self.weight = None if weight is None else jnp.asarray(weight, self.bias.dtype)

    def mean(self, cond: Any = None) -> Float[Array, " dim"]:
        r"""$\mu_c$ (``bias``, plus ``weight @ cond`` when a weight is given)."""
        if self.weight is None:
            return self.bias
        return self.weight @ jnp.asarray(cond, self.bias.dtype) + self.bias

    def __call__(self, z, r, t, cond=None):
        return gaussian_average_velocity(z, r, t, self.mean(cond), self.scale)


class GaussianVelocity(AbstractVelocityField):
    """The exact velocity ``v(t, z, c) = u(z, t, t, c)`` of `GaussianAverageVelocity`."""

    average: GaussianAverageVelocity
    dim: int = eqx.field(static=True)

    def __init__(self, average: GaussianAverageVelocity):
        self.average = average
        self.dim = average.bias.shape[0]

    def __call__(self, t, x, args=None):
        return self.average(x, t, t, args)


# --------------------------------------------------------------------------------------------
# Interval splitting consistency and the two distillation losses
# --------------------------------------------------------------------------------------------


def isc_target(
    model: AbstractAverageVelocity,
    z_t: Float[Array | np.ndarray, "*shape"],
    r: ArrayLike,
    s: ArrayLike,
    t: ArrayLike,
    cond: Any = None,
) -> Float[Array, "*shape"]:
    r"""The ISC target $(1 - \lambda)\, u(z_s, r, s) + \lambda\, u(z_t, s, t)$ of one sample.

    Here $z_s = z_t - (t - s) u(z_t, s, t)$ and $\lambda = (t - s)/(t - r)$. For
    the exact $u$ this equals $u(z_t, r, t)$ (ISC); at $s = t$ or $s = r$ it equals the model's
    own $u(z_t, r, t)$. One sample; no stop-gradient (`splitmeanflow_loss` wraps the whole
    target in one).

    Args:
        model: the average velocity.
        z_t: the point at time ``t``.
        r: interval start, ``0 <= r <= s``.
        s: split point, ``r <= s <= t``.
        t: interval end, ``t <= 1``; ``t = r`` returns ``u(z_t, t, t)``.
        cond: the model's condition.
    """
    z_t = jnp.asarray(z_t)
    r, s = _check_times(r, s, z_t.dtype, name_r="r", name_t="s")
    s, t = _check_times(s, t, z_t.dtype, name_r="s", name_t="t")
    u_st = model(z_t, s, t, cond)
    z_s = z_t - (t - s) * u_st
    u_rs = model(z_s, r, s, cond)
    width = t - r
    lam = jnp.where(width > 0, (t - s) / jnp.where(width > 0, width, 1), 1)
    return (1 - lam) * u_rs + lam * u_st


def _check_batch(batch: Any, name: str = "batch") -> tuple[Array, Any]:
    x, cond = check_tuple(batch, 2, name, layout="(x, c) (c may be None)")
    x = jnp.asarray(x)
    if x.ndim < 2 or x.shape[0] < 1:
        raise ValueError(
            f"`x` must have shape (B, ...) with the batch axis first and B >= 1, got {x.shape}."
        )
    if cond is not None:
        lead = {np.shape(leaf)[0] if np.ndim(leaf) else None for leaf in jax.tree.leaves(cond)}
        if lead != {x.shape[0]}:
            raise ValueError(
                f"the condition must share the batch size {x.shape[0]} of `x` on its leading "
                f"axis, got leading sizes {sorted(map(str, lead))}."
            )
    return x, cond


def _sample_times(key: PRNGKeyArray, shape: tuple[int, ...], sampler: str, dtype, margin: float):
    if sampler == "uniform":
        return jr.uniform(key, shape, dtype, margin, 1 - margin)
    return jnp.clip(jax.nn.sigmoid(jr.normal(key, shape, dtype)), margin, 1 - margin)


def _check_common(flow_ratio: Any, time_sampler: Any) -> None:
    if not isinstance(flow_ratio, int | float) or isinstance(flow_ratio, bool):
        raise TypeError(f"`flow_ratio` must be a Python float, got {type(flow_ratio).__name__}.")
    if not (0.0 <= flow_ratio <= 1.0):
        raise ValueError(f"`flow_ratio` must lie in [0, 1], got {flow_ratio}.")
    if time_sampler not in TIME_SAMPLERS:
        raise ValueError(f"`time_sampler` must be one of {TIME_SAMPLERS}, got {time_sampler!r}.")


def _guided(teacher: AbstractVelocityField, cfg_scale: float):
    """``v^w(t, z, c) = v(t, z, c) + w (v(t, z, c) - v(t, z, 0))`` (w = 0: the teacher)."""

    def velocity(t, z, cond):
        v = teacher(t, z, cond)
        if cfg_scale == 0.0 or cond is None:
            return v
        v_null = teacher(t, z, jax.tree.map(jnp.zeros_like, cond))
        return v + cfg_scale * (v - v_null)

    return velocity


def _interval_times(key, num, dtype, sampler, margin, min_interval, full_ratio=0.0):
    """Interval ends: r the min, t the max of two draws, with t - r >= ``min_interval``.

    The last ``round(full_ratio * num)`` intervals are the one-step interval (0, 1) itself.
    """
    draws = _sample_times(key, (2, num), sampler, dtype, margin)
    r = jnp.minimum(draws[0], draws[1])
    r = jnp.minimum(r, 1 - margin - min_interval)
    t = jnp.maximum(jnp.maximum(draws[0], draws[1]), r + min_interval)
    num_full = int(round(full_ratio * num))
    if num_full:
        full = jnp.arange(num) >= num - num_full
        r, t = jnp.where(full, 0, r).astype(dtype), jnp.where(full, 1, t).astype(dtype)
    return r, t


def _check_margins(time_margin: Any, min_interval: Any) -> None:
    """Times are clipped to ``[margin, 1 - margin]`` and intervals kept ``>= min_interval``: a
    negative or too large value would silently move the times outside ``[0, 1]``.
    """
    check_in_interval(time_margin, "time_margin", 0.0, 0.5, closed=(True, False))
    high = 1.0 - 2 * float(time_margin)
    check_in_interval(min_interval, "min_interval", 0.0, high, closed=(True, False))


def _check_full_ratio(full_interval_ratio: Any) -> None:
    if not isinstance(full_interval_ratio, int | float) or isinstance(full_interval_ratio, bool):
        raise TypeError(
            "`full_interval_ratio` must be a Python float, got "
            f"{type(full_interval_ratio).__name__}."
        )
    if not 0.0 <= full_interval_ratio <= 1.0:
        raise ValueError(f"`full_interval_ratio` must lie in [0, 1], got {full_interval_ratio}.")


def splitmeanflow_loss(
    student: AbstractAverageVelocity,
    batch: tuple[Array, Any],
    key: PRNGKeyArray,
    *,
    teacher: AbstractVelocityField | None = None,
    flow_ratio: float = 0.5,
    time_sampler: str = "logit_normal",
    cfg_scale: float = 0.0,
    lambda_range: tuple[float, float] = (0.05, 0.95),
    time_margin: float = 1e-4,
    min_interval: float = 1e-3,
    full_interval_ratio: float = 0.0,
    target_model: AbstractAverageVelocity | None = None,
) -> Float[Array, ""]:
    r"""SplitMeanFlow distillation loss: a boundary anchor plus interval splitting consistency.

    For a batch of pairs $(x, c)$, $\varepsilon \sim N(0, I)$, $z_t = (1 - t)x + t\varepsilon$:

    - the first ``round(flow_ratio * B)`` samples take the **boundary** step:
      $\|u_\theta(z_t, t, t, c) - \mathrm{sg}\, v^w_\phi(z_t, t, c)\|^2$, with the teacher
      under classifier-free guidance of scale ``cfg_scale``
      ($v^w = v + w(v - v_{\varnothing})$, the null condition being zeros);
    - the others take the **ISC** step: $r < t$ the min/max of two draws,
      $\lambda \sim U(\text{lambda\_range})$, $s = (1 - \lambda)t + \lambda r$ and
      $\|u_\theta(z_t, r, t, c) - \mathrm{sg}[(1 - \lambda) u_\theta(z_s, r, s, c)
      + \lambda u_\theta(z_t, s, t, c)]\|^2$, the whole target under `lax.stop_gradient`.

    The split is deterministic (stratified) rather than a coin per sample: same expectation,
    lower variance, and each half only pays for its own network calls. No condition dropout:
    the teacher's guidance, if any, is baked into the target. The squared error is summed over
    the coordinates of a sample and averaged over the batch.

    Args:
        student: the average velocity $u_\theta$ being trained.
        batch: ``(x, c)``: data ``(B, ...)`` and conditions with leading axis ``B`` (or None).
        key: PRNG key of the noise, the times and the split points.
        teacher: the frozen velocity $v_\phi$, called ``teacher(t, z, c)`` in the same
            convention (t = 1 noise; wrap library-convention fields in `NoiseAtOneVelocity`).
            ``None`` only with ``flow_ratio = 0`` (pure ISC, e.g. in tests). Keyword-only, so
            that ``functools.partial(splitmeanflow_loss, teacher=teacher)`` is a loss for
            `jaxgen.core.fit`.
        flow_ratio: fraction $p \in [0, 1]$ of boundary samples (default 0.5; too small collapses).
        time_sampler: ``"logit_normal"`` (paper) or ``"uniform"``.
        cfg_scale: guidance scale $w \ge 0$ baked into the teacher target.
        lambda_range: range of $\lambda$ inside ``[0, 1]``; at 0 or 1 the loss is exactly 0.
        time_margin: times are clipped to ``[margin, 1 - margin]``.
        min_interval: least $t - r$ of an ISC sample.
        full_interval_ratio: fraction of the ISC samples whose interval is the one-step
            interval $(r, t) = (0, 1)$ itself (so $z_t = \varepsilon$) instead of a draw. The
            paper's recipe is 0 (the default): with min/max draws the corner $(0, 1)$ that
            one-step sampling queries has vanishing density and is reached only by
            extrapolation (0.25 cuts the one-step digits-FD gap to the
            Euler-50 teacher from 1.6x to 1.1x).
        target_model: the model that computes the ISC target (default: ``student`` itself;
            e.g. an EMA copy). The target is under stop-gradient either way, so the gradient
            is the same as with a frozen copy of the student (tested).

    Returns:
        The scalar loss.

    References:
        Guo et al., arXiv 2507.16884 (Algorithm 1); Zhu et al., arXiv 2605.09328.
    """
    check_module(student, AbstractAverageVelocity, "student")
    if teacher is not None:
        check_module(teacher, AbstractVelocityField, "teacher")
    if target_model is not None:
        check_module(target_model, AbstractAverageVelocity, "target_model")
    x, cond = _check_batch(batch)
    _check_common(flow_ratio, time_sampler)
    _check_full_ratio(full_interval_ratio)
    _check_margins(time_margin, min_interval)
    lo, hi = lambda_range
    if not 0.0 <= lo <= hi <= 1.0:
        raise ValueError(f"`lambda_range` must satisfy 0 <= lo <= hi <= 1, got {lambda_range}.")
    if cfg_scale < 0:
        raise ValueError(f"`cfg_scale` must be >= 0, got {cfg_scale}.")
    num = x.shape[0]
    num_boundary = int(round(flow_ratio * num))
    if teacher is None and num_boundary > 0:
        raise ValueError("`teacher` is None but the boundary step needs it: set flow_ratio=0.")
    x = eqx.error_if(x, jnp.any(~jnp.isfinite(x)), "`x` contains NaN or inf.")
    dtype = x.dtype
    noise_key, time_key, interval_key, lam_key = jr.split(key, 4)
    eps = jr.normal(noise_key, x.shape, dtype)

    def cond_part(sl):
        return None if cond is None else jax.tree.map(lambda c: c[sl], cond)

    def interpolate(x_, eps_, t_):
        expand = t_.reshape((-1,) + (1,) * (x_.ndim - 1))
        return (1 - expand) * x_ + expand * eps_

    cond_axis = None if cond is None else 0
    # the targets of the two halves, then ONE batched prediction u(z_t, r, t) (r = t on the
    # boundary half): a single large call is cheaper than two half-batch calls
    zs, rs, ts, targets = [], [], [], []
    if num_boundary > 0:
        sl = slice(0, num_boundary)
        t_b = _sample_times(time_key, (num_boundary,), time_sampler, dtype, time_margin)
        z_b = interpolate(x[sl], eps[sl], t_b)
        velocity = _guided(teacher, cfg_scale)
        targets.append(jax.vmap(velocity, in_axes=(0, 0, cond_axis))(t_b, z_b, cond_part(sl)))
        zs.append(z_b), rs.append(t_b), ts.append(t_b)
    num_isc = num - num_boundary
    if num_isc > 0:
        sl = slice(num_boundary, num)
        r, t = _interval_times(
            interval_key,
            num_isc,
            dtype,
            time_sampler,
            time_margin,
            min_interval,
            full_interval_ratio,
        )
        lam = jr.uniform(lam_key, (num_isc,), dtype, lo, hi)
        s = (1 - lam) * t + lam * r
        z_t = interpolate(x[sl], eps[sl], t)
        targets.append(
            jax.vmap(_isc_unchecked, in_axes=(None, 0, 0, 0, 0, cond_axis))(
                student if target_model is None else target_model, z_t, r, s, t, cond_part(sl)
            )
        )
        zs.append(z_t), rs.append(r), ts.append(t)
    target = jax.lax.stop_gradient(jnp.concatenate(targets))
    pred = jax.vmap(student, in_axes=(0, 0, 0, cond_axis))(
        jnp.concatenate(zs), jnp.concatenate(rs), jnp.concatenate(ts), cond
    )
    return jnp.sum((pred - target) ** 2) / num


def _isc_unchecked(model, z_t, r, s, t, cond):
    """`isc_target` without the range checks (times already drawn inside [0, 1])."""
    u_st = model(z_t, s, t, cond)
    z_s = z_t - (t - s) * u_st
    u_rs = model(z_s, r, s, cond)
    lam = (t - s) / (t - r)
    return (1 - lam) * u_rs + lam * u_st


def meanflow_loss(
    model: AbstractAverageVelocity,
    batch: tuple[Array, Any],
    key: PRNGKeyArray,
    *,
    teacher: AbstractVelocityField | None = None,
    flow_ratio: float = 0.5,
    time_sampler: str = "logit_normal",
    time_margin: float = 1e-4,
    adaptive_p: float = 1.0,
    adaptive_c: float = 1e-3,
    full_interval_ratio: float = 0.0,
) -> Float[Array, ""]:
    r"""MeanFlow loss (JVP baseline): regress $u_\theta$ on the MeanFlow identity.

    $u_{\mathrm{tgt}} = v - (t - r)\,(\partial_z u_\theta\, v + \partial_t u_\theta)$, the total
    derivative computed by one `jax.jvp` of $(z, t) \mapsto u_\theta(z, r, t, c)$ along
    $(v, 1)$, under stop-gradient; $v = \varepsilon - x$ (conditional velocity), or the
    teacher's $v_\phi(t, z_t, c)$ when ``teacher`` is given (distillation). The first
    ``round(flow_ratio * B)`` samples use $r = t$ (plain flow matching), the others $r < t$
    drawn like `splitmeanflow_loss`. Each sample's squared error $\Delta$ is weighted by
    $\mathrm{sg}[(\Delta + c)^{-p}]$, the paper's adaptive loss weighting (p = 1 is its default;
    p = 0 is the plain squared error): without it the JVP target makes training unstable.
    Distilling a teacher-initialised student, p = 0
    diverges (the target's $\partial_t u$ term is ~4x $|v|$ at init and feeds back), p = 1
    flattens every sample's loss to ~1 and stalls, and p = 0.5 (also in the paper's sweep, a
    unit-norm gradient per sample) trains.

    Args:
        model: the average velocity being trained.
        batch: ``(x, c)`` with the batch axis first.
        key: PRNG key.
        teacher: optional frozen velocity field (t = 1 noise), called ``teacher(t, z, c)``.
        flow_ratio: fraction of ``r = t`` samples.
        time_sampler: ``"logit_normal"`` or ``"uniform"``.
        time_margin: times are clipped to ``[margin, 1 - margin]``.
        adaptive_p: power $p \ge 0$ of the adaptive weight.
        adaptive_c: its offset $c > 0$.
        full_interval_ratio: fraction of the $r < t$ samples on the one-step interval
            $(0, 1)$, as in `splitmeanflow_loss`.

    Returns:
        The scalar loss.

    References:
        Geng et al., "Mean Flows for One-step Generative Modeling", arXiv 2505.13447, eq. (6).
    """
    x, cond = _check_batch(batch)
    _check_common(flow_ratio, time_sampler)
    _check_full_ratio(full_interval_ratio)
    _check_margins(time_margin, 1e-3)
    if adaptive_p < 0 or adaptive_c <= 0:
        raise ValueError(
            f"need `adaptive_p` >= 0 and `adaptive_c` > 0, got {adaptive_p}, {adaptive_c}."
        )
    x = eqx.error_if(x, jnp.any(~jnp.isfinite(x)), "`x` contains NaN or inf.")
    num, dtype = x.shape[0], x.dtype
    num_boundary = int(round(flow_ratio * num))
    noise_key, time_key, interval_key = jr.split(key, 3)
    eps = jr.normal(noise_key, x.shape, dtype)
    t_b = _sample_times(time_key, (num,), time_sampler, dtype, time_margin)
    # the last round(ratio * (B - boundary)) samples (all on the r < t side) get (0, 1)
    full = full_interval_ratio * (num - num_boundary) / num
    r_i, t_i = _interval_times(interval_key, num, dtype, time_sampler, time_margin, 1e-3, full)
    is_boundary = jnp.arange(num) < num_boundary
    t = jnp.where(is_boundary, t_b, t_i)
    r = jnp.where(is_boundary, t_b, r_i)
    expand = t.reshape((-1,) + (1,) * (x.ndim - 1))
    z_t = (1 - expand) * x + expand * eps
    if teacher is None:
        v = eps - x
    else:
        v = jax.lax.stop_gradient(
            jax.vmap(teacher, in_axes=(0, 0, None if cond is None else 0))(t, z_t, cond)
        )

    def one(z, r_, t_, v_, c):
        u, du_dt = jax.jvp(lambda zz, tt: model(zz, r_, tt, c), (z, t_), (v_, jnp.ones_like(t_)))
        target = jax.lax.stop_gradient(v_ - (t_ - r_) * du_dt)
        err = jnp.sum((u - target) ** 2)
        if adaptive_p == 0:
            return err
        return err * jax.lax.stop_gradient((err + adaptive_c) ** -adaptive_p)

    losses = jax.vmap(one, in_axes=(0, 0, 0, 0, None if cond is None else 0))(z_t, r, t, v, cond)
    return jnp.mean(losses)


# --------------------------------------------------------------------------------------------
# Sampling
# --------------------------------------------------------------------------------------------


def cosine_time_grid(num_steps: int) -> np.ndarray:
    r"""The released code's grid $\tau_k = \frac12(1 - \cos(\pi k / N))$, run from 1 down to 0.

    Returns a numpy array of ``num_steps + 1`` times ``(1, ..., 0)``.
    """
    if not isinstance(num_steps, int) or isinstance(num_steps, bool) or num_steps < 1:
        raise ValueError(f"`num_steps` must be an int >= 1, got {num_steps!r}.")
    k = np.arange(num_steps, -1, -1)
    grid = 0.5 * (1 - np.cos(math.pi * k / num_steps))
    grid[0], grid[-1] = 1.0, 0.0
    return grid


def _check_ts(ts: Any, dtype: Any) -> Array:
    if isinstance(ts, tuple | list | np.ndarray):
        arr = np.asarray(ts, dtype=np.float64)
        if arr.ndim != 1 or arr.shape[0] < 2:
            raise ValueError(f"`ts` must be 1-D with >= 2 times, got shape {arr.shape}.")
        if arr[0] != 1.0 or arr[-1] != 0.0 or np.any(np.diff(arr) >= 0):
            raise ValueError(f"`ts` must decrease strictly from 1 to 0, got {arr.tolist()}.")
        return jnp.asarray(arr, dtype)
    ts = jnp.asarray(ts, dtype)
    if ts.ndim != 1 or ts.shape[0] < 2:
        raise ValueError(f"`ts` must be 1-D with >= 2 times, got shape {ts.shape}.")
    bad = (ts[0] != 1) | (ts[-1] != 0) | jnp.any(jnp.diff(ts) >= 0)
    return eqx.error_if(ts, bad, "`ts` must decrease strictly from 1 to 0.")


def sample_average_velocity(
    key: PRNGKeyArray | None,
    model: AbstractAverageVelocity,
    cond: Any,
    shape: tuple[int, ...],
    *,
    ts: Any = (1.0, 0.0),
    z1: Float[Array | np.ndarray, "*shape"] | None = None,
) -> Float[Array, "*shape"]:
    r"""One sample by jumps $z_{\tau_{k+1}} = z_{\tau_k} - (\tau_k - \tau_{k+1}) u(z_{\tau_k},
    \tau_{k+1}, \tau_k, c)$ along ``ts``.

    ``ts = (1, 0)`` is one step ($\hat x = \varepsilon - u(\varepsilon, 0, 1, c)$);
    `cosine_time_grid` gives the released code's K-step grid. The start is $z_1 \sim N(0, I)$,
    or ``z1`` when given (``z1 = c``: the LR-start ablation). vmap over keys for several seeds.

    Args:
        key: PRNG key of the start noise (unused, may be None, when ``z1`` is given).
        model: the average velocity.
        cond: its condition for this sample.
        shape: the sample's shape.
        ts: times decreasing strictly from 1 to 0.
        z1: optional start point of shape ``shape``.

    Returns:
        The sample at t = 0, shape ``shape``.
    """
    if z1 is None:
        if key is None:
            raise ValueError("`key` is needed to draw the start noise (or give `z1`).")
        z = jr.normal(key, tuple(shape))
    else:
        z = jnp.asarray(z1)
        if z.shape != tuple(shape):
            raise ValueError(f"`z1` must have shape {tuple(shape)}, got {z.shape}.")
    z = eqx.error_if(z, jnp.any(~jnp.isfinite(z)), "`z1` contains NaN or inf.")
    ts = _check_ts(ts, z.dtype)

    def jump(z, pair):
        t, r = pair
        return z - (t - r) * model(z, r, t, cond), None

    z, _ = jax.lax.scan(jump, z, (ts[:-1], ts[1:]))
    return z
