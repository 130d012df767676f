"""Linear self-attention, the two-stage construction, and trainable in-context regressors.

* `LinearSelfAttention`: ``(1/n) sum_h (Z W_Q^h)(Z_c W_K^h)^T (Z_c W_V^h) W_O^h`` with keys and
  values restricted to the context tokens (no softmax; cost linear in n).
* `TwoStageConstruction`: a fixed network of kernel heads that reproduces the local-linear
  estimator with a local-PCA tangent: one head returns raw kernel moments, Stage 1
  turns them into the tangent projector by a Newton-Schulz sign iteration, Stage 2 solves the
  reduced local-linear problem by a Schur complement.
* `LinearAttentionICL` and `SoftmaxICL`: trainable models on the tokens ``[psi(x_i); y_i; 0]``
  (context) and ``[psi(x_q); 0; 1]`` (query); `icl_loss` for `jaxgen.core.fit`.

References:
    Katharopoulos et al., Transformers are RNNs (arXiv:2006.16236); von Oswald et al.,
    Transformers learn in-context by gradient descent (arXiv:2212.07677); Rahimi and Recht,
    Random features for large-scale kernel machines (2007); Ching et al., Efficient and
    minimax-optimal in-context nonparametric regression with transformers (arXiv:2601.15014).
"""

import abc
import math
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Bool, Float, PRNGKeyArray

from ...core.checks import check_module, check_positive_int
from ...nn import RMSNorm, TransformerBlock
from ._tasks import ICLBatch

FEATURES = ("exact", "rff")


def _key_mask(mask: Array | None, n: int) -> Bool[Array, " n"]:
    if mask is None:
        return jnp.ones((n,), bool)
    if mask.shape != (n,):
        raise ValueError(
            f"`mask` must have shape ({n},) (one per context token), got {mask.shape}."
        )
    return mask.astype(bool)


class LinearSelfAttention(eqx.Module):
    """Multi-head linear (softmax-free) self-attention on one token matrix ``Z (L, dim)``.

    ``out = (1/n) sum_h (Z W_Q^h) (Z_c W_K^h)^T (Z_c W_V^h) W_O^h`` where ``Z_c`` keeps the
    tokens with ``mask`` True (keys and values) and ``n = mask.sum()``. Computed right to left,
    ``O(L dim head_dim)``. Returns the update (no residual), as `jaxgen.nn.MultiHeadAttention`.
    """

    W_Q: Float[Array, "H dim hd"]
    W_K: Float[Array, "H dim hd"]
    W_V: Float[Array, "H dim hd"]
    W_O: Float[Array, "H hd dim"]

    def __init__(self, dim: int, num_heads: int, head_dim: int, *, key: PRNGKeyArray):
        for name, val in (("dim", dim), ("num_heads", num_heads), ("head_dim", head_dim)):
            if not isinstance(val, int) or val < 1:
                raise ValueError(f"`{name}` must be an int >= 1, got {val!r}.")
        kq, kk, kv, ko = jr.split(key, 4)
        s = 1.0 / math.sqrt(dim)
        self.W_Q = s * jr.normal(kq, (num_heads, dim, head_dim))
        self.W_K = s * jr.normal(kk, (num_heads, dim, head_dim))
        self.W_V = s * jr.normal(kv, (num_heads, dim, head_dim))
        self.W_O = jr.normal(ko, (num_heads, head_dim, dim)) / math.sqrt(head_dim * num_heads)

    def __call__(self, Z: Float[Array, "L dim"], mask: Bool[Array, " L"]) -> Float[Array, "L dim"]:
        """Attention update for every token; keys/values where ``mask`` is True."""
        if Z.ndim != 2 or Z.shape[1] != self.W_Q.shape[1]:
            raise ValueError(f"`Z` must have shape (L, {self.W_Q.shape[1]}), got {Z.shape}.")
        mask = _key_mask(mask, Z.shape[0])
        m = mask.astype(Z.dtype)
        n = jnp.sum(m)
        Z = eqx.error_if(Z, n == 0, "`mask` is all False: linear attention has no keys.")
        Zc = Z * m[:, None]
        k = jnp.einsum("ld,hde->hle", Zc, self.W_K.astype(Z.dtype))
        v = jnp.einsum("ld,hde->hle", Zc, self.W_V.astype(Z.dtype))
        kv = jnp.einsum("hle,hlf->hef", k, v) / n
        q = jnp.einsum("ld,hde->hle", Z, self.W_Q.astype(Z.dtype))
        return jnp.einsum("hle,hef,hfd->ld", q, kv, self.W_O.astype(Z.dtype))


