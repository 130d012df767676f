r"""Constrained autoencoders: biorthogonal layers whose encoder is an exact left inverse.

Activation pair (Otto, Macchio & Rowley 2023). For :math:`\alpha \in (0, \pi/4)` let
:math:`a = \csc^2\alpha - \sec^2\alpha`, :math:`b = \csc^2\alpha + \sec^2\alpha`,
:math:`d = b^2 - a^2`. Then

.. math:: \sigma_+(u) = (b u + \sqrt{d u^2 + 2a}) / a, \qquad
          \sigma_-(v) = (b v - \sqrt{d v^2 + 2a}) / a

are mutual inverses (both branches of the hyperbola :math:`a u^2 - 2buv + a v^2 = 2`), smooth
leaky-ReLU-like maps with asymptotic slopes :math:`\tan(\pi/4 \pm \alpha)`.

A layer pair maps :math:`R^{n_{in}} \leftrightarrow R^{n_{out}}` (:math:`n_{out} \le n_{in}`)
with decoder :math:`d(z) = \Phi \sigma_+(s z + \beta) + b` and encoder
:math:`e(h) = (\sigma_-(\Psi^\top (h - b)) - \beta)/s`, where
:math:`\Psi^\top = (X\Phi)^{-1} X` so that :math:`\Psi^\top \Phi = I`: hence :math:`e(d(z)) = z`
for every slope s > 0 and shift beta, and :math:`P = D \circ E` is idempotent.

References:
    Otto, Macchio, Rowley, Learning nonlinear projections for reduced-order modeling of
    dynamical systems using constrained autoencoders, Chaos 33 (2023), arXiv:2307.15288.
"""

import abc
import math
from collections.abc import Callable, Sequence
from typing import Any

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray


def _coefficients(alpha: Any) -> tuple[Any, Any, Any]:
    sin2, cos2 = jnp.sin(alpha) ** 2, jnp.cos(alpha) ** 2
    a = 1 / sin2 - 1 / cos2
    b = 1 / sin2 + 1 / cos2
    return a, b, b**2 - a**2


def _check_alpha(alpha: float) -> float:
    if not isinstance(alpha, int | float) or not 0 < alpha < math.pi / 4:
        raise ValueError(f"`alpha` must lie in (0, pi/4), got {alpha!r}.")
    return float(alpha)


# default hyperbolic angle of the activation pair (the paper's choice)
DEFAULT_ALPHA = math.pi / 8


def hyperbolic_pair(alpha: float = DEFAULT_ALPHA) -> tuple[Callable, Callable]:
    r"""The invertible activation pair :math:`(\sigma_+, \sigma_-)` of angle ``alpha``.

    Args:
        alpha: angle in :math:`(0, \pi/4)`; slopes :math:`\tan(\pi/4 \pm \alpha)`.

    Returns:
        ``(sigma_plus, sigma_minus)``, elementwise functions, mutual inverses.
    """
    alpha = _check_alpha(alpha)
    return _activation_pair(alpha)


def _activation_pair(alpha: Any) -> tuple[Callable, Callable]:
    """The pair for a (possibly traced, per-unit) angle; no checks (see `hyperbolic_pair`)."""

    def sigma_plus(u: ArrayLike) -> Array:
        u = jnp.asarray(u)
        a, b, d = _coefficients(jnp.asarray(alpha, u.dtype))
        return (b * u + jnp.sqrt(d * u**2 + 2 * a)) / a

    def sigma_minus(v: ArrayLike) -> Array:
        v = jnp.asarray(v)
        a, b, d = _coefficients(jnp.asarray(alpha, v.dtype))
        return (b * v - jnp.sqrt(d * v**2 + 2 * a)) / a

    return sigma_plus, sigma_minus


@eqx.filter_jit
def _init_biortho(key: PRNGKeyArray, n_in: int, n_out: int, alpha: float) -> tuple[Array, ...]:
    """(Phi, X, b) of a fresh `BiorthoLayer`: one compiled program per shape."""
    q, _ = jnp.linalg.qr(jr.normal(key, (n_in, n_out)))
    a, _, _ = _coefficients(alpha)
    return q, q.T, -(jnp.sqrt(2 * a) / a) * (q @ jnp.ones(n_out))  # d(0) = 0 at init


