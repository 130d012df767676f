r"""Neuromodulated constrained autoencoder (NcAE), the six baselines of the paper, and the loss.

NcAE: a hyper-network maps the context c to a slope :math:`s_l(c) > 0` and a shift
:math:`\beta_l(c)` per latent unit of every layer pair of a `ConstrainedAE`; the decoder uses
:math:`\sigma_+(s_l z + \beta_l)` and the encoder its exact inverse
:math:`(\sigma_-(\cdot) - \beta_l)/s_l`, so :math:`E_c \circ D_c = \mathrm{id}` and
:math:`P_c = D_c \circ E_c` is idempotent for EVERY context, seen or not (exactly). Slopes are
:math:`s_{min} + (s_{max} - s_{min})\,\mathrm{sigmoid}(\cdot)`, smooth and bounded, and the
hyper-network's last layer starts at zero so that an untrained NcAE is its cAE.

Baselines (jaxgen choices, with the ``encode/decode/project(x, c)`` interface): B1
`MLPAutoencoder` (no context), B2 `ConcatAE` (c concatenated to encoder and decoder inputs), B3
`FiLMAE` (FiLM on hidden layers), B4 `ConstrainedAE` (no context), B5 `ConcatCAE` (a cAE of the
augmented vector (x, c)), B6 `FiLMCAE` (a cAE with independent FiLM of encoder and decoder).

References:
    Adriaens, Drion, Sacré, Context-dependent manifold learning: a neuromodulated constrained
    autoencoder approach, arXiv:2603.11673; Vecoven et al., PLoS ONE 2020 (neuromodulation);
    Perez et al., arXiv:1709.07871 (FiLM).
"""

import math
from collections.abc import Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, PRNGKeyArray

from ..core.checks import check_module, check_positive_int
from ._cae import DEFAULT_ALPHA, AbstractAutoencoder, ConstrainedAE, check_dims, check_sample

MODES = ("slope_shift", "angle")


def _zero_last(mlp: eqx.nn.MLP) -> eqx.nn.MLP:
    last = mlp.layers[-1]
    return eqx.tree_at(
        lambda m: (m.layers[-1].weight, m.layers[-1].bias),
        mlp,
        (jnp.zeros_like(last.weight), jnp.zeros_like(last.bias)),
    )


@eqx.filter_jit
def _hyper_mlp(
    in_size: int, out_size: int, width: int, depth: int, key: PRNGKeyArray
) -> eqx.nn.MLP:
    """A tanh MLP whose last layer is zero, built as one compiled program per shape."""
    return _zero_last(eqx.nn.MLP(in_size, out_size, width, depth, jnp.tanh, key=key))


def _check_context(c: Any, size: int) -> Array:
    if c is None:
        raise ValueError(f"this model needs a context `c` of shape ({size},).")
    return check_sample(jnp.atleast_1d(jnp.asarray(c)), size, "c")