def _check_xy(x: Array, y: Array, xq: Array) -> None:
    if x.ndim != 2:
        raise ValueError(f"`x` must have shape (n, D), got {x.shape}.")
    if y.shape != (x.shape[0],):
        raise ValueError(f"`y` must have shape ({x.shape[0]},) to match x, got {y.shape}.")
    if xq.shape[-1:] != (x.shape[1],) or xq.ndim not in (1, 2):
        raise ValueError(
            f"`xq` must have shape (D,) or (Q, D) with D = {x.shape[1]}, got {xq.shape}."
        )


class AbstractICLRegressor(eqx.Module):
    """An in-context regressor: a context ``(x, y)`` and queries in, predictions out.

    Subclasses implement ``_predict(x, y, xq, ctx)`` on checked inputs, ``ctx`` (n,) bool the
    real context points; `__call__` is the one public entry point.
    """

    def __call__(
        self,
        x: Float[Array, "n D"],
        y: Float[Array, " n"],
        xq: Float[Array, "*Q D"],
        mask: Bool[Array, " n"] | None = None,
    ) -> Float[Array, "*Q"]:
        """Prediction at ``xq (D,)`` -> scalar, or ``(Q, D)`` -> ``(Q,)``.

        ``mask`` (n,) marks the real context points (default: all); padded points are ignored.
        """
        _check_xy(x, y, xq)
        return self._predict(x, y, xq, _key_mask(mask, x.shape[0]))

    @abc.abstractmethod
    def _predict(self, x: Array, y: Array, xq: Array, ctx: Bool[Array, " n"]) -> Float[Array, "*Q"]:
        """The prediction on checked inputs."""


