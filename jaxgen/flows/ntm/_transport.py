r"""NTM transporters: invertible, time-conditioned maps $u = f_T(x, t)$ of one state ``(L, c)``.

A transporter maps a state of $L$ tokens with $c$ channels to a latent of the same shape, with a
tractable log-determinant. NTM uses one transporter, shared by every level of a trajectory, and
only its Jacobian at the *target* level enters a step's density. Time convention:
t = 1 is noise (see `ntm_schedule`); at $t \geq 1 - 10^{-6}$ a transporter is the identity.

`TarFlowTransporter` stacks shallow TarFlow blocks (Zhai et al. 2024): block $\ell$ reads the
tokens in raster or reversed order and applies the affine autoregressive map

$$z_n = (x_n - \mu_\ell(x_{<n}, t, T)) / \sigma_\ell(x_{<n}, t, T), \qquad
\log |\det \partial z / \partial x| = -\textstyle\sum_{n, c} \log \sigma_\ell,$$

with $\log \sigma = 3 \tanh(a / 3)$ (soft clamp). Strict causality comes from a start token:
the conditioner reads the inputs shifted right by one, so token $n$'s parameters see only
$x_{<n}$. The inverse is sequential: $L$ conditioner passes, after the $k$-th of which the first
$k$ tokens are exact.

References:
    Gu et al., "Normalizing Trajectory Models", arXiv 2605.08078 (2026), Sec. 3.2.
    Zhai et al., "Normalizing Flows are Capable Generative Models", arXiv 2412.06329 (2024).
    Germain et al., "MADE: Masked Autoencoder for Distribution Estimation", ICML 2015.
"""

import abc
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

from ...nn import RMSNorm, TimeEmbedding, TransformerBlock, init_normal
from ._closed import T_ONE_EPS

CONDITIONERS = ("made", "transformer")
#: Soft clamp of the log-scales: log sigma = LOG_SCALE_CLAMP * tanh(raw / LOG_SCALE_CLAMP).
LOG_SCALE_CLAMP = 3.0


def _check_state(x: Array, seq_len: int, channels: int, name: str = "x") -> None:
    if x.shape != (seq_len, channels):
        raise ValueError(
            f"`{name}` must be one state of shape (seq_len, channels) = ({seq_len}, {channels}) "
            f"(vmap for batches), got {x.shape}."
        )


def _scalar(t: Any, dtype: Any, name: str = "t") -> Array:
    t = jnp.asarray(t, dtype)
    if t.ndim:
        raise ValueError(f"`{name}` must be a scalar, got shape {t.shape}.")
    return t


def _positive_int(name: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"`{name}` must be an int >= 1, got {value!r}.")
    return value


def _check_sizes(**sizes: Any) -> None:
    """Each keyword must be an int >= 1 (the error names it)."""
    for name, value in sizes.items():
        _positive_int(name, value)


def _transformer_stack(
    width: int, num_heads: int, keys: Array, *, depth: int
) -> tuple[TransformerBlock, ...]:
    """``depth`` time-conditioned `TransformerBlock`s (rotary, MLP mixer, GPT-2 output scale)."""
    out_std = 0.02 / (2 * depth) ** 0.5
    return tuple(
        TransformerBlock(
            width,
            num_heads,
            "mlp",
            {},
            rotary=True,
            time_conditioning=True,
            out_std=out_std,
            key=k,
        )
        for k in keys
    )


class AbstractTransporter(eqx.Module):
    """Invertible map of one state ``(L, c)`` at level ``t`` of a ``T``-step trajectory.

    Implementations must be the identity (log-det 0) at ``t >= 1 - 1e-6`` (the noise level).
    """

    @abc.abstractmethod
    def forward(
        self, x: Float[Array, "L c"], t: Float[ArrayLike, ""], T: Any
    ) -> tuple[Float[Array, "L c"], Float[Array, ""]]:
        """``(u, log|det du/dx|)`` of one state ``x`` at level ``t`` (``T``: number of steps)."""

    @abc.abstractmethod
    def inverse(
        self, u: Float[Array, "L c"], t: Float[ArrayLike, ""], T: Any
    ) -> Float[Array, "L c"]:
        """``x`` with ``forward(x, t, T)[0] == u``."""


