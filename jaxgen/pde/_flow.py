"""Conditional normalizing-flow transition density built on a frozen-coefficient Gaussian
reference.
"""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jax.flatten_util import ravel_pytree
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

from jaxgen.flows import ConditionalMonotoneTanh, ConditionalSmoothCouplingFlow

from ..core.checks import check_module
from ._models import AbstractDiffusionModel, _check_time


def to_y(model: AbstractDiffusionModel, x: Float[Array, " dim"]) -> Float[Array, " dim"]:
    """Y = phi(x): log on the positive coordinates, identity elsewhere.

    ``x`` must be > 0 on the model's positive coordinates (`check_state`, a value check).
    """
    return _to_y(model, model.check_state(x, "x"))


def _to_y(model: AbstractDiffusionModel, x: Array) -> Array:
    # The body of `to_y` (the flow density calls it on checked states).
    return jnp.where(
        jnp.asarray(model.positive), jnp.log(jnp.where(jnp.asarray(model.positive), x, 1.0)), x
    )


def from_y(model: AbstractDiffusionModel, y: Float[Array, " dim"]) -> Float[Array, " dim"]:
    """X = phi^{-1}(y)."""
    return jnp.where(jnp.asarray(model.positive), jnp.exp(y), y)


def log_abs_det_jphi(model: AbstractDiffusionModel, x: Float[Array, " dim"]) -> Float[Array, ""]:
    """log|det d phi / dx| = -sum of log x over the positive coordinates.

    ``x`` must be > 0 on the model's positive coordinates (`check_state`, a value check).
    """
    return _log_abs_det_jphi(model, model.check_state(x, "x"))


def _log_abs_det_jphi(model: AbstractDiffusionModel, x: Array) -> Array:
    # The body of `log_abs_det_jphi` (the flow density calls it on checked states).
    mask = jnp.asarray(model.positive)
    return -jnp.sum(jnp.where(mask, jnp.log(jnp.where(mask, x, 1.0)), 0.0))


def frozen_gaussian_reference(
    model: AbstractDiffusionModel,
    x0: Float[Array, " dim"],
    lam: Float[Array, " p"],
    t: Float[ArrayLike, ""],
) -> tuple[Float[Array, " dim"], Float[Array, "dim dim"]]:
    r"""Mean m(t) and Cholesky factor L(t) of the reference Gaussian in y = phi(x).

    Coefficients in y (Itô): b^y_k = grad phi_k . b + 1/2 tr(a hess phi_k), a^y = J a J^T,
    frozen at x0: m(t) = y0 + t b^y(x0), L(t) = sqrt(t) chol(a^y(x0)). It tends to the Dirac
    delta at y0 as t -> 0 and is exact to first order in t.

    ``x0`` (`check_state`), ``lam`` (`check_params`) and ``t`` (finite and > 0) are checked;
    the flow density calls the body without the checks.
    """
    check_module(model, AbstractDiffusionModel, "model")
    x0 = model.check_state(x0, "x0")
    if x0.shape != (model.dim,):
        raise ValueError(f"`x0` must have shape ({model.dim},), got {x0.shape}.")
    lam = model.check_params(lam)
    return _frozen_gaussian_reference(model, x0, lam, _check_time(t))


def _frozen_gaussian_reference(
    model: AbstractDiffusionModel, x0: Array, lam: Array, t: ArrayLike
) -> tuple[Array, Array]:
    # The body of `frozen_gaussian_reference` (called for every transition density).
    mask = jnp.asarray(model.positive)
    b, a = model.drift(x0, lam), model.diffusion(x0, lam)
    inv = jnp.where(mask, 1.0 / jnp.where(mask, x0, 1.0), 1.0)  # diagonal of J phi
    by = jnp.where(mask, b * inv - 0.5 * jnp.diag(a) * inv**2, b)
    ay = inv[:, None] * a * inv[None, :]
    return _to_y(model, x0) + t * by, jnp.sqrt(t) * jnp.linalg.cholesky(ay)