class TwoStageConstruction(AbstractICLRegressor):
    """Hand-set linear-attention network reproducing local-linear regression on a manifold.

    A kernel head ``out(q) = sum_i <psi(q), psi(x_i)> v_i`` with token values
    ``v_i = [1, x_i, vec(x_i x_i^T), y_i, y_i x_i]`` returns the raw moments
    ``S0, S1, S2, T0, T1``. ``psi`` is the Gaussian kernel itself (``"exact"``, the
    M -> infinity limit; evaluated relative to the nearest context point, a factor that cancels
    in every ratio below) or random Fourier features ``sqrt(2/M) cos(Omega x + b)``,
    ``Omega ~ N(0, h^-2 I)`` (``"rff"``).

    Stage 1 (head at ``h_pca``): ``mu = S1/S0``, ``C = S2/S0 - mu mu^T``; projector onto the
    top-d eigenspace by the sign iteration on ``A = C - t I``, ``t = t_frac h_pca^2``:
    ``X_0 = A/|A|_F``, ``X <- 1.5 X - 0.5 X^3`` (``n_sign`` times), ``Pi = (I + X)/2``.

    Stage 2 (head at ``h``): moments centred at the query and projected,
    ``m1 = Pi (S1 - S0 x0)``, ``M2 = Pi (S2 - S1 x0^T - x0 S1^T + S0 x0 x0^T) Pi``,
    ``t1 = Pi (T1 - T0 x0)``, and ``yhat = (T0 - m1^T G t1) / (S0 - m1^T G m1)`` with ``G`` the
    inverse of ``M2`` on range(Pi) (computed as ``Pi (M2 + s (I - Pi))^-1 Pi``).

    With ``atlas=(U (J, D, d), c (J, D))`` Stage 2 runs in the chart ``argmax_j |Pi U_j|_F``
    (the all-chart variant) with ``Pi`` replaced by ``U_j U_j^T``.

    RFF pitfall: the estimate of S0 can be near zero or negative; it is clamped from
    below by ``1e-3 n`` times the median kernel value.
    """

    d: int = eqx.field(static=True)
    h_pca: float = eqx.field(static=True)
    h: float = eqx.field(static=True)
    features: str = eqx.field(static=True)
    t_frac: float = eqx.field(static=True)
    n_sign: int = eqx.field(static=True)
    omega_pca: Float[Array, "D M"] | None
    offset_pca: Float[Array, " M"] | None
    omega: Float[Array, "D M"] | None
    offset: Float[Array, " M"] | None
    atlas: tuple[Float[Array, "J D d"], Float[Array, "J D"]] | None

    def __init__(
        self,
        *,
        d: int,
        h_pca: float,
        h: float,
        features: str = "exact",
        num_features: int = 4096,
        t_frac: float = 0.125,
        n_sign: int = 40,
        key: PRNGKeyArray | None = None,
        D: int | None = None,
        atlas: tuple[Array, Array] | None = None,
    ):
        if not (isinstance(d, int) and d >= 1):
            raise ValueError(f"`d` must be an int >= 1, got {d!r}.")
        for name, val in (("h_pca", h_pca), ("h", h), ("t_frac", t_frac)):
            if not val > 0:
                raise ValueError(f"`{name}` must be > 0, got {val!r}.")
        if features not in FEATURES:
            raise ValueError(f"unknown `features` {features!r}; expected one of {FEATURES}.")
        self.d, self.h_pca, self.h, self.features = d, float(h_pca), float(h), features
        self.t_frac, self.n_sign = float(t_frac), int(n_sign)
        self.omega_pca = self.offset_pca = self.omega = self.offset = None
        if features == "rff":
            if key is None or D is None:
                raise ValueError("features='rff' needs `key` and the ambient dimension `D`.")
            k1, k2, k3, k4 = jr.split(key, 4)
            M = num_features
            self.omega_pca = jr.normal(k1, (D, M)) / h_pca
            self.offset_pca = jr.uniform(k2, (M,), maxval=2 * math.pi)
            self.omega = jr.normal(k3, (D, M)) / h
            self.offset = jr.uniform(k4, (M,), maxval=2 * math.pi)
        if atlas is not None:
            U, c = atlas
            if U.ndim != 3 or U.shape[2] != d or c.shape != U.shape[:2]:
                raise ValueError(
                    f"`atlas` must be (U (J, D, {d}), c (J, D)), got {U.shape} and {c.shape}."
                )
        self.atlas = atlas

    def _kernel(self, x: Array, xq: Array, m: Array, which: str) -> Array:
        """Kernel weights of the query against the context (0 on padding)."""
        h = self.h_pca if which == "pca" else self.h
        d2 = jnp.sum((x - xq[None, :]) ** 2, axis=-1)
        if self.features == "exact":
            shift = jax.lax.stop_gradient(jnp.min(jnp.where(m > 0, d2, jnp.inf)))
            return jnp.exp(-(d2 - shift) / (2 * h**2)) * m
        omega = self.omega_pca if which == "pca" else self.omega
        off = self.offset_pca if which == "pca" else self.offset
        M = omega.shape[1]
        psi = lambda z: math.sqrt(2.0 / M) * jnp.cos(z @ omega.astype(z.dtype) + off[None, :])  # noqa: E731
        return (psi(x) @ psi(xq[None, :])[0]) * m

    def _moments(self, x: Array, y: Array, w: Array, m: Array) -> tuple[Array, ...]:
        """Linear-attention head output ``sum_i w_i v_i`` split into S0, S1, S2, T0, T1."""
        n, D = x.shape
        v = jnp.concatenate(
            [jnp.ones((n, 1), x.dtype), x, (x[:, :, None] * x[:, None, :]).reshape(n, D * D),
             y[:, None], y[:, None] * x], axis=1)  # fmt: skip
        out = w @ v
        S0 = out[0]
        if self.features == "rff":
            floor = 1e-3 * jnp.sum(m) * jnp.median(jnp.where(m > 0, jnp.abs(w), jnp.nan))
            floor = jnp.maximum(jnp.nan_to_num(floor), jnp.finfo(x.dtype).tiny)
            S0 = jnp.maximum(S0, floor)
        S1 = out[1 : 1 + D]
        S2 = out[1 + D : 1 + D + D * D].reshape(D, D)
        T0 = out[1 + D + D * D]
        T1 = out[2 + D + D * D :]
        return S0, S1, S2, T0, T1

    def projector(
        self, x: Float[Array, "n D"], xq: Float[Array, " D"], mask: Bool[Array, " n"] | None = None
    ) -> Float[Array, "D D"]:
        """Stage 1: the tangent projector ``Pi`` at ``xq`` (sign iteration)."""
        m = _key_mask(mask, x.shape[0]).astype(x.dtype)
        w = self._kernel(x, xq, m, "pca")
        S0, S1, S2, _, _ = self._moments(x, jnp.zeros(x.shape[0], x.dtype), w, m)
        mu = S1 / S0
        C = S2 / S0 - jnp.outer(mu, mu)
        eye = jnp.eye(x.shape[1], dtype=x.dtype)
        A = C - self.t_frac * self.h_pca**2 * eye
        X = A / jnp.linalg.norm(A)

        def body(_, X):  # noqa: ANN001
            return 1.5 * X - 0.5 * X @ X @ X

        X = jax.lax.fori_loop(0, self.n_sign, body, X)
        return 0.5 * (eye + X)

    def _predict(self, x: Array, y: Array, xq: Array, ctx: Array) -> Array:
        if xq.ndim == 2:
            return jax.vmap(lambda q: self._predict(x, y, q, ctx))(xq)
        m = ctx.astype(x.dtype)
        x = eqx.error_if(x, jnp.sum(m) == 0, "`mask` is all False: the context has no points.")
        Pi = self.projector(x, xq, m > 0)
        eye = jnp.eye(x.shape[1], dtype=x.dtype)
        if self.atlas is not None:
            U, _ = self.atlas
            j = jnp.argmax(jnp.sum(jnp.einsum("ab,jbd->jad", Pi, U.astype(x.dtype)) ** 2, (1, 2)))
            Pi = U[j].astype(x.dtype) @ U[j].astype(x.dtype).T
        w = self._kernel(x, xq, m, "reg")
        S0, S1, S2, T0, T1 = self._moments(x, y, w, m)
        m1 = Pi @ (S1 - S0 * xq)
        M2 = Pi @ (S2 - jnp.outer(S1, xq) - jnp.outer(xq, S1) + S0 * jnp.outer(xq, xq)) @ Pi
        t1 = Pi @ (T1 - T0 * xq)
        s = jnp.trace(M2) / self.d
        G = Pi @ jnp.linalg.inv(M2 + s * (eye - Pi)) @ Pi
        return (T0 - m1 @ G @ t1) / (S0 - m1 @ G @ m1)


