r"""NTM predictors: a diagonal Gaussian $p_P(u_s \mid u_t, y) = N(\mu_P, \sigma_P^2)$.

A predictor reads the latent $u_t$ of the noisier level $t$, the target level $s < t$, the number
of steps $T$ of the trajectory and an optional class $y$, and returns ``(mu, log_sigma)`` of the
latent $u_s$, both of shape ``(L, c)``. Time convention: t = 1 is noise.

**(a jaxgen choice)** `MLPPredictor` and `TransformerPredictor` are parametrised around the Gaussian
posterior of Prop. 2: the network outputs a clean-data guess $\hat u_0$ and a log-scale residual
$\delta$, and

$$\mu_P = A(t, s)\, u_t + B(t, s)\, \hat u_0, \qquad
\log \sigma_P = \log \max(C(t, s), 10^{-3}) + \delta,$$

so a zero-initialised head starts at the "$\hat x_0 = 0$" Gaussian-diffusion step and the network
only learns residuals (with `IdentityTransporter` this is exactly Gaussian diffusion with learned
variances). Classes: ``y`` is an integer in ``[0, num_classes]``; ``y = num_classes`` is the null
("dropped") condition used by classifier-free guidance. With ``num_classes = 0`` pass ``y=None``.

References:
    Gu et al., "Normalizing Trajectory Models", arXiv 2605.08078 (2026), Secs. 3.1-3.3.
"""

import abc
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, ArrayLike, Float, Int, PRNGKeyArray

from ...nn import RMSNorm, TimeEmbedding, TransformerBlock, init_normal, sinusoidal_embedding
from .._velocity import AbstractVelocityField
from ._closed import reverse_posterior_coeffs
from ._transport import (
    _check_sizes,
    _check_state,
    _positive_int,
    _scalar,
    _transformer_stack,
)

#: Floor of the posterior standard deviation C(t, s) under the log (C = 0 at s = 0).
SIGMA_FLOOR = 1e-3
#: Soft clamp of the log-scale residual delta.
DELTA_CLAMP = 8.0
#: Sinusoidal features per scalar input of the MLP networks.
NUM_FEATURES = 16


def check_class(y: Any, num_classes: int) -> Int[Array, ""] | None:
    """Validate a class label against ``num_classes`` (``y = num_classes`` is the null class)."""
    if num_classes == 0:
        if y is not None:
            raise ValueError("this model is unconditional (num_classes=0): pass `y=None`.")
        return None
    if y is None:
        raise ValueError(
            f"this model is class-conditional (num_classes={num_classes}): pass an integer `y` "
            f"in [0, {num_classes}] ({num_classes} = no condition)."
        )
    y = jnp.asarray(y)
    if y.ndim or not jnp.issubdtype(y.dtype, jnp.integer):
        raise TypeError(f"`y` must be an integer scalar class id, got {y.dtype}{list(y.shape)}.")
    return eqx.error_if(
        y, (y < 0) | (y > num_classes), f"class id `y` must lie in [0, {num_classes}]."
    )


def _features(t: Array, scale: float, dtype: Any) -> Array:
    return sinusoidal_embedding(jnp.asarray(t, dtype) * scale, NUM_FEATURES)


def posterior_parametrisation(
    u_t: Array, t: Array, s: Array, x0_hat: Array, delta: Array
) -> tuple[Array, Array]:
    """``(A u_t + B x0_hat, log max(C, floor) + clamp(delta))`` (see the module docstring)."""
    a, b, c = reverse_posterior_coeffs(t, s)
    mu = a.astype(u_t.dtype) * u_t + b.astype(u_t.dtype) * x0_hat
    base = jnp.log(jnp.maximum(c, SIGMA_FLOOR)).astype(u_t.dtype)
    return mu, base + DELTA_CLAMP * jnp.tanh(delta / DELTA_CLAMP)