class IdentityTransporter(AbstractTransporter):
    """``f_T = id``: NTM reduces exactly to Gaussian few-step diffusion (the ablation)."""

    def forward(self, x, t, T):
        return x, jnp.zeros((), x.dtype)

    def inverse(self, u, t, T):
        return u


class AbstractConditioner(eqx.Module):
    """Strictly causal conditioner: ``(x (L, c), t, T) -> (shift, raw log-scale)``, each ``(L, c)``.

    Output token ``n`` may depend on ``x[:n]`` only (never on ``x[n:]``).
    """

    seq_len: int = eqx.field(static=True)
    channels: int = eqx.field(static=True)

    @abc.abstractmethod
    def __call__(
        self, x: Float[Array, "L c"], t: Float[ArrayLike, ""], T: Any
    ) -> tuple[Float[Array, "L c"], Float[Array, "L c"]]:
        """Affine parameters of every token."""


def _made_masks(seq_len: int, channels: int, width: int, depth: int) -> list[np.ndarray]:
    """Connectivity masks (out, in) of a MADE over the right-shifted tokens.

    Shifted token ``n`` (``start, x_0, ..., x_{L-2}``) has degree ``n``; hidden units cycle
    through degrees ``0..L-1``; output token ``n`` reads hidden units of degree ``<= n``. So output
    ``n`` depends on shifted tokens ``<= n``, i.e. on ``x_{<n}`` only.
    """
    deg_in = np.repeat(np.arange(seq_len), channels)
    deg_hidden = np.arange(width) % seq_len
    deg_out = np.tile(np.repeat(np.arange(seq_len), channels), 2)
    masks = [deg_hidden[:, None] >= deg_in[None, :]]
    masks += [deg_hidden[:, None] >= deg_hidden[None, :] for _ in range(depth - 1)]
    masks.append(deg_out[:, None] >= deg_hidden[None, :])
    return [m.astype(np.float32) for m in masks]


class MADEConditioner(AbstractConditioner):
    """Masked MLP (MADE) over the right-shifted tokens; ``(t, T)`` enter the first hidden layer.

    Masks are rebuilt from the static sizes at trace time (constants, never trained).
    """

    start: Float[Array, " c"]
    weights: tuple[Float[Array, "out in"], ...]
    biases: tuple[Float[Array, " out"], ...]
    time_embedding: TimeEmbedding
    steps_embedding: TimeEmbedding
    width: int = eqx.field(static=True)
    depth: int = eqx.field(static=True)

    def __init__(
        self,
        seq_len: int,
        channels: int,
        *,
        width: int = 64,
        depth: int = 2,
        zero_init: bool = True,
        key: PRNGKeyArray,
    ):
        """Build a MADE with ``depth`` hidden layers of ``width`` units (``width >= seq_len``)."""
        _check_sizes(seq_len=seq_len, channels=channels, width=width, depth=depth)
        if width < seq_len:
            raise ValueError(f"MADE needs `width` >= seq_len = {seq_len}, got {width}.")
        self.seq_len, self.channels, self.width, self.depth = seq_len, channels, width, depth
        sizes = [seq_len * channels] + [width] * depth + [2 * seq_len * channels]
        keys = jr.split(key, len(sizes) + 2)
        weights, biases = [], []
        for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
            last = i == len(sizes) - 2
            if last and zero_init:
                weights.append(jnp.zeros((n_out, n_in)))
            else:
                scale = (0.1 if last else 1.0) / np.sqrt(n_in)
                weights.append(scale * jr.normal(keys[i], (n_out, n_in)))
            biases.append(jnp.zeros((n_out,)))
        self.weights, self.biases = tuple(weights), tuple(biases)
        self.start = jnp.zeros((channels,))
        self.time_embedding = TimeEmbedding(width, key=keys[-2])
        self.steps_embedding = TimeEmbedding(width, scale=1.0, key=keys[-1])

    def __call__(self, x, t, T):
        dtype = x.dtype
        shifted = jnp.concatenate([self.start.astype(dtype)[None], x[:-1]])
        masks = _made_masks(self.seq_len, self.channels, self.width, self.depth)
        h = shifted.reshape(-1)
        cond = self.time_embedding(t) + self.steps_embedding(T)
        for i, (w, b, m) in enumerate(zip(self.weights, self.biases, masks, strict=True)):
            h = (w.astype(dtype) * jnp.asarray(m, dtype)) @ h + b.astype(dtype)
            if i == 0:
                h = h + cond.astype(dtype)
            if i < len(self.weights) - 1:
                h = jax.nn.silu(h)
        shift, raw = jnp.split(h, 2)
        shape = (self.seq_len, self.channels)
        return shift.reshape(shape), raw.reshape(shape)