class FourierLift(eqx.Module):
    """Learnable random-Fourier lift ``psi(x) = [cos(Omega x + b), sin(Omega x + b)] / sqrt(M)``."""

    omega: Float[Array, "M D"]
    offset: Float[Array, " M"]

    def __init__(self, D: int, num_frequencies: int, scale: float, *, key: PRNGKeyArray):
        D = check_positive_int(D, "D")
        num_frequencies = check_positive_int(num_frequencies, "num_frequencies")
        k1, k2 = jr.split(key)
        self.omega = scale * jr.normal(k1, (num_frequencies, D))
        self.offset = jr.uniform(k2, (num_frequencies,), maxval=2 * math.pi)

    def __call__(self, x: Float[Array, " D"]) -> Float[Array, " M2"]:
        """Features of one point, shape ``(2M,)``."""
        z = self.omega.astype(x.dtype) @ x + self.offset.astype(x.dtype)
        return jnp.concatenate([jnp.cos(z), jnp.sin(z)]) / math.sqrt(self.omega.shape[0])


class _TokenMLP(eqx.Module):
    norm: RMSNorm
    w1: Float[Array, "hidden dim"]
    w2: Float[Array, "dim hidden"]

    def __init__(self, dim: int, hidden: int, *, key: PRNGKeyArray):
        k1, k2 = jr.split(key)
        self.norm = RMSNorm(dim)
        self.w1 = jr.normal(k1, (hidden, dim)) / math.sqrt(dim)
        self.w2 = jr.normal(k2, (dim, hidden)) * (0.1 / math.sqrt(hidden))

    def __call__(self, h: Float[Array, " dim"]) -> Float[Array, " dim"]:
        return self.w2.astype(h.dtype) @ jax.nn.gelu(self.w1.astype(h.dtype) @ self.norm(h))