class NcAE(AbstractAutoencoder):
    """Neuromodulated constrained autoencoder on one sample ``x (N,)`` and context ``c (p,)``.

    Attributes:
        cae: the constrained autoencoder whose activations are modulated.
        hyper: ``eqx.nn.MLP`` from the context to two numbers per latent unit of every layer.
        context_dim, s_min, s_max, mode: static.
    """

    cae: ConstrainedAE
    hyper: eqx.nn.MLP
    context_dim: int = eqx.field(static=True)
    s_min: float = eqx.field(static=True)
    s_max: float = eqx.field(static=True)
    mode: str = eqx.field(static=True)

    def __init__(
        self,
        dims: Sequence[int],
        context_dim: int,
        *,
        alpha: float = DEFAULT_ALPHA,
        hyper_width: int = 32,
        hyper_depth: int = 2,
        s_min: float = 0.05,
        s_max: float = 20.0,
        mode: str = "slope_shift",
        key: PRNGKeyArray,
    ):
        dims = check_dims(dims)
        if not isinstance(context_dim, int) or context_dim < 1:
            raise ValueError(f"`context_dim` must be an int >= 1, got {context_dim!r}.")
        if not s_min > 0 or not s_max > s_min:
            raise ValueError(f"need 0 < s_min < s_max, got s_min={s_min}, s_max={s_max}.")
        if not s_min < 1 < s_max:
            raise ValueError(f"need s_min < 1 < s_max (slope 1 at init), got {s_min}, {s_max}.")
        if mode not in MODES:
            raise ValueError(f"`mode` must be one of {MODES}, got {mode!r}.")
        hyper_width = check_positive_int(hyper_width, "hyper_width")
        hyper_depth = check_positive_int(hyper_depth, "hyper_depth", minimum=0)
        k_cae, k_hyper = jr.split(key)
        self.cae = ConstrainedAE(dims, key=k_cae, alpha=alpha)
        out = 2 * sum(dims[1:])
        self.hyper = _hyper_mlp(context_dim, out, hyper_width, hyper_depth, k_hyper)
        self.context_dim, self.s_min, self.s_max, self.mode = context_dim, s_min, s_max, mode

    def modulation(self, c: Float[Array, " p"]) -> list[tuple[Array, Array]]:
        """Per layer, the ``(s_l, beta_l)`` actually used, each of shape ``(dims[l+1],)``.

        With ``mode="angle"``, ``s_l`` holds per-unit activation angles in (0, pi/4) and
        ``beta_l`` is zero.
        """
        c = _check_context(c, self.context_dim)
        raw = self.hyper(c)
        out, start = [], 0
        for layer in self.cae.layers:
            n = layer.Phi.shape[1]
            r_s, r_b = raw[start : start + n], raw[start + n : start + 2 * n]
            start += 2 * n
            if self.mode == "slope_shift":
                # sigmoid centred so that r_s = 0 gives slope 1 (the cAE at initialisation)
                x0 = math.log((1 - self.s_min) / (self.s_max - 1))
                s = self.s_min + (self.s_max - self.s_min) * jax.nn.sigmoid(r_s + x0)
                out.append((s, r_b))
            else:
                base = math.log(layer.alpha / (math.pi / 4 - layer.alpha))
                angle = (math.pi / 4) * jax.nn.sigmoid(r_s + base)
                out.append((jnp.clip(angle, 1e-3, math.pi / 4 - 1e-3), jnp.zeros_like(r_b)))
        return out

    def _apply(self, layer: Any, h: Array, mod: tuple[Array, Array], encode: bool) -> Array:
        fn = layer.encode if encode else layer.decode
        if self.mode == "slope_shift":
            return fn(h, mod[0].astype(h.dtype), mod[1].astype(h.dtype))
        return fn(h, alpha=mod[0].astype(h.dtype))

    def encode(self, x: Float[Array, " N"], c: Float[Array, " p"]) -> Float[Array, " r"]:
        """Latent coordinates of one sample under context ``c``."""
        h = check_sample(x, self.cae.dims[0], "x")
        for layer, mod in zip(self.cae.layers, self.modulation(c), strict=True):
            h = self._apply(layer, h, mod, True)
        return h

    def decode(self, z: Float[Array, " r"], c: Float[Array, " p"]) -> Float[Array, " N"]:
        """The point of the context-``c`` manifold with latent coordinates ``z``."""
        h = check_sample(z, self.cae.dims[-1], "z")
        mods = self.modulation(c)
        for layer, mod in zip(reversed(self.cae.layers), reversed(mods), strict=True):
            h = self._apply(layer, h, mod, False)
        return h

    def project(self, x: Float[Array, " N"], c: Float[Array, " p"]) -> Float[Array, " N"]:
        """``P_c(x) = D_c(E_c(x))``, idempotent for every context."""
        return self.decode(self.encode(x, c), c)

    def log_condition(self) -> Float[Array, ""]:
        """Sum over layers of ``log cond(X_l Phi_l)``."""
        return self.cae.log_condition()