class AbstractGaussianPredictor(eqx.Module):
    """``(u_t, t, s, y, T) -> (mu, log_sigma)`` of ``u_s`` of one state ``(L, c)`` (vmap)."""

    seq_len: eqx.AbstractVar[int]
    channels: eqx.AbstractVar[int]
    num_classes: eqx.AbstractVar[int]

    @abc.abstractmethod
    def __call__(
        self,
        u_t: Float[Array, "L c"],
        t: Float[ArrayLike, ""],
        s: Float[ArrayLike, ""],
        y: Int[ArrayLike, ""] | None,
        T: Any,
    ) -> tuple[Float[Array, "L c"], Float[Array, "L c"]]:
        """Mean and log standard deviation of ``u_s`` given ``u_t`` (``0 <= s < t <= 1``)."""


class ConditionedMLP(eqx.Module):
    """``MLP([x.reshape(-1), time features..., class embedding])`` with a zero-initialised output.

    The trunk of `MLPPredictor` and `Denoiser`: each time enters as `_features` of width
    ``NUM_FEATURES``, the class (``num_classes > 0``) as a learned embedding of that width.
    """

    mlp: eqx.nn.MLP
    class_embedding: Float[Array, "classes emb"] | None
    num_classes: int = eqx.field(static=True)

    def __init__(
        self, in_size: int, num_times: int, out_size: int, width: int, depth: int,
        num_classes: int, *, key: PRNGKeyArray,
    ):  # fmt: skip
        if not isinstance(num_classes, int) or isinstance(num_classes, bool) or num_classes < 0:
            raise ValueError(f"`num_classes` must be an int >= 0, got {num_classes!r}.")
        k_mlp, k_emb = jr.split(key)
        emb = NUM_FEATURES if num_classes else 0
        size = in_size + num_times * NUM_FEATURES + emb
        mlp = eqx.nn.MLP(size, out_size, width, depth, jax.nn.silu, key=k_mlp)
        self.mlp = eqx.tree_at(
            lambda m: (m.layers[-1].weight, m.layers[-1].bias), mlp, replace_fn=jnp.zeros_like
        )
        self.class_embedding = (
            jr.normal(k_emb, (num_classes + 1, NUM_FEATURES)) if num_classes else None
        )
        self.num_classes = num_classes

    def __call__(self, x: Array, time_features: list[Array], y: Any) -> Array:
        """The MLP output ``(out_size,)`` for one state ``x``, its time features and class."""
        y = check_class(y, self.num_classes)
        parts = [x.reshape(-1), *time_features]
        if self.class_embedding is not None:
            parts.append(self.class_embedding[y].astype(x.dtype))
        return self.mlp(jnp.concatenate(parts))


class MLPPredictor(AbstractGaussianPredictor):
    """MLP on ``[u_t, features(t), features(s), features(T), class embedding]`` (2-D toys, digits).

    Outputs ``(x0_hat, delta)`` in the posterior parametrisation (last layer zero-initialised).
    """

    net: ConditionedMLP
    seq_len: int = eqx.field(static=True)
    channels: int = eqx.field(static=True)

    def __init__(
        self,
        seq_len: int,
        channels: int,
        *,
        width: int = 128,
        depth: int = 3,
        num_classes: int = 0,
        key: PRNGKeyArray,
    ):
        """Build the MLP (``depth`` hidden layers of ``width``, SiLU).

        Args:
            seq_len: tokens ``L``.
            channels: channels per token ``c``.
            width: hidden width.
            depth: hidden layers.
            num_classes: number of classes (0: unconditional, ``y=None``).
            key: PRNG key.
        """
        _check_sizes(seq_len=seq_len, channels=channels, width=width, depth=depth)
        dim = seq_len * channels
        self.net = ConditionedMLP(dim, 3, 2 * dim, width, depth, num_classes, key=key)
        self.seq_len, self.channels = seq_len, channels

    @property
    def num_classes(self) -> int:
        """Number of classes (0: unconditional)."""
        return self.net.num_classes

    def __call__(self, u_t, t, s, y, T):
        _check_state(u_t, self.seq_len, self.channels, "u_t")
        dtype = u_t.dtype
        t, s, T = _scalar(t, dtype), _scalar(s, dtype, "s"), _scalar(T, dtype, "T")
        times = [_features(t, 1000.0, dtype), _features(s, 1000.0, dtype), _features(T, 1.0, dtype)]
        out = self.net(u_t, times, y)
        x0_hat, delta = (p.reshape(u_t.shape) for p in jnp.split(out, 2))
        return posterior_parametrisation(u_t, t, s, x0_hat, delta)


