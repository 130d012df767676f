r"""SMFSR: noise-started one-step super-resolution by LR-conditioned SplitMeanFlow + GAN refinement.

Time convention: **t = 1 is noise**, $z_t = (1 - t) x + t \varepsilon$ (opposite to
`GaussianStraightProcess` / `flow_matching_loss`; `NoiseAtOneVelocity` converts). Images are
handled as flat vectors of ``H * W * C`` entries in ``(H, W, C)`` order, so every field is an
`AbstractVelocityField` of ``dim = H W C`` that drops into `flow_matching_loss`, the mean-flow
losses and `jaxgen.core.solve_ode`; the condition $c$ is the upsampled LR image, flattened alike.

Stages, each a loss for `jaxgen.core.fit`:

0. teacher: `flow_matching_loss` (``x0`` = noise, ``x1`` = HR, ``cond`` = c, logit-normal
   times, 10% condition dropout) on an `SRVelocityNet` $f$; the teacher is
   ``NoiseAtOneVelocity(f)``, $v(t, z, c) = -f(1 - t, z, c)$.
1. student: `IntervalConditionedNet.from_velocity(teacher)` trained by `splitmeanflow_loss`,
   with an EMA of the weights carried as `fit`'s ``state`` (`with_ema`).
2. GAN refinement: `gan_refine_loss` on the triple (student, `FeatureDiscriminator`, fake
   score) with one optimiser per player (`gan_optimizer`, an ``optax.multi_transform``).

Offline substitutes: the DINOv3 discriminator backbone is replaced by the frozen
teacher's own hidden features at noise level $\tau_D = 0.1$ (`FrozenFeatures`), LPIPS by
`feature_matching_loss` in that feature space.

References:
    Zhu et al., arXiv 2605.09328 (SMFSR); Yin et al., DMD, arXiv 2311.18828 (score
    distillation); Sauer et al., LADD, arXiv 2403.12015 (frozen-feature discriminator).
"""

import abc
import math
from collections.abc import Callable
from typing import Any

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import optax
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray, PyTree

from ...core import solve_ode
from ...core.checks import check_finite, check_in_interval, check_module
from ...nn import sinusoidal_embedding
from .._velocity import AbstractVelocityField
from ._mean_flow import (
    AbstractAverageVelocity,
    AbstractTimeEmbeddedVelocity,
    NoiseAtOneVelocity,
    _check_batch,
)

KINDS = ("mlp", "unet")


def _positive(name: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"`{name}` must be an int >= 1, got {value!r}.")
    return value


# --------------------------------------------------------------------------------------------
# Networks
# --------------------------------------------------------------------------------------------


class _UNet(eqx.Module):
    """Two-level conv U-Net on (2C, H, W) with a per-block time bias; returns (C, H, W)."""

    conv_in: eqx.nn.Conv2d
    down: eqx.nn.Conv2d
    mid: eqx.nn.Conv2d
    up: eqx.nn.Conv2d
    conv_out: eqx.nn.Conv2d
    time_proj: eqx.nn.Linear
    width: int = eqx.field(static=True)

    def __init__(self, channels: int, width: int, emb_dim: int, *, key: PRNGKeyArray):
        keys = jr.split(key, 6)
        self.width = width
        self.conv_in = eqx.nn.Conv2d(2 * channels, width, 3, padding=1, key=keys[0])
        self.down = eqx.nn.Conv2d(width, 2 * width, 3, stride=2, padding=1, key=keys[1])
        self.mid = eqx.nn.Conv2d(2 * width, 2 * width, 3, padding=1, key=keys[2])
        self.up = eqx.nn.Conv2d(3 * width, width, 3, padding=1, key=keys[3])
        self.conv_out = eqx.nn.Conv2d(width, channels, 3, padding=1, key=keys[4])
        self.time_proj = eqx.nn.Linear(emb_dim, 5 * width, key=keys[5])

    def features(self, emb, img):
        bias = self.time_proj(jax.nn.silu(emb))
        b1, b2, b3 = bias[: self.width], bias[self.width : 3 * self.width], bias[3 * self.width :]
        h1 = jax.nn.silu(self.conv_in(img) + b1[:, None, None])
        h2 = jax.nn.silu(self.down(h1) + b2[:, None, None])
        h2 = jax.nn.silu(self.mid(h2) + b3[:, None, None]) + h2
        upsampled = jnp.repeat(jnp.repeat(h2, 2, axis=1), 2, axis=2)[
            :, : h1.shape[1], : h1.shape[2]
        ]
        h3 = jax.nn.silu(self.up(jnp.concatenate([upsampled, h1])) + b1[:, None, None])
        return h1, h2, h3

    def __call__(self, emb, img):
        return self.conv_out(self.features(emb, img)[-1])