class _MLP(eqx.Module):
    """Dense layers with SiLU between them and optional FiLM ``(1 + gamma) h + beta`` per hidden
    layer (FiLM parameters given per call).
    """

    layers: tuple[eqx.nn.Linear, ...]

    def __init__(self, sizes: Sequence[int], *, key: PRNGKeyArray):
        keys = jr.split(key, len(sizes) - 1)
        self.layers = tuple(
            eqx.nn.Linear(a, b, key=k) for a, b, k in zip(sizes[:-1], sizes[1:], keys, strict=True)
        )

    def hidden_sizes(self) -> list[int]:
        """Widths of the hidden layers (where FiLM applies)."""
        return [layer.out_features for layer in self.layers[:-1]]

    def __call__(self, h: Array, film: list[tuple[Array, Array]] | None = None) -> Array:
        for i, layer in enumerate(self.layers[:-1]):
            h = layer(h)
            if film is not None:
                gamma, beta = film[i]
                h = (1 + gamma) * h + beta
            h = jax.nn.silu(h)
        return self.layers[-1](h)


def _mirror(dims: tuple[int, ...]) -> tuple[list[int], list[int]]:
    return list(dims), list(reversed(dims))


class MLPAutoencoder(AbstractAutoencoder):
    """B1: an MLP autoencoder with the widths of ``dims``; the context is ignored."""

    encoder: _MLP
    decoder: _MLP
    dims: tuple[int, ...] = eqx.field(static=True)

    def __init__(self, dims: Sequence[int], context_dim: int = 0, *, key: PRNGKeyArray):
        self.dims = check_dims(dims)
        ke, kd = jr.split(key)
        enc, dec = _mirror(self.dims)
        self.encoder, self.decoder = _MLP(enc, key=ke), _MLP(dec, key=kd)

    def encode(self, x: Array, c: Any = None) -> Array:
        """Latent coordinates of one sample."""
        return self.encoder(check_sample(x, self.dims[0], "x"))

    def decode(self, z: Array, c: Any = None) -> Array:
        """Decoded sample."""
        return self.decoder(z)

    def project(self, x: Array, c: Any = None) -> Array:
        """``decode(encode(x))`` (not a projection in general)."""
        return self.decode(self.encode(x, c), c)


class ConcatAE(AbstractAutoencoder):
    """B2: an MLP autoencoder with the context concatenated to encoder and decoder inputs."""

    encoder: _MLP
    decoder: _MLP
    dims: tuple[int, ...] = eqx.field(static=True)
    context_dim: int = eqx.field(static=True)

    def __init__(self, dims: Sequence[int], context_dim: int, *, key: PRNGKeyArray):
        self.dims, self.context_dim = check_dims(dims), context_dim
        ke, kd = jr.split(key)
        enc, dec = _mirror(self.dims)
        enc[0] += context_dim
        dec[0] += context_dim
        self.encoder, self.decoder = _MLP(enc, key=ke), _MLP(dec, key=kd)

    def encode(self, x: Array, c: Array) -> Array:
        """Latent coordinates of one sample under context ``c``."""
        x = check_sample(x, self.dims[0], "x")
        return self.encoder(jnp.concatenate([x, _check_context(c, self.context_dim)]))

    def decode(self, z: Array, c: Array) -> Array:
        """Decoded sample under context ``c``."""
        return self.decoder(jnp.concatenate([z, _check_context(c, self.context_dim)]))

    def project(self, x: Array, c: Array) -> Array:
        """``decode(encode(x, c), c)``."""
        return self.decode(self.encode(x, c), c)


