"""Doob h-transforms: guided drifts ``b + a grad log h`` and the Schrödinger-bridge ``h``.

Conditioning (or tilting) a diffusion ``dX = b dt + sigma dW`` by a space-time harmonic
function ``h`` gives ``dX = [b + a grad_x log h] dt + sigma dW`` with ``a = sigma sigma^T``.
`guided_drift` is that formula for any ``b``, ``a`` and ``grad log h`` (shared with the
tree-guided SDEs); `log_h` and `doob_drift` specialise it to the Schrödinger bridge whose
``h(x, t) = (T_{T-t} e^psi)(x)`` is a heat transform of the log potential ``psi``.
"""

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from ..core.checks import check_finite, check_floating
from ._potential import AbstractClosedFormLogPotential, AbstractLogPotential
from ._quadrature import Quadrature
from ._reference import AbstractReference, _check_horizon


def guide(
    b: Float[Array, " dim"],
    a: Float[Array, "dim dim"] | Float[Array, " dim"],
    grad_log_h: Float[Array, " dim"],
) -> Float[Array, " dim"]:
    r"""The h-transformed drift value ``b + a grad_x log h`` at one point.

    The one formula behind `GuidedDrift`, `DoobDrift` and the guided SDE edges of the tree
    sampler (where ``grad_x log h~ = r~ = F(t) - H(t) x`` for a canonical-form Gaussian ``h~``).

    Args:
        b: the drift ``(dim,)``.
        a: the diffusion matrix ``sigma sigma^T``, ``(dim, dim)`` or its diagonal ``(dim,)``.
        grad_log_h: ``grad_x log h`` ``(dim,)``.

    Returns:
        ``b + a grad_log_h`` ``(dim,)``.
    """
    return b + (a @ grad_log_h if a.ndim == 2 else a * grad_log_h)


class GuidedDrift(eqx.Module):
    """The vector field ``(t, x, args) -> drift(t, x, args) + a(t, x, args) grad_log_h(t, x,
    args)``.

    ``diffusion_matrix`` is an array ``(dim, dim)`` (full ``a``), ``(dim,)`` (diagonal ``a``) or
    a callable ``(t, x, args)`` returning either.
    """

    drift: Callable[..., Array]
    diffusion_matrix: Any
    grad_log_h: Callable[..., Array]

    def __call__(self, t: Any, x: Float[Array, " dim"], args: Any = None) -> Float[Array, " dim"]:
        """The guided drift at ``(t, x)``."""
        a = self.diffusion_matrix
        if callable(a):
            a = a(t, x, args)
        return guide(self.drift(t, x, args), a, self.grad_log_h(t, x, args))


def guided_drift(
    drift: Callable[..., Array], diffusion_matrix: Any, grad_log_h: Callable[..., Array]
) -> GuidedDrift:
    r"""Doob h-transform of a drift: ``b^h(t, x) = b(t, x) + a(t, x) grad_x log h(t, x)``.

    Args:
        drift: ``(t, x, args) -> b``, shape ``(dim,)``.
        diffusion_matrix: ``a = sigma sigma^T`` as an array ``(dim, dim)`` or ``(dim,)``
            (diagonal), or a callable ``(t, x, args)`` returning one.
        grad_log_h: ``(t, x, args) -> grad_x log h``, shape ``(dim,)``.

    Returns:
        A `GuidedDrift` vector field for `jaxgen.core.solve_sde`.

    References:
        Doob, Conditional Brownian motion and the boundary limits of harmonic functions, 1957;
        Dai Pra, A stochastic control approach to reciprocal diffusion processes, 1991.
    """
    if not callable(drift) or not callable(grad_log_h):
        raise TypeError("`drift` and `grad_log_h` must be callables `(t, x, args) -> (dim,)`.")
    if not callable(diffusion_matrix):
        diffusion_matrix = jnp.asarray(diffusion_matrix)
        if diffusion_matrix.ndim not in (1, 2):
            raise ValueError(
                "`diffusion_matrix` must be (dim, dim), (dim,) or a callable, got shape "
                f"{diffusion_matrix.shape}."
            )
    return GuidedDrift(drift, diffusion_matrix, grad_log_h)


def log_h(
    psi: AbstractLogPotential,
    ref: AbstractReference,
    x: Float[Array, " dim"],
    t: Float[ArrayLike, ""],
    T: Float[ArrayLike, ""],
    quad: Quadrature | None = None,
) -> Float[Array, ""]:
    r"""``log h_psi(x, t) = log E_xi exp psi(m_{T-t}(x) + Sigma_{T-t}^{1/2} xi)``.

    With a `Quadrature` (Gauss-Hermite or Monte Carlo nodes ``xi_j``, log-weights ``log w_j``):
    ``logsumexp_j [psi(m_{T-t}(x) + Sigma_{T-t}^{1/2} xi_j) + log w_j]``. With ``quad=None`` the
    potential must have a closed form (`AbstractClosedFormLogPotential`).

    References:
        Puchkin et al., arXiv 2506.03043, Section 2 (the bridge parametrised by one potential).
    """
    T = _check_horizon(T)
    x = jnp.asarray(x)
    if x.ndim != 1 or x.shape[0] != ref.dim:
        raise ValueError(f"`x` must have shape ({ref.dim},), got {x.shape}.")
    return _log_h(psi, ref, x, t, T, quad)