class TransitionFlow(eqx.Module):
    r"""Normalizing-flow transition density p_theta(t, x | x0, lam) of a diffusion model.

    l(t, x | c) = log N(S(zeta; f(c)); 0, I) + log|det dS/dzeta| - log|det L(t)| + log|det J
    phi(x)|,
    zeta = L(t)^{-1}(phi(x) - m(t)), with (m, L) the frozen-coefficient Gaussian reference
    (`frozen_gaussian_reference`), phi = log on positive coordinates (so the support is the
    state space exactly) and S a smooth (C^infinity) bijection: for dim = 1 the monotone tanh
    map (`jaxgen.flows.ConditionalMonotoneTanh`), for dim >= 2 ``num_blocks`` blocks of
    [elementwise monotone map -> affine coupling -> coordinate reversal]
    (`jaxgen.flows.ConditionalSmoothCouplingFlow`; 2 blocks for Heston).
    The conditioners see the features f(c) of
    c = (x0, lam) scaled to [-1, 1] by the training box (log scale for positive entries);
    coordinates in which the model is translation invariant (``model.shift_invariant``, e.g.
    Heston's log price s) enter only through the reference mean, so their x0 feature is 0.
    At initialisation S is the identity, so p is the reference. Mass is exactly one for every
    parameter value. With ``time_features=True`` the conditioner also sees
    tau = scaled log t (space-time ablation); otherwise time enters only through theta(t)
    (Neural Galerkin) and (m, L).

    The only inexact arrays of this module are the conditioner weights theta.

    References:
        Saporiti and Nobile, arXiv 2606.04324 and arXiv 2603.18907 (2026).
    """

    model: AbstractDiffusionModel
    bijection: ConditionalMonotoneTanh | ConditionalSmoothCouplingFlow
    box_lo: tuple[float, ...] = eqx.field(static=True)
    box_hi: tuple[float, ...] = eqx.field(static=True)
    log_features: tuple[bool, ...] = eqx.field(static=True)
    time_range: tuple[float, float] | None = eqx.field(static=True)

    def __init__(
        self,
        model: AbstractDiffusionModel,
        box_lo: Float[ArrayLike, " q"],
        box_hi: Float[ArrayLike, " q"],
        *,
        num_units: int = 8,
        width: int = 32,
        depth: int = 2,
        num_blocks: int = 2,
        time_range: tuple[float, float] | None = None,
        key: PRNGKeyArray,
    ):
        """Build an identity-initialised flow.

        Args:
            model: the diffusion model.
            box_lo: lower corner of the training box of c = (x0, lam), shape
                ``(dim + p,)``.
            box_hi: upper corner, same shape, ``box_hi > box_lo``.
            num_units: tanh units K of each 1-D map.
            width: conditioner width.
            depth: conditioner depth.
            num_blocks: blocks of the coupling flow (dim >= 2 only).
            time_range: ``(t_min, t_max)`` to feed scaled log t to the conditioner
                (space-time ablation); ``None`` for Neural Galerkin.
            key: PRNG key.
        """
        lo = tuple(float(v) for v in np.ravel(np.asarray(box_lo)))
        hi = tuple(float(v) for v in np.ravel(np.asarray(box_hi)))
        q = model.dim + len(model.param_names)
        if len(lo) != q or len(hi) != q:
            raise ValueError(
                f"`box_lo` and `box_hi` must have shape ({q},) for c = (x0, lam), "
                f"got {len(lo)} and {len(hi)} entries."
            )
        if not all(math.isfinite(v) for v in lo + hi):
            raise ValueError(f"`box_lo` and `box_hi` must be finite, got {lo} and {hi}.")
        if not all(h > l_ for l_, h in zip(lo, hi, strict=True)):
            raise ValueError(f"`box_hi` must exceed `box_lo` entrywise, got {lo} and {hi}.")
        logf = tuple(model.positive) + tuple(v > 0 for v in lo[model.dim :])
        self.log_features = tuple(bool(f and l_ > 0) for f, l_ in zip(logf, lo, strict=True))
        self.model, self.box_lo, self.box_hi = model, lo, hi
        if time_range is not None and not 0 < time_range[0] < time_range[1]:
            raise ValueError(
                f"`time_range` must be (t_min, t_max) with 0 < t_min < t_max, got {time_range}."
            )
        self.time_range = (
            None if time_range is None else (float(time_range[0]), float(time_range[1]))
        )
        cond_dim = q + (time_range is not None)
        if model.dim == 1:
            self.bijection = ConditionalMonotoneTanh(
                1, cond_dim, num_units=num_units, width=width, depth=depth, key=key
            )
        else:
            self.bijection = ConditionalSmoothCouplingFlow(
                model.dim,
                cond_dim,
                num_blocks=num_blocks,
                num_units=num_units,
                width=width,
                depth=depth,
                key=key,
            )

    def features(
        self, t: Float[ArrayLike, ""], x0: Float[Array, " dim"], lam: Float[Array, " p"]
    ) -> Float[Array, " q"]:
        """Conditioner input: c = (x0, lam) scaled to [-1, 1] by the box (+ scaled log t)."""
        c = jnp.concatenate([x0, lam])
        mask = jnp.asarray(self.log_features)
        lo = jnp.asarray(self.box_lo, dtype=c.dtype)
        hi = jnp.asarray(self.box_hi, dtype=c.dtype)
        g = lambda v: jnp.where(mask, jnp.log(jnp.where(mask, jnp.abs(v), 1.0)), v)  # noqa: E731
        f = 2.0 * (g(c) - g(lo)) / (g(hi) - g(lo)) - 1.0
        shift = tuple(self.model.shift_invariant) + (False,) * lam.shape[0]
        if any(shift):
            f = jnp.where(jnp.asarray(shift), 0.0, f)
        if self.time_range is not None:
            a, b = math.log(self.time_range[0]), math.log(self.time_range[1])
            tau = 2.0 * (jnp.log(t) - a) / (b - a) - 1.0
            f = jnp.concatenate([f, jnp.reshape(tau, (1,)).astype(f.dtype)])
        return f

    def log_density(
        self,
        t: Float[ArrayLike, ""],
        x: Float[Array, " dim"],
        x0: Float[Array, " dim"],
        lam: Float[Array, " p"],
    ) -> Float[Array, ""]:
        """Log p_theta(t, x | x0, lam) for one state ``x`` (shape ``(dim,)``), t > 0."""
        d = self.model.dim
        if x.shape != (d,) or x0.shape != (d,):
            raise ValueError(f"`x` and `x0` must have shape ({d},), got {x.shape} and {x0.shape}.")
        t = jnp.asarray(t, dtype=x.dtype)
        m, chol = _frozen_gaussian_reference(self.model, x0, lam, t)
        zeta = jax.scipy.linalg.solve_triangular(chol, _to_y(self.model, x) - m, lower=True)
        z, logdet = self.bijection.transform_and_log_det(zeta, self.features(t, x0, lam))
        return (
            -0.5 * z @ z
            - 0.5 * d * jnp.log(2 * jnp.pi)
            + logdet
            - jnp.sum(jnp.log(jnp.diag(chol)))
            + _log_abs_det_jphi(self.model, x)
        )

    def sample(
        self,
        key: PRNGKeyArray,
        t: Float[ArrayLike, ""],
        x0: Float[Array, " dim"],
        lam: Float[Array, " p"],
        num: int,
    ) -> Float[Array, "num dim"]:
        """``num`` draws from p_theta(t, . | x0, lam): z ~ N(0, I), zeta = S^{-1}(z), x =
        phi^{-1}(m + L zeta).
        """
        z = jr.normal(key, (num, self.model.dim), dtype=x0.dtype)
        t = jnp.asarray(t, dtype=x0.dtype)
        m, chol = _frozen_gaussian_reference(self.model, x0, lam, t)
        cond = self.features(t, x0, lam)
        zeta = jax.vmap(lambda zi: self.bijection.inverse(zi, cond))(z)
        return jax.vmap(lambda zt: from_y(self.model, m + chol @ zt))(zeta)


def flow_parameters(flow: TransitionFlow):
    """Flatten the trainable weights theta of ``flow``: returns ``(theta (P,), unravel)``.

    ``unravel(theta)`` rebuilds a `TransitionFlow` with weights ``theta``.
    """
    params, static = eqx.partition(flow, eqx.is_inexact_array)
    flat, unravel_params = ravel_pytree(params)
    return flat, lambda theta: eqx.combine(unravel_params(theta), static)