class FiLMAE(AbstractAutoencoder):
    """B3: an MLP autoencoder whose hidden layers are FiLM-modulated by a context MLP."""

    encoder: _MLP
    decoder: _MLP
    film: eqx.nn.MLP
    dims: tuple[int, ...] = eqx.field(static=True)
    context_dim: int = eqx.field(static=True)

    def __init__(self, dims: Sequence[int], context_dim: int, *, key: PRNGKeyArray):
        self.dims, self.context_dim = check_dims(dims), context_dim
        ke, kd, kf = jr.split(key, 3)
        enc, dec = _mirror(self.dims)
        self.encoder, self.decoder = _MLP(enc, key=ke), _MLP(dec, key=kd)
        total = 2 * (sum(self.encoder.hidden_sizes()) + sum(self.decoder.hidden_sizes()))
        self.film = _zero_last(eqx.nn.MLP(context_dim, max(total, 1), 32, 2, jnp.tanh, key=kf))

    def _films(self, c: Array) -> tuple[list, list]:
        raw = self.film(_check_context(c, self.context_dim))
        out, start = [], 0
        for size in self.encoder.hidden_sizes() + self.decoder.hidden_sizes():
            out.append((raw[start : start + size], raw[start + size : start + 2 * size]))
            start += 2 * size
        n_enc = len(self.encoder.hidden_sizes())
        return out[:n_enc], out[n_enc:]

    def encode(self, x: Array, c: Array) -> Array:
        """Latent coordinates of one sample under context ``c``."""
        return self.encoder(check_sample(x, self.dims[0], "x"), self._films(c)[0])

    def decode(self, z: Array, c: Array) -> Array:
        """Decoded sample under context ``c``."""
        return self.decoder(z, self._films(c)[1])

    def project(self, x: Array, c: Array) -> Array:
        """``decode(encode(x, c), c)``."""
        return self.decode(self.encode(x, c), c)


class ConcatCAE(AbstractAutoencoder):
    """B5: a constrained autoencoder of the augmented vector ``(x, c)``.

    It is a projection of the joint vector; ``project(x, c)`` keeps the x-part, so applying it
    again uses the original c, not the reconstructed one: not idempotent in x in general.
    """

    cae: ConstrainedAE
    context_dim: int = eqx.field(static=True)

    def __init__(
        self,
        dims: Sequence[int],
        context_dim: int,
        *,
        key: PRNGKeyArray,
        alpha: float = DEFAULT_ALPHA,
    ):
        dims = check_dims(dims)
        self.context_dim = context_dim
        self.cae = ConstrainedAE((dims[0] + context_dim, *dims[1:]), key=key, alpha=alpha)

    def encode(self, x: Array, c: Array) -> Array:
        """Latent coordinates of ``(x, c)``."""
        c = _check_context(c, self.context_dim)
        return self.cae.encode(jnp.concatenate([x, c.astype(x.dtype)]))

    def decode(self, z: Array, c: Any = None) -> Array:
        """The x-part of the decoded joint vector."""
        return self.cae.decode(z)[: self.cae.dims[0] - self.context_dim]

    def project(self, x: Array, c: Array) -> Array:
        """x-part of the joint projection of ``(x, c)``."""
        return self.decode(self.encode(x, c), c)

    def log_condition(self) -> Float[Array, ""]:
        """Sum over layers of ``log cond(X_l Phi_l)``."""
        return self.cae.log_condition()