class BiorthoLayer(eqx.Module):
    r"""One biorthogonal layer pair :math:`R^{n_{in}} \leftrightarrow R^{n_{out}}` (one sample).

    Attributes:
        Phi: decoder matrix ``(n_in, n_out)``.
        X: free matrix ``(n_out, n_in)`` defining :math:`\Psi^\top = (X\Phi)^{-1}X`.
        b: ambient bias ``(n_in,)``.
        alpha: activation angle (static).
    """

    Phi: Float[Array, "n_in n_out"]
    X: Float[Array, "n_out n_in"]
    b: Float[Array, " n_in"]
    alpha: float = eqx.field(static=True)

    def __init__(self, n_in: int, n_out: int, *, key: PRNGKeyArray, alpha: float = DEFAULT_ALPHA):
        for name, v in (("n_in", n_in), ("n_out", n_out)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"`{name}` must be an int >= 1, got {v!r}.")
        if n_out > n_in:
            raise ValueError(
                f"a layer pair needs n_out <= n_in (the decoder matrix is tall), got {n_in} -> "
                f"{n_out}."
            )
        self.alpha = _check_alpha(alpha)
        self.Phi, self.X, self.b = _init_biortho(key, n_in, n_out, self.alpha)

    def psi_T(self) -> Float[Array, "n_out n_in"]:
        r""":math:`\Psi^\top = (X\Phi)^{-1} X` by a linear solve (never an explicit inverse)."""
        return jnp.linalg.solve(self.X @ self.Phi, self.X)

    def decode(
        self, z: Float[Array, " n_out"], s: Any = 1.0, beta: Any = 0.0, alpha: Any = None
    ) -> Float[Array, " n_in"]:
        """``Phi sigma_plus(s z + beta) + b`` (``alpha``: optional per-unit angles)."""
        plus, _ = _activation_pair(self.alpha if alpha is None else alpha)
        return self.Phi.astype(z.dtype) @ plus(s * z + beta) + self.b.astype(z.dtype)

    def encode(
        self, h: Float[Array, " n_in"], s: Any = 1.0, beta: Any = 0.0, alpha: Any = None
    ) -> Float[Array, " n_out"]:
        """``(sigma_minus(Psi^T (h - b)) - beta) / s``: the exact left inverse of `decode`."""
        _, minus = _activation_pair(self.alpha if alpha is None else alpha)
        psi_t = self.psi_T().astype(h.dtype)
        return (minus(psi_t @ (h - self.b.astype(h.dtype))) - beta) / s

    def log_condition(self) -> Float[Array, ""]:
        """``log cond(X Phi)`` (kept small by the training penalty: the solve stays accurate)."""
        sv = jnp.linalg.svd(self.X @ self.Phi, compute_uv=False)
        return jnp.log(sv[0] / sv[-1])


def check_dims(dims: Sequence[int]) -> tuple[int, ...]:
    """Widths from ambient to latent: >= 2 entries, positive ints, non-increasing."""
    dims = tuple(dims)
    if len(dims) < 2 or any(not isinstance(d, int) or isinstance(d, bool) or d < 1 for d in dims):
        raise ValueError(f"`dims` must be >= 2 positive ints (ambient .. latent), got {dims}.")
    if any(b > a for a, b in zip(dims, dims[1:], strict=False)):
        raise ValueError(f"`dims` must be non-increasing from ambient to latent, got {dims}.")
    return dims


def check_sample(x: Array, size: int, name: str) -> Array:
    """One sample of shape ``(size,)``, finite (value check)."""
    x = jnp.asarray(x)
    if x.shape != (size,):
        raise ValueError(f"`{name}` must have shape ({size},) (one sample; vmap), got {x.shape}.")
    return eqx.error_if(x, ~jnp.all(jnp.isfinite(x)), f"`{name}` has NaN or inf entries.")


class AbstractAutoencoder(eqx.Module):
    """The autoencoder slot: a (context-conditioned) encoder/decoder pair on ONE sample.

    Subclasses give ``encode(x (N,), c (p,)) -> (r,)``, ``decode(z (r,), c) -> (N,)`` and
    ``project(x, c) = decode(encode(x, c), c)`` (an unconditioned model ignores ``c``). A model
    that also has ``log_condition()`` gets `ncae_loss`'s conditioning penalty.
    """

    @abc.abstractmethod
    def encode(self, x: Float[Array, " N"], c: Any = None) -> Float[Array, " r"]:
        """Code of one sample under context ``c``."""

    @abc.abstractmethod
    def decode(self, z: Float[Array, " r"], c: Any = None) -> Float[Array, " N"]:
        """Reconstruction of one code under context ``c``."""

    @abc.abstractmethod
    def project(self, x: Float[Array, " N"], c: Any = None) -> Float[Array, " N"]:
        """``decode(encode(x, c), c)``."""


class ConstrainedAE(AbstractAutoencoder):
    """A constrained autoencoder: `BiorthoLayer` s from ambient ``dims[0]`` to latent ``dims[-1]``.

    ``project = decode o encode`` is idempotent by construction. ``c`` is accepted (and ignored)
    so that the class shares the ``(x, c)`` interface of the context models (baseline B4).
    """

    layers: tuple[BiorthoLayer, ...]
    dims: tuple[int, ...] = eqx.field(static=True)

    def __init__(self, dims: Sequence[int], *, key: PRNGKeyArray, alpha: float = DEFAULT_ALPHA):
        self.dims = check_dims(dims)
        keys = jr.split(key, len(self.dims) - 1)
        self.layers = tuple(
            BiorthoLayer(n_in, n_out, key=k, alpha=alpha)
            for n_in, n_out, k in zip(self.dims[:-1], self.dims[1:], keys, strict=True)
        )

    def encode(self, x: Float[Array, " N"], c: Any = None) -> Float[Array, " r"]:
        """Latent coordinates of one sample."""
        h = check_sample(x, self.dims[0], "x")
        for layer in self.layers:
            h = layer.encode(h)
        return h

    def decode(self, z: Float[Array, " r"], c: Any = None) -> Float[Array, " N"]:
        """The point of the manifold with latent coordinates ``z``."""
        h = check_sample(z, self.dims[-1], "z")
        for layer in reversed(self.layers):
            h = layer.decode(h)
        return h

    def project(self, x: Float[Array, " N"], c: Any = None) -> Float[Array, " N"]:
        """``decode(encode(x))``: an idempotent projection onto the learned manifold."""
        return self.decode(self.encode(x, c), c)

    def log_condition(self) -> Float[Array, ""]:
        """Sum over layers of ``log cond(X_l Phi_l)``."""
        return sum(layer.log_condition() for layer in self.layers)  # type: ignore[return-value]