def _log_h(
    psi: AbstractLogPotential,
    ref: AbstractReference,
    x: Array,
    t: ArrayLike,
    T: ArrayLike,
    quad: Quadrature | None,
) -> Array:
    # The body of `log_h` without its checks (the drift calls it at every solver step).
    tau = jnp.asarray(T, x.dtype) - t
    if quad is None:
        if not isinstance(psi, AbstractClosedFormLogPotential):
            raise TypeError(
                f"{type(psi).__name__} has no closed-form heat transform: pass a `quad` "
                "(gauss_hermite or monte_carlo)."
            )
        return psi.log_heat(ref, x, tau)
    if quad.dim != x.shape[0]:
        raise ValueError(f"`quad` has dim {quad.dim}, expected {x.shape[0]}.")
    chol = jnp.sqrt(ref.cov_factor(tau)) * ref.sqrt_Sigma
    ys = ref.mean(x, tau)[None, :] + quad.nodes @ chol.T
    return jax.nn.logsumexp(jax.vmap(psi)(ys) + quad.log_weights)


class DoobDrift(eqx.Module):
    """Schrödinger-bridge drift ``b(m - x) + Sigma grad_x log h_psi(x, t)`` as a vector field."""

    psi: AbstractLogPotential
    ref: AbstractReference
    T: Float[Array, ""]
    quad: Quadrature | None

    def __init__(
        self,
        psi: AbstractLogPotential,
        ref: AbstractReference,
        T: Float[ArrayLike, ""],
        quad: Quadrature | None = None,
    ):
        """Checks the horizon (finite, > 0) and that ``h`` can be computed; see `doob_drift`."""
        T = _check_horizon(T)
        if quad is None and not isinstance(psi, AbstractClosedFormLogPotential):
            raise TypeError(
                f"{type(psi).__name__} has no closed-form heat transform: pass a `quad` "
                "(gauss_hermite or monte_carlo)."
            )
        self.psi = psi
        self.ref = ref
        self.T = jnp.asarray(T, ref.Sigma.dtype)
        self.quad = quad

    def grad_log_h(self, t: Any, x: Float[Array, " dim"], args: Any = None) -> Float[Array, " dim"]:
        """``grad_x log h_psi(x, t)`` by autodiff through the quadrature or the closed form."""
        # `_log_h`: the horizon was checked once by `doob_drift`, not at every solver step.
        return jax.grad(_log_h, argnums=2)(self.psi, self.ref, x, t, self.T, self.quad)

    def __call__(self, t: Any, x: Float[Array, " dim"], args: Any = None) -> Float[Array, " dim"]:
        """The drift at ``(t, x)``."""
        return guide(self.ref.drift(x), self.ref.Sigma, self.grad_log_h(t, x, args))


def doob_drift(
    psi: AbstractLogPotential,
    ref: AbstractReference,
    T: Float[ArrayLike, ""],
    quad: Quadrature | None = None,
) -> DoobDrift:
    r"""The Schrödinger-bridge drift ``beta(t, x) = b(m - x) + Sigma grad_x log h_psi(x, t)``.

    ``h_psi(x, t) = (T_{T-t} e^psi)(x)``; as ``t -> T`` the drift tends to
    ``b(m - x) + Sigma grad psi(x)``. Note the factor ``Sigma`` (with ``Sigma = 2 I`` omitting it
    halves the guidance). Equivalent to ``guided_drift(ref drift, Sigma, grad log h)``.

    Args:
        psi: the log potential.
        ref: the reference diffusion.
        T: the horizon (> 0).
        quad: inner quadrature for ``h``; ``None`` uses the potential's closed form.

    Returns:
        A `DoobDrift` vector field ``(t, x, args) -> (dim,)`` for `jaxgen.core.solve_sde`.

    References:
        Puchkin et al., arXiv 2506.03043; Dai Pra 1991.
    """
    return DoobDrift(psi, ref, T, quad)


def drift_ess(
    psi: AbstractLogPotential,
    ref: AbstractReference,
    x: Float[Array, " dim"],
    t: Float[ArrayLike, ""],
    T: Float[ArrayLike, ""],
    quad: Quadrature,
) -> Float[Array, ""]:
    """Relative effective sample size ``(sum w)^2 / (M sum w^2)`` of the self-normalised weights
    ``w_j ∝ w_j^0 exp psi(y_j)`` behind ``grad log h`` (1 = uniform; below 0.1 the drift is noisy).
    """
    T = _check_horizon(T)
    x = check_finite(check_floating(x, "x"), "x")
    if x.ndim != 1 or x.shape[0] != ref.dim:
        raise ValueError(f"`x` must have shape ({ref.dim},), got {x.shape}.")
    t = check_finite(t, "t")
    tau = jnp.asarray(T, x.dtype) - t
    chol = jnp.sqrt(ref.cov_factor(tau)) * ref.sqrt_Sigma
    ys = ref.mean(x, tau)[None, :] + quad.nodes @ chol.T
    logw = jax.vmap(psi)(ys) + quad.log_weights
    logw = logw - jax.nn.logsumexp(logw)
    return 1.0 / (quad.nodes.shape[0] * jnp.sum(jnp.exp(2.0 * logw)))