class FiLMCAE(AbstractAutoencoder):
    """B6: a cAE whose encoder and decoder pre-activations get INDEPENDENT FiLM modulations.

    Decoder ``sigma_+(g_d z + b_d)`` and encoder ``(sigma_-(.) - b_e) / g_e`` with separately
    learned ``(g_d, b_d)`` and ``(g_e, b_e)``: the encoder is no longer the decoder's inverse.
    """

    cae: ConstrainedAE
    film_dec: eqx.nn.MLP
    film_enc: eqx.nn.MLP
    context_dim: int = eqx.field(static=True)

    def __init__(
        self,
        dims: Sequence[int],
        context_dim: int,
        *,
        alpha: float = DEFAULT_ALPHA,
        key: PRNGKeyArray,
    ):
        dims = check_dims(dims)
        k1, k2, k3 = jr.split(key, 3)
        self.cae = ConstrainedAE(dims, key=k1, alpha=alpha)
        out = 2 * sum(dims[1:])
        self.film_dec = _zero_last(eqx.nn.MLP(context_dim, out, 32, 2, jnp.tanh, key=k2))
        self.film_enc = _zero_last(eqx.nn.MLP(context_dim, out, 32, 2, jnp.tanh, key=k3))
        self.context_dim = context_dim

    def _mods(self, mlp: eqx.nn.MLP, c: Array) -> list[tuple[Array, Array]]:
        raw = mlp(_check_context(c, self.context_dim))
        out, start = [], 0
        for layer in self.cae.layers:
            n = layer.Phi.shape[1]
            out.append((jnp.exp(raw[start : start + n]), raw[start + n : start + 2 * n]))
            start += 2 * n
        return out

    def encode(self, x: Array, c: Array) -> Array:
        """Latent coordinates under the encoder's own FiLM."""
        h = check_sample(x, self.cae.dims[0], "x")
        for layer, (g, b) in zip(self.cae.layers, self._mods(self.film_enc, c), strict=True):
            h = layer.encode(h, g.astype(h.dtype), b.astype(h.dtype))
        return h

    def decode(self, z: Array, c: Array) -> Array:
        """Decoded sample under the decoder's own FiLM."""
        mods = self._mods(self.film_dec, c)
        h = z
        for layer, (g, b) in zip(reversed(self.cae.layers), reversed(mods), strict=True):
            h = layer.decode(h, g.astype(h.dtype), b.astype(h.dtype))
        return h

    def project(self, x: Array, c: Array) -> Array:
        """``decode(encode(x, c), c)`` (not idempotent once the two FiLMs differ)."""
        return self.decode(self.encode(x, c), c)

    def log_condition(self) -> Float[Array, ""]:
        """Sum over layers of ``log cond(X_l Phi_l)``."""
        return self.cae.log_condition()


#: Penalty weight of ``sum_l log cond(X_l Phi_l)`` in `ncae_loss` (a jaxgen choice).
CONDITION_WEIGHT = 1e-3


def ncae_loss(model: AbstractAutoencoder, batch: tuple[Array, Array], key: Any) -> Float[Array, ""]:
    r"""Relative reconstruction error plus the conditioning penalty.

    :math:`\operatorname{mean}_i\|P_{c_i}(x_i) - x_i\|^2 / \operatorname{mean}_i\|x_i -
    \bar x\|^2 + \mu \sum_l \log\operatorname{cond}(X_l\Phi_l)` with the batch mean
    :math:`\bar x` (a jaxgen choice: per-context means would need the context grouping) and
    :math:`\mu` = `CONDITION_WEIGHT` for the models with biorthogonal layers. Works for every
    model with ``project(x, c)``; use with `jaxgen.core.fit` and `jaxgen.core.minibatches`.

    Args:
        model: any `AbstractAutoencoder` (NcAE, a baseline or your own subclass).
        batch: ``(X (B, N), C (B, p))``.
        key: unused (deterministic loss).
    """
    del key
    check_module(model, AbstractAutoencoder, "model")
    X, C = batch
    if X.ndim != 2 or C.ndim != 2 or C.shape[0] != X.shape[0]:
        raise ValueError(f"`batch` must be (X (B, N), C (B, p)), got {X.shape} and {C.shape}.")
    proj = jax.vmap(model.project)(X, C)
    centred = X - jnp.mean(X, axis=0, keepdims=True)
    loss = jnp.mean(jnp.sum((proj - X) ** 2, -1)) / jnp.mean(jnp.sum(centred**2, -1))
    if hasattr(model, "log_condition"):
        loss = loss + CONDITION_WEIGHT * model.log_condition()
    return loss