class CausalTransformerConditioner(AbstractConditioner):
    """Causal transformer (`jaxgen.nn.TransformerBlock`, rotary) over the right-shifted tokens.

    ``h = [start, W x_0, ..., W x_{L-2}] + e(t) + e(T)``; every block is also modulated by
    ``e(t) + e(T)`` (adaptive RMSNorm); a linear head gives ``(shift, raw log-scale)`` per token.
    """

    start: Float[Array, " width"]
    in_proj: eqx.nn.Linear
    blocks: tuple[TransformerBlock, ...]
    norm: RMSNorm
    head: eqx.nn.Linear
    time_embedding: TimeEmbedding
    steps_embedding: TimeEmbedding

    def __init__(
        self,
        seq_len: int,
        channels: int,
        *,
        num_heads: int = 2,
        width: int = 64,
        depth: int = 2,
        zero_init: bool = True,
        key: PRNGKeyArray,
    ):
        """Build ``depth`` causal blocks of ``width`` channels and ``num_heads`` heads."""
        _check_sizes(
            seq_len=seq_len, channels=channels, width=width, depth=depth, num_heads=num_heads
        )
        keys = jr.split(key, depth + 5)
        self.seq_len, self.channels = seq_len, channels
        self.start = init_normal(keys[0], (width,))
        self.in_proj = eqx.nn.Linear(channels, width, key=keys[1])
        self.blocks = _transformer_stack(width, num_heads, keys[5:], depth=depth)
        self.norm = RMSNorm(width)
        head = eqx.nn.Linear(width, 2 * channels, key=keys[2])
        if zero_init:
            head = eqx.tree_at(lambda m: (m.weight, m.bias), head, replace_fn=jnp.zeros_like)
        self.head = head
        self.time_embedding = TimeEmbedding(width, key=keys[3])
        self.steps_embedding = TimeEmbedding(width, scale=1.0, key=keys[4])

    def __call__(self, x, t, T):
        dtype = x.dtype
        tokens = jax.vmap(self.in_proj)(x[:-1])
        h = jnp.concatenate([self.start.astype(dtype)[None], tokens.astype(dtype)])
        cond = (self.time_embedding(t) + self.steps_embedding(T)).astype(dtype)
        h = h + cond[None]
        for block in self.blocks:
            h, _ = block(h, cond, causal=True)
        out = jax.vmap(lambda v: self.head(self.norm(v)))(h)
        return out[:, : self.channels], out[:, self.channels :]