class TransformerPredictor(AbstractGaussianPredictor):
    """Deep non-causal transformer (`jaxgen.nn.TransformerBlock`, rotary positions).

    ``h = W u_t + e(t) + e(s) + e(T) + e(y)``, every block modulated by the same embedding; a
    zero-initialised linear head gives ``(x0_hat, delta)`` per token (posterior parametrisation).
    """

    in_proj: eqx.nn.Linear
    blocks: tuple[TransformerBlock, ...]
    norm: RMSNorm
    head: eqx.nn.Linear
    t_embedding: TimeEmbedding
    s_embedding: TimeEmbedding
    steps_embedding: TimeEmbedding
    class_embedding: Float[Array, "classes width"] | None
    seq_len: int = eqx.field(static=True)
    channels: int = eqx.field(static=True)
    num_classes: int = eqx.field(static=True)

    def __init__(
        self,
        seq_len: int,
        channels: int,
        *,
        width: int = 128,
        depth: int = 4,
        num_heads: int = 4,
        num_classes: int = 0,
        key: PRNGKeyArray,
    ):
        """Build ``depth`` bidirectional blocks of ``width`` channels and ``num_heads`` heads."""
        _check_sizes(
            seq_len=seq_len, channels=channels, width=width, depth=depth, num_heads=num_heads
        )
        if not isinstance(num_classes, int) or num_classes < 0:
            raise ValueError(f"`num_classes` must be an int >= 0, got {num_classes!r}.")
        keys = jr.split(key, depth + 6)
        self.in_proj = eqx.nn.Linear(channels, width, key=keys[0])
        self.blocks = _transformer_stack(width, num_heads, keys[6:], depth=depth)
        self.norm = RMSNorm(width)
        head = eqx.nn.Linear(width, 2 * channels, key=keys[1])
        self.head = eqx.tree_at(lambda m: (m.weight, m.bias), head, replace_fn=jnp.zeros_like)
        self.t_embedding = TimeEmbedding(width, key=keys[2])
        self.s_embedding = TimeEmbedding(width, key=keys[3])
        self.steps_embedding = TimeEmbedding(width, scale=1.0, key=keys[4])
        self.class_embedding = (
            init_normal(keys[5], (num_classes + 1, width), std=1.0) if num_classes else None
        )
        self.seq_len, self.channels, self.num_classes = seq_len, channels, num_classes

    def __call__(self, u_t, t, s, y, T):
        _check_state(u_t, self.seq_len, self.channels, "u_t")
        dtype = u_t.dtype
        t, s, T = _scalar(t, dtype), _scalar(s, dtype, "s"), _scalar(T, dtype, "T")
        y = check_class(y, self.num_classes)
        cond = self.t_embedding(t) + self.s_embedding(s) + self.steps_embedding(T)
        if self.class_embedding is not None:
            cond = cond + self.class_embedding[y]
        cond = cond.astype(dtype)
        h = jax.vmap(self.in_proj)(u_t).astype(dtype) + cond[None]
        for block in self.blocks:
            h, _ = block(h, cond, causal=False)
        out = jax.vmap(lambda v: self.head(self.norm(v)))(h)
        x0_hat, delta = out[:, : self.channels], out[:, self.channels :]
        return posterior_parametrisation(u_t, t, s, x0_hat, delta)