def _tokens(lift: FourierLift, embed: Array, x: Array, y: Array, xq: Array) -> tuple[Array, int]:
    """Context tokens ``[psi(x_i); y_i; 0]`` then query tokens ``[psi(x_q); 0; 1]``, embedded."""
    q = xq[None, :] if xq.ndim == 1 else xq
    ctx = jnp.concatenate([jax.vmap(lift)(x), y[:, None], jnp.zeros_like(y)[:, None]], axis=1)
    qry = jnp.concatenate(
        [jax.vmap(lift)(q), jnp.zeros((q.shape[0], 2), x.dtype).at[:, 1].set(1.0)], axis=1
    )
    return jnp.concatenate([ctx, qry], axis=0) @ embed.T.astype(x.dtype), q.shape[0]


class _FourierTokenICL(AbstractICLRegressor):
    """What the two trained in-context regressors share: tokens in, one linear read-out.

    Tokens ``[psi(x_i); y_i; 0]`` (context) and ``[psi(x_q); 0; 1]`` (queries), ``psi`` a
    learnable Fourier lift of width ``2 num_frequencies``, embedded to ``dim``; subclasses mix
    them (``_init_layers``, ``_mix``) and the query tokens are read out after a final RMSNorm.
    Queries never serve as keys, so several queries in one call equal separate calls.
    """

    lift: FourierLift
    embed: Float[Array, "dim F"]
    final_norm: RMSNorm
    readout: Float[Array, " dim"]

    def __init__(
        self,
        D: int,
        *,
        dim: int = 64,
        num_layers: int = 4,
        num_heads: int = 4,
        num_frequencies: int = 128,
        frequency_scale: float = 3.0,
        key: PRNGKeyArray,
        **layer_options: Any,
    ):
        for name, value in (("D", D), ("dim", dim), ("num_layers", num_layers)):
            check_positive_int(value, name)
        num_heads = check_positive_int(num_heads, "num_heads")
        if dim % num_heads:
            raise ValueError(f"`dim` ({dim}) must be divisible by `num_heads` ({num_heads}).")
        kl, ke, *layer_keys, kr = jr.split(key, 3 + self._NUM_LAYER_KEYS)
        self.lift = FourierLift(D, num_frequencies, frequency_scale, key=kl)
        F = 2 * num_frequencies + 2
        self.embed = jr.normal(ke, (dim, F)) / math.sqrt(F)
        self._init_layers(dim, num_layers, num_heads, *layer_keys, **layer_options)
        self.final_norm = RMSNorm(dim)
        self.readout = jr.normal(kr, (dim,)) / math.sqrt(dim)

    _NUM_LAYER_KEYS: ClassVar[int]

    @abc.abstractmethod
    def _init_layers(self, dim: int, num_layers: int, num_heads: int, *keys: PRNGKeyArray):
        """Set the mixing layers from ``_NUM_LAYER_KEYS`` keys."""

    @abc.abstractmethod
    def _mix(self, Z: Float[Array, "L dim"], keys: Bool[Array, " L"]) -> Float[Array, "L dim"]:
        """Mix the tokens; ``keys`` marks those usable as keys/values (real context tokens)."""

    def _predict(self, x: Array, y: Array, xq: Array, ctx: Array) -> Array:
        Z, Q = _tokens(self.lift, self.embed, x, jnp.where(ctx, y, 0.0), xq)
        Z = self._mix(Z, jnp.concatenate([ctx, jnp.zeros((Q,), bool)]))
        out = jax.vmap(self.final_norm)(Z[-Q:]) @ self.readout.astype(Z.dtype)
        return out[0] if xq.ndim == 1 else out