class AbstractSRVelocityField(AbstractTimeEmbeddedVelocity):
    """A time-embedded super-resolution velocity field that also exposes its hidden features.

    The teacher slot of SMFSR's GAN stage: `FrozenFeatures` reads the teacher's hidden
    activations as the frozen discriminator backbone. Besides ``embed_time`` and
    ``velocity_from_embedding`` (see `AbstractTimeEmbeddedVelocity`), subclasses give
    ``features_from_embedding(emb, z, cond)``: a tuple of feature maps, each ``(channels,)`` or
    ``(channels, h, w)``, for one flat image ``z`` (``(dim,)``) under the flat condition
    ``cond``.
    """

    @abc.abstractmethod
    def features_from_embedding(
        self, emb: Float[Array, " emb"], z: Float[Array, " dim"], cond: Any
    ) -> tuple[Array, ...]:
        """Hidden feature maps of one sample given a time embedding."""


class SRVelocityNet(AbstractSRVelocityField):
    r"""A super-resolution velocity field $f(t, z, c)$ on flat ``(H W C,)`` images.

    The time goes through a sinusoidal embedding of $1000 t$ and a two-layer SiLU MLP
    (``emb_dim`` outputs); `IntervalConditionedNet` adds its interval branch there.

    - ``kind="mlp"`` (digits 8x8): an MLP on ``concat(z, c, emb)`` with ``depth``
      hidden layers of ``width`` units, SiLU.
    - ``kind="unet"`` (natural patches): a two-level conv U-Net on the channel
      concatenation of $z$ and $c$ (H and W even), time injected as a per-block channel bias.

    Convention-free: trained by `flow_matching_loss` it is a t = 0-noise field; wrap it in
    `NoiseAtOneVelocity` for the mean-flow functions.
    """

    time_mlp: eqx.nn.MLP
    body: eqx.nn.MLP | _UNet
    shape: tuple[int, int, int] = eqx.field(static=True)
    kind: str = eqx.field(static=True)
    dim: int = eqx.field(static=True)
    emb_dim: int = eqx.field(static=True)
    freq_dim: int = eqx.field(static=True)

    def __init__(
        self,
        shape: tuple[int, int, int],
        *,
        kind: str = "mlp",
        width: int = 256,
        depth: int = 4,
        emb_dim: int = 64,
        key: PRNGKeyArray,
    ):
        """Build the network.

        Args:
            shape: ``(H, W, C)`` of the HR image (the condition has the same shape).
            kind: ``"mlp"`` or ``"unet"``.
            width: hidden width (MLP units, or U-Net base channels).
            depth: number of hidden layers of the MLP (unused by the U-Net).
            emb_dim: size of the time embedding.
            key: PRNG key of the weights.
        """
        if len(shape) != 3:
            raise ValueError(f"`shape` must be (H, W, C), got {shape!r}.")
        for i, name in enumerate("HWC"):
            _positive(f"shape[{i}] ({name})", shape[i])
        if kind not in KINDS:
            raise ValueError(f"`kind` must be one of {KINDS}, got {kind!r}.")
        _positive("width", width)
        _positive("depth", depth)
        _positive("emb_dim", emb_dim)
        if kind == "unet" and (shape[0] % 2 or shape[1] % 2):
            raise ValueError(f"the U-Net needs even H and W, got shape {shape}.")
        self.shape = tuple(shape)
        self.kind = kind
        self.dim = math.prod(shape)
        self.emb_dim = emb_dim
        self.freq_dim = 2 * ((emb_dim + 1) // 2)
        tkey, bkey = jr.split(key)
        self.time_mlp = eqx.nn.MLP(self.freq_dim, emb_dim, emb_dim, 1, jax.nn.silu, key=tkey)
        if kind == "mlp":
            self.body = eqx.nn.MLP(
                2 * self.dim + emb_dim, self.dim, width, depth, jax.nn.silu, key=bkey
            )
        else:
            self.body = _UNet(shape[2], width, emb_dim, key=bkey)

    def _check(self, z: Array, cond: Any) -> Array:
        if z.shape != (self.dim,):
            raise ValueError(
                f"`z` must be a flat ({self.dim},) image (vmap for batches), got {z.shape}."
            )
        cond = None if cond is None else jnp.asarray(cond)
        if cond is None or cond.shape != (self.dim,):
            raise ValueError(
                f"the condition (upsampled LR image) must have shape ({self.dim},), got "
                f"{None if cond is None else cond.shape}."
            )
        return cond.astype(z.dtype)

    def embed_time(self, t):
        t = jnp.asarray(t)
        if t.ndim:
            raise ValueError(f"`t` must be a scalar, got shape {t.shape}.")
        return self.time_mlp(sinusoidal_embedding(1000 * t, self.freq_dim))

    def _image(self, flat: Array) -> Array:
        return jnp.transpose(flat.reshape(self.shape), (2, 0, 1))

    def features_from_embedding(
        self, emb: Float[Array, " emb"], z: Float[Array, " dim"], cond: Any
    ) -> tuple[Array, ...]:
        """Hidden activations: each MLP hidden layer ``(width,)`` or U-Net block ``(ch, h, w)``."""
        cond = self._check(z, cond)
        emb = emb.astype(z.dtype)
        if self.kind == "unet":
            img = jnp.concatenate([self._image(z), self._image(cond)])
            return self.body.features(emb, img)
        h = jnp.concatenate([z, cond, emb])
        feats = []
        for layer in self.body.layers[:-1]:
            h = jax.nn.silu(layer(h))
            feats.append(h)
        return tuple(feats)

    def velocity_from_embedding(self, emb, z, cond=None):
        cond = self._check(z, cond)
        emb = emb.astype(z.dtype)
        if self.kind == "mlp":
            return self.body(jnp.concatenate([z, cond, emb]))
        out = self.body(emb, jnp.concatenate([self._image(z), self._image(cond)]))
        return jnp.transpose(out, (1, 2, 0)).reshape(-1)


def _frozen(module: PyTree) -> PyTree:
    params, static = eqx.partition(module, eqx.is_array)
    return eqx.combine(jax.lax.stop_gradient(params), static)


class FrozenFeatures(eqx.Module):
    r"""Frozen discriminator backbone: the teacher's hidden features at noise level $\tau_D$.

    $F(x, c) = $ hidden activations of the teacher network at $z = (1 - \tau_D) x + \tau_D
    \varepsilon$ (t = 1-noise time $\tau_D$; $\varepsilon = 0$ unless ``noise`` is given), the
    offline substitute of DINOv3 (LADD-style). The weights are under
    `lax.stop_gradient` (never trained, weight decay cannot reach them when the module is kept
    out of the trained pytree); gradients still flow to the input image.
    """

    net: AbstractSRVelocityField
    tau: float = eqx.field(static=True)
    flip: bool = eqx.field(static=True)

    def __init__(self, teacher: AbstractVelocityField, tau: float = 0.1):
        """``teacher``: an `AbstractSRVelocityField`, or one wrapped in `NoiseAtOneVelocity`."""
        flip = isinstance(teacher, NoiseAtOneVelocity)
        net = teacher.field if flip else teacher
        check_module(net, AbstractSRVelocityField, "teacher")
        if not 0.0 <= tau < 1.0:
            raise ValueError(f"`tau` must lie in [0, 1), got {tau}.")
        self.net, self.tau, self.flip = net, float(tau), flip

    def __call__(self, x: Float[Array, " dim"], cond: Any, noise: Array | None = None):
        """Features of one flat image ``x`` under condition ``cond``."""
        net = _frozen(self.net)
        z = (1 - self.tau) * x + (0 if noise is None else self.tau * noise)
        time = 1 - self.tau if self.flip else self.tau
        return net.features_from_embedding(net.embed_time(jnp.asarray(time, x.dtype)), z, cond)


def _positions(feat: Array) -> Array:
    """(P, channels): a vector is one position; a (ch, h, w) map has h*w positions."""
    if feat.ndim == 1:
        return feat[None, :]
    return jnp.reshape(feat, (feat.shape[0], -1)).T


class FeatureDiscriminator(eqx.Module):
    r"""$D(x, c) = \sum_j h_j(F_j(x), c)$: small trainable heads on frozen features.

    Head $j$: a 1x1 conv (a Linear per position) with SiLU to ``width`` channels, mean over
    positions to $g_j$, then $w_j^\top g_j + b_j + \langle P_j c, g_j \rangle$ (projection
    conditioning on the flattened condition).
    """

    convs: tuple[eqx.nn.Linear, ...]
    outs: tuple[eqx.nn.Linear, ...]
    projections: tuple[eqx.nn.Linear, ...]

    def __init__(
        self,
        feature_channels: tuple[int, ...],
        cond_dim: int,
        *,
        width: int = 64,
        key: PRNGKeyArray,
    ):
        """``feature_channels``: channels of each feature map."""
        if len(feature_channels) < 1:
            raise ValueError("`feature_channels` must name at least one feature map.")
        _positive("cond_dim", cond_dim)
        _positive("width", width)
        keys = jr.split(key, (len(feature_channels), 3))
        self.convs = tuple(
            eqx.nn.Linear(c, width, key=k[0]) for c, k in zip(feature_channels, keys, strict=True)
        )
        self.outs = tuple(eqx.nn.Linear(width, 1, key=k[1]) for k in keys)
        self.projections = tuple(
            eqx.nn.Linear(cond_dim, width, use_bias=False, key=k[2]) for k in keys
        )

    def __call__(
        self, features: tuple[Array, ...], cond: Float[Array, " cond"]
    ) -> Float[Array, ""]:
        """The logit of one sample from its feature maps and condition."""
        if len(features) != len(self.convs):
            raise ValueError(f"expected {len(self.convs)} feature maps, got {len(features)}.")
        total = jnp.zeros((), features[0].dtype)
        for feat, conv, out, proj in zip(
            features, self.convs, self.outs, self.projections, strict=True
        ):
            g = jnp.mean(jax.nn.silu(jax.vmap(conv)(_positions(feat))), axis=0)
            total = total + out(g)[0] + jnp.dot(proj(jnp.asarray(cond, g.dtype)), g)
        return total


# --------------------------------------------------------------------------------------------
# Losses of the GAN stage
# --------------------------------------------------------------------------------------------


def hinge_d_loss(
    real_logits: Float[Array, " B"], fake_logits: Float[Array, " B"]
) -> Float[Array, ""]:
    r"""$E\,\mathrm{relu}(1 - D(x)) + E\,\mathrm{relu}(1 + D(G))$.

    Both logits must be non-empty and finite (a value check: ``relu(1 - inf) = 0`` would hide an
    overflowing discriminator); the GAN step calls the body without the value check.
    """
    real_logits = check_finite(_nonempty_logits("real_logits", real_logits), "real_logits")
    fake_logits = check_finite(_nonempty_logits("fake_logits", fake_logits), "fake_logits")
    return _hinge_d_loss(real_logits, fake_logits)


def _hinge_d_loss(real_logits: Array, fake_logits: Array) -> Array:
    return jnp.mean(jax.nn.relu(1 - real_logits)) + jnp.mean(jax.nn.relu(1 + fake_logits))


def hinge_g_loss(fake_logits: Float[Array, " B"]) -> Float[Array, ""]:
    r"""$-E\, D(G)$ (``fake_logits`` non-empty)."""
    return -jnp.mean(_nonempty_logits("fake_logits", fake_logits))


def _nonempty_logits(name: str, logits: ArrayLike) -> Array:
    logits = jnp.asarray(logits)
    if logits.size == 0:
        raise ValueError(f"`{name}` must hold at least one logit, got shape {logits.shape}.")
    return logits


def _flat_batch(name: str, x: Array) -> Array:
    x = jnp.asarray(x)
    if x.ndim != 2:
        raise ValueError(f"`{name}` must be a batch of flat samples (B, dim), got {x.shape}.")
    return x


def vsd_loss(
    g_out: Float[Array, "B dim"],
    teacher: AbstractVelocityField,
    fake: AbstractVelocityField,
    cond: Any,
    key: PRNGKeyArray,
    *,
    tau_range: tuple[float, float] = (0.02, 0.98),
    eps: float = 1e-6,
) -> Float[Array, ""]:
    r"""Variational score distillation (DMD estimator of $\nabla\,\mathrm{KL}(p_G \| p_\phi)$).

    Per sample: $\tau \sim U(\text{tau\_range})$, $z = (1 - \tau) G + \tau \varepsilon'$,
    $\hat x_{\mathrm{real}} = z - \tau v_\phi(\tau, z, c)$,
    $\hat x_{\mathrm{fake}} = z - \tau v_\psi(\tau, z, c)$,
    $g = (\hat x_{\mathrm{fake}} - \hat x_{\mathrm{real}})
    / (\mathrm{mean}|G - \hat x_{\mathrm{real}}| + \epsilon)$
    and $L = \tfrac12 \|G - \mathrm{sg}(G - g)\|^2$ (batch mean), whose gradient in $G$ is
    exactly $g$: descent moves $G$ towards the teacher's denoiser and away from the fake one.
    Both fields are t = 1-noise velocities and both are used under stop-gradient.

    Args:
        g_out: generator outputs, ``(B, dim)``.
        teacher: the frozen real-score velocity $v_\phi$.
        fake: the fake-score velocity $v_\psi$ (trained by `fake_score_loss`).
        cond: conditions with leading axis ``B`` (or None).
        key: PRNG key of $\tau$ and $\varepsilon'$.
        tau_range: range of $\tau$, inside ``(0, 1)``.
        eps: floor of the normaliser.
    """
    g_out = _flat_batch("g_out", g_out)
    lo, hi = tau_range
    if not 0.0 < lo <= hi < 1.0:
        raise ValueError(f"`tau_range` must satisfy 0 < lo <= hi < 1, got {tau_range}.")
    num = g_out.shape[0]
    tau_key, noise_key = jr.split(key)
    tau = jr.uniform(tau_key, (num,), g_out.dtype, lo, hi)
    noise = jr.normal(noise_key, g_out.shape, g_out.dtype)
    g_sg = jax.lax.stop_gradient(g_out)
    z = (1 - tau[:, None]) * g_sg + tau[:, None] * noise
    axis = None if cond is None else 0
    v_real = jax.vmap(_frozen(teacher), in_axes=(0, 0, axis))(tau, z, cond)
    v_fake = jax.vmap(_frozen(fake), in_axes=(0, 0, axis))(tau, z, cond)
    x_real = z - tau[:, None] * v_real
    x_fake = z - tau[:, None] * v_fake
    scale = jnp.mean(jnp.abs(g_sg - x_real), axis=-1, keepdims=True) + eps
    grad = jax.lax.stop_gradient((x_fake - x_real) / scale)
    return 0.5 * jnp.mean(jnp.sum((g_out - jax.lax.stop_gradient(g_out - grad)) ** 2, axis=-1))


def fake_score_loss(
    fake: AbstractVelocityField,
    g_out: Float[Array, "B dim"],
    cond: Any,
    key: PRNGKeyArray,
    *,
    tau_range: tuple[float, float] = (0.02, 0.98),
) -> Float[Array, ""]:
    r"""Flow matching of the fake score on generator samples: $E\|v_\psi(\tau, z_\tau, c) -
    (\varepsilon' - \mathrm{sg}\, G)\|^2$, $z_\tau = (1 - \tau)\,\mathrm{sg}\,G + \tau\varepsilon'$.
    """
    g_out = jax.lax.stop_gradient(_flat_batch("g_out", g_out))
    lo, hi = tau_range
    if not 0.0 < lo <= hi < 1.0:
        raise ValueError(f"`tau_range` must satisfy 0 < lo <= hi < 1, got {tau_range}.")
    tau_key, noise_key = jr.split(key)
    tau = jr.uniform(tau_key, (g_out.shape[0],), g_out.dtype, lo, hi)
    noise = jr.normal(noise_key, g_out.shape, g_out.dtype)
    z = (1 - tau[:, None]) * g_out + tau[:, None] * noise
    pred = jax.vmap(fake, in_axes=(0, 0, None if cond is None else 0))(tau, z, cond)
    return jnp.mean(jnp.sum((pred - (noise - g_out)) ** 2, axis=-1))


def feature_matching_loss(
    features: FrozenFeatures, g_out: Float[Array, "B dim"], x: Float[Array, "B dim"], cond: Any
) -> Float[Array, ""]:
    r"""LPIPS substitute: $\mathrm{mean}_j \|F_j(G)/\|F_j(G)\| - F_j(x)/\|F_j(x)\|\|^2$.

    Each feature map is normalised per position over its channels; the squared distance is
    averaged over positions, summed over maps $j$ and averaged over the batch.
    """
    g_out, x = _flat_batch("g_out", g_out), _flat_batch("x", x)
    if g_out.shape != x.shape:
        raise ValueError(f"`g_out` {g_out.shape} and `x` {x.shape} must have equal shapes.")

    def one(g, xx, c):
        total = jnp.zeros((), g.dtype)
        for fg, fx in zip(features(g, c), features(xx, c), strict=True):
            pg, px = _positions(fg), _positions(fx)
            pg = pg / (jnp.linalg.norm(pg, axis=-1, keepdims=True) + 1e-8)
            px = px / (jnp.linalg.norm(px, axis=-1, keepdims=True) + 1e-8)
            total = total + jnp.mean(jnp.sum((pg - px) ** 2, axis=-1))
        return total

    return jnp.mean(jax.vmap(one)(g_out, x, cond))


def one_step_generate(
    student: AbstractAverageVelocity, noise: Float[Array, "B dim"], cond: Any
) -> Float[Array, "B dim"]:
    r"""$G_\theta(\varepsilon, c) = \varepsilon - u_\theta(\varepsilon, 0, 1, c)$ on a batch."""
    noise = _flat_batch("noise", noise)
    one, zero = jnp.ones((), noise.dtype), jnp.zeros((), noise.dtype)
    u = jax.vmap(lambda z, c: student(z, zero, one, c), in_axes=(0, None if cond is None else 0))(
        noise, cond
    )
    return noise - u


def gan_refine_loss(
    model: tuple,
    batch: tuple[Array, Any],
    key: PRNGKeyArray,
    state: PyTree = None,
    *,
    teacher: AbstractVelocityField,
    features: FrozenFeatures,
    weight_l2: float = 1.0,
    weight_feat: float = 1.0,
    weight_adv: float = 0.05,
    weight_vsd: float = 0.5,
    ema_decay: float = 0.999,
) -> Any:
    r"""One GAN-refinement loss for the triple (student $\theta$, discriminator, fake $\psi$).

    $L = L_G(\theta; \mathrm{sg}\,D, \mathrm{sg}\,\psi) + L_D(D; \mathrm{sg}\,G) +
    L_{\mathrm{fake}}(\psi; \mathrm{sg}\,G)$ with
    $L_G = \lambda_2 \|G - x\|^2 + \lambda_p L_{\mathrm{feat}}(G, x) - \lambda_{adv} E\,D(G, c) +
    \lambda_{vsd} L_{VSD}$, $G = \varepsilon - u_\theta(\varepsilon, 0, 1, c)$, $L_D$ the hinge loss
    and $L_{\mathrm{fake}}$ = `fake_score_loss`. Each player's gradient is exactly that of its
    own loss, so one `jaxgen.core.fit` run with `gan_optimizer` (one optax transformation per
    player) takes simultaneous G, D and fake-score steps. With ``state`` (the EMA of the
    student's inexact arrays, ``fit(..., state=eqx.filter(student, eqx.is_inexact_array))``)
    it returns ``(loss, new_ema)``; the EMA student is ``eqx.combine(state, student)``.

    Args:
        model: ``(student, discriminator, fake)``.
        batch: ``(x, c)``, flat HR images ``(B, dim)`` and conditions ``(B, dim)``.
        key: PRNG key.
        state: optional EMA of the student.
        teacher: frozen real-score velocity (t = 1 noise).
        features: the frozen discriminator backbone.
        weight_l2: $\lambda_2$.
        weight_feat: $\lambda_p$.
        weight_adv: $\lambda_{adv}$.
        weight_vsd: $\lambda_{vsd}$.
        ema_decay: EMA decay of the returned state.
    """
    if not isinstance(model, tuple) or len(model) != 3:
        raise ValueError("`model` must be the triple (student, discriminator, fake_score).")
    check_in_interval(ema_decay, "ema_decay", 0.0, 1.0, closed=(True, False))
    x, cond = _check_batch(batch)
    x = _flat_batch("x", x)
    student, disc, fake = model
    noise_key, vsd_key, fake_key = jr.split(key, 3)
    g_out = one_step_generate(student, jr.normal(noise_key, x.shape, x.dtype), cond)
    g_sg = jax.lax.stop_gradient(g_out)

    def logits(d, imgs):
        return jax.vmap(lambda im, c: d(features(im, c), c))(imgs, cond)

    loss_g = weight_l2 * jnp.mean(jnp.sum((g_out - x) ** 2, axis=-1))
    if weight_feat:
        loss_g = loss_g + weight_feat * feature_matching_loss(features, g_out, x, cond)
    if weight_adv:
        loss_g = loss_g + weight_adv * hinge_g_loss(logits(_frozen(disc), g_out))
    if weight_vsd:
        loss_g = loss_g + weight_vsd * vsd_loss(g_out, teacher, fake, cond, vsd_key)
    loss_d = _hinge_d_loss(logits(disc, x), logits(disc, g_sg))
    loss_fake = fake_score_loss(fake, g_sg, cond, fake_key)
    loss = loss_g + loss_d + loss_fake
    if state is None:
        return loss
    return loss, ema_update(state, student, ema_decay)


def gan_optimizer(
    generator: optax.GradientTransformation,
    discriminator: optax.GradientTransformation,
    fake_score: optax.GradientTransformation,
) -> optax.GradientTransformation:
    """One optax transformation per player of the ``(student, discriminator, fake)`` triple.

    An ``optax.multi_transform`` labelling every parameter of the triple by its player (the GAN
    stage: AdamW 2e-5 / 1e-4 / 1e-4).
    """
    names = ("generator", "discriminator", "fake_score")

    def labels(params):
        return tuple(
            jax.tree.map(lambda _, n=n: n, part) for part, n in zip(params, names, strict=True)
        )

    return optax.multi_transform(
        dict(zip(names, (generator, discriminator, fake_score), strict=True)), labels
    )


# --------------------------------------------------------------------------------------------
# EMA through fit's state, teacher sampling
# --------------------------------------------------------------------------------------------


def ema_update(ema: PyTree, model: PyTree, decay: float) -> PyTree:
    r"""EMA step $\bar\theta \leftarrow d\,\bar\theta + (1 - d)\,\theta$ (inexact arrays).

    ``ema`` holds the inexact arrays only (``eqx.filter(model, eqx.is_inexact_array)``, the
    form `fit` can carry as ``state``); the result has the same form. Rebuild a model with
    ``eqx.combine(ema, model)``.
    """
    params = eqx.filter(model, eqx.is_inexact_array)
    ema = eqx.filter(ema, eqx.is_inexact_array)
    return jax.tree.map(lambda e, p: decay * e + (1 - decay) * p, ema, params)


def with_ema(loss_fn: Callable[..., Any], decay: float = 0.999) -> Callable[..., Any]:
    """Turn ``loss_fn(model, batch, key)`` into a `fit` state loss carrying an EMA of the model.

    Use as ``fit(with_ema(loss), model, ..., state=eqx.filter(model, eqx.is_inexact_array))``;
    the EMA model is ``eqx.combine(result.state, result.model)``. Keep the returned object (one
    per run) so the compiled step is reused.
    """
    if not 0.0 <= decay < 1.0:
        raise ValueError(f"`decay` must lie in [0, 1), got {decay}.")

    def stateful(model, batch, key, state):
        return loss_fn(model, batch, key), ema_update(state, model, decay)

    return stateful


def sample_velocity_euler(
    key: PRNGKeyArray,
    velocity: AbstractVelocityField,
    cond: Any,
    dim: int,
    *,
    steps: int,
) -> Float[Array, " dim"]:
    r"""One sample of a t = 1-noise velocity field by ``steps`` Euler steps from t = 1 to 0.

    Integrated with `jaxgen.core.solve_ode` in the reversed time $s = 1 - t$
    ($dz/ds = -v(1 - s, z, c)$, $z_{s=0} = \varepsilon$), which is Euler on $v$ downwards on the
    same uniform grid (teacher Euler 1/4/50).
    """
    _positive("steps", steps)
    z0 = jr.normal(key, (dim,))

    def reversed_field(s, z, args):
        return -velocity(1 - s, z, args)

    sol = solve_ode(reversed_field, z0, t0=0.0, t1=1.0, steps=steps, solver=dfx.Euler(), args=cond)
    return sol.ys[-1]