def velocity_to_x0(field: AbstractVelocityField, u_t: Array, t: Array, args: Any = None) -> Array:
    r"""Clean-data guess of a flow-matching field in jaxgen's convention, at NTM level ``t``.

    jaxgen's velocity fields run from noise at $\tau = 0$ to data at $\tau = 1$
    ($X_\tau = (1 - \tau) \varepsilon + \tau x_0$), so $\tau = 1 - t$ and
    $\hat x_0 = u_t + t\, v(1 - t, u_t)$ ($\hat u_0 = u_t - t v_{NTM}$, $v_{NTM} = -v$).
    """
    flat = u_t.reshape(-1)
    v = field(1 - t, flat, args)
    return (flat + t * v).reshape(u_t.shape)


class PosteriorResidualPredictor(AbstractGaussianPredictor):
    r"""Finetuning predictor around a pretrained flow-matching field.

    $\mu_P = A u_t + B \hat u_0$ with $\hat u_0 = u_t + t\, v(1 - t, u_t)$ from the ``backbone``
    (a jaxgen velocity field on the flattened state, noise at its $\tau = 0$: see
    `velocity_to_x0`), and $\sigma_P = C \exp(\delta\sigma)$ with $\delta\sigma$ a small MLP whose
    output layer is zero-initialised: at initialisation (with `IdentityTransporter`) the NTM is
    exactly the ancestral sampler of the pretrained field's Gaussian posterior. A class-conditional
    backbone (``cond_dim = num_classes``) gets the one-hot class through ``args`` (zeros for the
    null class ``y = num_classes``), as `flow_matching_loss` trains it.
    """

    backbone: AbstractVelocityField
    sigma_net: eqx.nn.MLP
    seq_len: int = eqx.field(static=True)
    channels: int = eqx.field(static=True)
    num_classes: int = eqx.field(static=True)

    def __init__(
        self,
        backbone: AbstractVelocityField,
        *,
        key: PRNGKeyArray,
        seq_len: int | None = None,
        width: int = 64,
        num_classes: int = 0,
    ):
        """Wrap ``backbone`` (its ``dim`` = ``seq_len * channels``).

        Args:
            backbone: a pretrained velocity field (``dim`` = flattened state size).
            key: PRNG key of the log-scale residual network.
            seq_len: tokens ``L`` (default ``backbone.dim``, one channel per token).
            width: hidden width of the residual network.
            num_classes: classes of a conditional backbone (0: unconditional).
        """
        if not isinstance(backbone, AbstractVelocityField):
            raise TypeError(f"`backbone` must be an AbstractVelocityField, got {type(backbone)}.")
        dim = backbone.dim
        seq_len = dim if seq_len is None else _positive_int("seq_len", seq_len)
        if dim % seq_len:
            raise ValueError(f"backbone dim {dim} is not divisible by `seq_len` = {seq_len}.")
        self.backbone = backbone
        mlp = eqx.nn.MLP(dim + 2 * NUM_FEATURES, dim, width, 1, jax.nn.silu, key=key)
        self.sigma_net = eqx.tree_at(
            lambda m: (m.layers[-1].weight, m.layers[-1].bias), mlp, replace_fn=jnp.zeros_like
        )
        self.seq_len, self.channels, self.num_classes = seq_len, dim // seq_len, num_classes

    def __call__(self, u_t, t, s, y, T):
        _check_state(u_t, self.seq_len, self.channels, "u_t")
        dtype = u_t.dtype
        t, s = _scalar(t, dtype), _scalar(s, dtype, "s")
        y = check_class(y, self.num_classes)
        args = None
        if y is not None:
            args = jax.nn.one_hot(y, self.num_classes + 1, dtype=dtype)[: self.num_classes]
        x0_hat = velocity_to_x0(self.backbone, u_t, t, args)
        a, b, c = reverse_posterior_coeffs(t, s)
        mu = a.astype(dtype) * u_t + b.astype(dtype) * x0_hat
        feats = jnp.concatenate(
            [u_t.reshape(-1), _features(t, 1000.0, dtype), _features(s, 1000.0, dtype)]
        )
        delta = self.sigma_net(feats).reshape(u_t.shape)
        return mu, jnp.log(jnp.maximum(c, SIGMA_FLOOR)).astype(dtype) + delta