class LinearAttentionICL(_FourierTokenICL):
    """Trainable linear-attention in-context regressor.

    Tokens ``[psi(x_i); y_i; 0]`` (context) and ``[psi(x_q); 0; 1]`` (queries), ``psi`` a
    learnable Fourier lift of width ``2 num_frequencies``, embedded to ``dim``. ``num_layers``
    residual layers ``Z <- Z + LSA(RMSNorm(Z))`` (keys/values: real context tokens only,
    normalised by the true n) then ``Z <- Z + MLP(Z)``; the prediction is a linear read-out of
    the query token. Queries never serve as keys, so several queries in one call equal
    separate calls. No positional encodings (a set input).
    """

    layers: tuple[LinearSelfAttention, ...]
    norms: tuple[RMSNorm, ...]
    mlps: tuple[_TokenMLP, ...]

    _NUM_LAYER_KEYS = 2

    def _init_layers(self, dim: int, num_layers: int, num_heads: int, *keys: PRNGKeyArray):
        ka, km = keys
        self.norms = tuple(RMSNorm(dim) for _ in range(num_layers))
        self.layers = tuple(
            LinearSelfAttention(dim, num_heads, dim // num_heads, key=k)
            for k in jr.split(ka, num_layers)
        )
        self.mlps = tuple(_TokenMLP(dim, 2 * dim, key=k) for k in jr.split(km, num_layers))

    def _mix(self, Z: Float[Array, "L dim"], keys: Bool[Array, " L"]) -> Float[Array, "L dim"]:
        for norm, lsa, mlp in zip(self.norms, self.layers, self.mlps, strict=True):
            Z = Z + lsa(jax.vmap(norm)(Z), keys)
            Z = Z + jax.vmap(mlp)(Z)
        return Z


class SoftmaxICL(_FourierTokenICL):
    """Softmax baseline: the same tokens through `jaxgen.nn.TransformerBlock`s (rotary off).

    Pre-RMSNorm blocks, bidirectional, with the key ``mask`` of `jaxgen.nn.MultiHeadAttention`
    restricted to the real context tokens (queries attend to the context only).

    Takes the arguments of `LinearAttentionICL` plus ``mixer`` (`jaxgen.nn.TransformerBlock`'s
    channel mixer, default ``"mlp"``).
    """

    blocks: tuple[TransformerBlock, ...]

    _NUM_LAYER_KEYS = 1

    def _init_layers(
        self, dim: int, num_layers: int, num_heads: int, key: PRNGKeyArray, *, mixer: str = "mlp"
    ):
        self.blocks = tuple(
            TransformerBlock(dim, num_heads, mixer, {}, rotary=False, time_conditioning=False,
                             out_std=0.02 / math.sqrt(2 * num_layers), key=k)
            for k in jr.split(key, num_layers)
        )  # fmt: skip

    def _mix(self, Z: Float[Array, "L dim"], keys: Bool[Array, " L"]) -> Float[Array, "L dim"]:
        Z = eqx.error_if(Z, ~jnp.any(keys), "`mask` is all False: the context has no points.")
        for block in self.blocks:
            Z, _ = block(Z, None, causal=False, mask=keys)
        return Z


def icl_loss(
    model: AbstractICLRegressor, batch: ICLBatch, key: PRNGKeyArray | None = None
) -> Array:
    """Pretraining loss: mean over tasks and queries of ``(model(x, y, xq, mask) - yq)^2``.

    ``model`` is any `AbstractICLRegressor` (the built-in networks or your own subclass).
    ``batch`` is an `ICLBatch` (from `task_batch`); the labels ``yq`` are noisy, so the optimum
    is the Bayes risk plus ``sigma^2``. Signature ``(model, batch, key)`` for `jaxgen.core.fit`.
    """
    check_module(model, AbstractICLRegressor, "model")
    pred = jax.vmap(model)(batch.x, batch.y, batch.xq, batch.mask)
    return jnp.mean((pred - batch.yq) ** 2)