class TarFlowBlock(eqx.Module):
    """One affine autoregressive block; ``flip=True`` reads the tokens in reverse order."""

    conditioner: AbstractConditioner
    flip: bool = eqx.field(static=True)

    def _params(self, x: Array, t: Any, T: Any) -> tuple[Array, Array]:
        shift, raw = self.conditioner(x, t, T)
        return shift, LOG_SCALE_CLAMP * jnp.tanh(raw / LOG_SCALE_CLAMP)

    def forward(
        self, x: Float[Array, "L c"], t: Float[ArrayLike, ""], T: Any
    ) -> tuple[Float[Array, "L c"], Float[Array, ""]]:
        """``z = (x - mu(x_<n)) exp(-log sigma(x_<n))`` in the block's order; log-det."""
        xp = x[::-1] if self.flip else x
        shift, log_scale = self._params(xp, t, T)
        z = (xp - shift) * jnp.exp(-log_scale)
        return (z[::-1] if self.flip else z), -jnp.sum(log_scale)

    def inverse(
        self, z: Float[Array, "L c"], t: Float[ArrayLike, ""], T: Any
    ) -> Float[Array, "L c"]:
        """Sequential inverse: ``L`` conditioner passes (pass ``k`` fixes token ``k``)."""
        zp = z[::-1] if self.flip else z

        def body(_: Any, x: Array) -> Array:
            shift, log_scale = self._params(x, t, T)
            return zp * jnp.exp(log_scale) + shift

        x = jax.lax.fori_loop(0, z.shape[0], body, jnp.zeros_like(zp))
        return x[::-1] if self.flip else x


class TarFlowTransporter(AbstractTransporter):
    """Stack of shallow TarFlow blocks with alternating token order, time- and T-conditioned.

    ``zero_init=True`` zero-initialises the output layers: the transporter starts as the exact
    identity (log-det 0). ``zero_init=False`` draws them at random (for tests of invertibility
    and log-determinants). At ``t >= 1 - 1e-6`` the output is the identity whatever the weights.
    """

    seq_len: int = eqx.field(static=True)
    channels: int = eqx.field(static=True)
    blocks: tuple[TarFlowBlock, ...]

    def __init__(
        self,
        seq_len: int,
        channels: int,
        *,
        num_blocks: int = 2,
        conditioner: str = "made",
        width: int = 64,
        depth: int = 2,
        num_heads: int = 2,
        zero_init: bool = True,
        key: PRNGKeyArray,
    ):
        """Build ``num_blocks`` blocks, block ``l`` reversed when ``l`` is odd.

        Args:
            seq_len: number of tokens ``L``.
            channels: channels per token ``c``.
            num_blocks: number of TarFlow blocks.
            conditioner: ``"made"`` (masked MLP, ``depth`` hidden layers of ``width``) or
                ``"transformer"`` (``depth`` causal blocks of ``width`` and ``num_heads``).
            width: hidden width of a conditioner.
            depth: hidden layers (MADE) or transformer blocks per conditioner.
            num_heads: attention heads (transformer conditioner only).
            zero_init: start at the identity.
            key: PRNG key of the weights.
        """
        _positive_int("num_blocks", num_blocks)
        if conditioner not in CONDITIONERS:
            raise ValueError(f"`conditioner` must be one of {CONDITIONERS}, got {conditioner!r}.")
        keys = jr.split(key, num_blocks)
        blocks = []
        for i, k in enumerate(keys):
            if conditioner == "made":
                cond: AbstractConditioner = MADEConditioner(
                    seq_len, channels, width=width, depth=depth, zero_init=zero_init, key=k
                )
            else:
                cond = CausalTransformerConditioner(
                    seq_len,
                    channels,
                    width=width,
                    depth=depth,
                    num_heads=num_heads,
                    zero_init=zero_init,
                    key=k,
                )
            blocks.append(TarFlowBlock(cond, flip=bool(i % 2)))
        self.blocks = tuple(blocks)
        self.seq_len, self.channels = seq_len, channels

    def forward(self, x, t, T):
        _check_state(x, self.seq_len, self.channels)
        t, T = _scalar(t, x.dtype), _scalar(T, x.dtype, "T")
        u, logdet = x, jnp.zeros((), x.dtype)
        for block in self.blocks:
            u, ld = block.forward(u, t, T)
            logdet = logdet + ld
        noise = t >= 1 - T_ONE_EPS
        return jnp.where(noise, x, u), jnp.where(noise, 0.0, logdet).astype(x.dtype)

    def inverse(self, u, t, T):
        _check_state(u, self.seq_len, self.channels, "u")
        t, T = _scalar(t, u.dtype), _scalar(T, u.dtype, "T")
        x = u
        for block in reversed(self.blocks):
            x = block.inverse(x, t, T)
        return jnp.where(t >= 1 - T_ONE_EPS, u, x)
