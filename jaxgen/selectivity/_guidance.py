r"""Selectivity guidance for flow generators: an objective and a guided velocity field.

Time runs as in `jaxgen.flows`: :math:`x_t = t x_1 + (1-t) x_0`, :math:`x_0 \sim N(0, I)` at
``t = 0`` and data at ``t = 1``, velocity :math:`v(t, x) = E[x_1 - x_0 \mid x_t = x]`. The
denoiser is :math:`\hat x_1 = x + (1-t) v`. Adding :math:`w \nabla \log p(y \mid x_t)` to the
score adds :math:`w (1-t)/t\, \nabla \log p(y \mid x_t)` to the velocity (score identity
:math:`\nabla \log p_t = (t v - x)/(1-t)`); with :math:`p(y \mid x_t) \propto \exp J(\hat x_1)`
the guided field is

.. math:: \tilde v(t, x) = v(t, x) + w \frac{1-t}{\max(t, t_{\min})} \nabla_x J(\hat x_1(t, x)).

For a Gaussian target and a linear :math:`J(x) = b^\top x` this is exactly the velocity of the
tilted law :math:`N(\mu + \Sigma b, \Sigma)` (tested).

References:
    Dhariwal & Nichol, arXiv 2105.05233 (classifier guidance); Chung et al., arXiv 2209.14687
    (guidance through the denoiser); SelectBench (selectivity objective, reconstructed).
"""

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from ..core.checks import check_finite


class SelectivityObjective(eqx.Module):
    r"""Selectivity of one sample: :math:`J = a_{on} - \lambda[\tau \operatorname{LSE}_k(a_k/\tau)
    - \tau \log K]`.

    Affinities are HIGHER = better binding (e.g. minus a docking energy). The bracket is a soft
    maximum over the K off-targets: the max as :math:`\tau \to 0`, the mean as
    :math:`\tau \to \infty`.

    Attributes:
        on_fn: ``x1 (dim,) -> scalar`` on-target affinity.
        off_fn: ``x1 (dim,) -> (K,)`` off-target affinities.
        off_weight: :math:`\lambda \ge 0` (an array leaf, so it may be traced).
        temperature: :math:`\tau > 0`.
    """

    on_fn: Callable[[Array], Array]
    off_fn: Callable[[Array], Array]
    off_weight: Float[Array, ""]
    temperature: float = eqx.field(static=True)

    def __init__(
        self,
        on_fn: Callable[[Array], Array],
        off_fn: Callable[[Array], Array],
        *,
        off_weight: float | Array = 1.0,
        temperature: float = 0.5,
    ):
        if not callable(on_fn) or not callable(off_fn):
            raise TypeError("`on_fn` and `off_fn` must be callables of one sample.")
        if isinstance(off_weight, int | float) and not off_weight >= 0:
            raise ValueError(f"`off_weight` must be >= 0, got {off_weight}.")
        if not temperature > 0:
            raise ValueError(f"`temperature` must be > 0, got {temperature}.")
        self.on_fn, self.off_fn = on_fn, off_fn
        # an array leaf: objectives that differ only in lambda share one compiled sampler
        self.off_weight = jnp.asarray(off_weight, dtype=jnp.result_type(float))
        self.temperature = float(temperature)

    def __call__(self, x1: Float[ArrayLike, " dim"]) -> Float[Array, ""]:
        """The objective at one (predicted) clean sample."""
        x1 = jnp.asarray(x1)
        on = jnp.asarray(self.on_fn(x1))
        off = jnp.atleast_1d(jnp.asarray(self.off_fn(x1)))
        if on.shape != () or off.ndim != 1:
            raise ValueError(
                f"`on_fn` must return a scalar and `off_fn` a (K,) vector, got {on.shape} and "
                f"{off.shape}."
            )
        tau = jnp.asarray(self.temperature, off.dtype)
        soft_max = tau * (jax.nn.logsumexp(off / tau) - jnp.log(off.shape[0]))
        return on - self.off_weight.astype(soft_max.dtype) * soft_max


class ClassifierGuidedVelocity(eqx.Module):
    r"""``v + w (1-t)/max(t, t_min) grad_x J(x1_hat)`` around any velocity ``base(t, x, args)``.

    Attributes:
        base: the unguided velocity field (any ``(t, x, args) -> (dim,)`` callable, e.g. a
            `jaxgen.flows` field); one sample.
        objective: ``x1 -> scalar`` to increase (e.g. `SelectivityObjective`).
        scale: guidance weight w; ``0`` returns ``base(t, x, args)`` bit for bit.
        t_min: the factor's denominator is ``max(t, t_min)`` (> 0): it explodes as t -> 0.
        through_denoiser: differentiate ``J(x + (1-t) v(t, x))`` with respect to x (one VJP
            through the base field, the exact form); ``False`` takes ``grad J`` at ``x1_hat``
            (no VJP: cheaper, exact only where the denoiser's Jacobian is the identity).
    """

    base: Callable[..., Array]
    objective: Callable[[Array], Array]
    scale: float = eqx.field(static=True)
    t_min: float = eqx.field(static=True)
    through_denoiser: bool = eqx.field(static=True)

    def __init__(
        self,
        base: Callable[..., Array],
        objective: Callable[[Array], Array],
        *,
        scale: float = 1.0,
        t_min: float = 0.05,
        through_denoiser: bool = True,
    ):
        if not callable(base) or not callable(objective):
            raise TypeError("`base` and `objective` must be callables.")
        if not t_min > 0:
            raise ValueError(f"`t_min` must be > 0, got {t_min}.")
        check_finite(scale, "scale")  # a number: raises now
        self.base, self.objective = base, objective
        self.scale, self.t_min = float(scale), float(t_min)
        self.through_denoiser = bool(through_denoiser)

    def __call__(self, t: Any, x: Float[Array, " dim"], args: Any = None) -> Float[Array, " dim"]:
        """The guided velocity at time ``t`` (t = 1 is data) and state ``x``."""
        if self.scale == 0:
            return self.base(t, x, args)
        t = jnp.asarray(t, x.dtype)

        def denoised(y: Array) -> tuple[Array, Array]:
            v = self.base(t, y, args)
            return y + (1 - t) * v, v

        if self.through_denoiser:
            x1_hat, vjp, v = jax.vjp(denoised, x, has_aux=True)
            (grad,) = vjp(jax.grad(self.objective)(x1_hat))
        else:
            x1_hat, v = denoised(x)
            grad = jax.grad(self.objective)(x1_hat)
        factor = self.scale * (1 - t) / jnp.maximum(t, self.t_min)
        return v + factor * grad
