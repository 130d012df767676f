"""Sampling a Schrödinger bridge: the Doob-drift SDE through `jaxgen.core.solve_sde`."""

from typing import Any

import diffrax as dfx
import equinox as eqx
import jax
import jax.random as jr
from jaxtyping import Array, Float, PRNGKeyArray

from ..core import solve_sde
from ._htransform import doob_drift
from ._potential import AbstractLogPotential
from ._quadrature import Quadrature
from ._reference import AbstractReference, _check_horizon
from ._train import check_samples


class _ConstantDiffusion(eqx.Module):
    root: Float[Array, "dim dim"]

    def __call__(self, t: Any, x: Array, args: Any) -> Array:
        return self.root


def sample_bridge(
    key: PRNGKeyArray,
    psi: AbstractLogPotential,
    ref: AbstractReference,
    T: float,
    x0: Any,
    *,
    num_steps: int = 200,
    quad: Quadrature | None = None,
    solver: dfx.AbstractSolver | None = None,
    ts: Float[Array, " T"] | None = None,
    brownian: str = "virtual",
) -> Float[Array, "B dim"] | Float[Array, "B T dim"]:
    r"""Simulate ``dX = [b(m - X) + Sigma grad log h_psi(X, t)] dt + Sigma^{1/2} dW`` on ``[0, T]``.

    One `jaxgen.core.solve_sde` per path (vmapped, jitted as a whole), ``num_steps`` equal steps
    of ``solver`` (default Euler-Maruyama), the same inner nodes ``quad`` for every path (common
    random numbers). ``X_0 = x0`` (draw it from ``rho0 = N(0, I)`` for the bridge of the paper).

    Args:
        key: PRNG key of the Brownian paths.
        psi: log potential.
        ref: reference diffusion.
        T: horizon (> 0, Python float).
        x0: initial points ``(B, dim)``.
        num_steps: equal steps.
        quad: inner quadrature for ``h`` (``None``: the potential's closed form).
        solver: diffrax SDE solver (default ``Euler()``; ``SRA1()`` for additive noise).
        ts: optional save times in ``(0, T]``.
        brownian: ``"virtual"`` or ``"unsafe"`` (see `solve_sde`).

    Returns:
        ``X_T`` of shape ``(B, dim)``, or the paths at ``ts``, shape ``(B, len(ts), dim)``.

    References:
        Puchkin et al., arXiv 2506.03043 (sampling by the Doob h-transform).
    """
    if not isinstance(T, int | float):
        raise TypeError(f"`T` must be a Python number (static horizon), got {type(T).__name__}.")
    _check_horizon(T)
    x0 = check_samples(x0, ref.dim, "x0")
    drift = doob_drift(psi, ref, T, quad)
    keys = jr.split(key, x0.shape[0])
    return _sample(
        drift,
        _ConstantDiffusion(ref.sqrt_Sigma),
        x0,
        keys,
        float(T),
        num_steps,
        ts,
        solver,
        brownian,
    )


@eqx.filter_jit
def _sample(
    drift: Any,
    diffusion: Any,
    x0: Any,
    keys: Any,
    T: float,
    steps: int,
    ts: Any,
    solver: Any,
    brownian: str,
) -> Array:
    def one(x: Array, k: Array) -> Array:
        sol = solve_sde(
            drift,
            diffusion,
            x,
            key=k,
            t0=0.0,
            t1=T,
            steps=steps,
            ts=ts,
            solver=solver,
            brownian=brownian,
        )
        return sol.ys if ts is not None else sol.ys[-1]

    return jax.vmap(one)(x0, keys)
