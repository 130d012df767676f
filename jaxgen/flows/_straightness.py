"""Diagnostics of straightness: material acceleration, Euler pushforwards, path straightness."""

from collections.abc import Callable
from typing import Any

import diffrax as dfx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from ..core import solve_ode
from ..core.checks import check_rank

VelocityFn = Callable[[Any, Float[Array, " dim"], Any], Float[Array, " dim"]]


def material_acceleration(
    vector_field: VelocityFn, t: Float[Array, ""] | float, x: Float[Array, " dim"], args: Any = None
) -> Float[Array, " dim"]:
    r"""The material (Lagrangian) acceleration $Dv/Dt = \partial_t v + (\nabla_x v)\, v$ at (t, x).

    One `jax.jvp` of $(t, x) \mapsto v_t(x)$ along the tangent $(1, v_t(x))$. It is zero
    everywhere exactly when the flow is straight, i.e. one Euler step is exact.

    Args:
        vector_field: ``(t, x, args) -> v``, one sample.
        t: time, a scalar.
        x: position, shape ``(dim,)``.
        args: passed to ``vector_field``.

    Returns:
        $Dv/Dt$, shape ``(dim,)``.
    """
    x = jnp.asarray(x)
    if x.ndim != 1:
        raise ValueError(
            f"`x` must be one sample of shape (dim,), got {x.shape}; vmap for batches."
        )
    t = jnp.asarray(t, dtype=x.dtype)

    def field(time: Array, position: Array) -> Array:
        return vector_field(time, position, args)

    velocity = field(t, x)
    _, acceleration = jax.jvp(field, (t, x), (jnp.ones_like(t), velocity))
    return acceleration


def euler_pushforward(
    vector_field: VelocityFn,
    x0: Float[Array, " dim"],
    num_steps: int,
    *,
    t0: float = 0.0,
    t1: float = 1.0,
    args: Any = None,
) -> Float[Array, " dim"]:
    """Push one sample through ``num_steps`` equal explicit-Euler steps from ``t0`` to ``t1``.

    Goes through `jaxgen.core.solve_ode` with `diffrax.Euler`; vmap over ``x0`` for batches.

    Returns:
        The state at ``t1``, shape ``(dim,)``.
    """
    sol = solve_ode(vector_field, x0, t0=t0, t1=t1, solver=dfx.Euler(), steps=num_steps, args=args)
    return sol.ys[-1]


def straightness(
    vector_field: VelocityFn, x0: Float[Array, " dim"], num_steps: int, args: Any = None
) -> Float[Array, ""]:
    r"""Straightness of the flow path from ``x0``: $\int_0^1 \|(Y_1 - Y_0) - v_t(Y_t)\|^2 dt$.

    The path is integrated with ``num_steps`` Euler steps and the integral is the left Riemann
    sum on that grid; zero for a straight path. Average over ``x0`` (vmap) for the expectation.

    References:
        Liu, Gong & Liu, Flow Straight and Fast, arXiv:2209.03003, eq. (9).
    """
    x0 = check_rank(x0, 1, "x0", layout="(dim,)")
    ts = jnp.linspace(0.0, 1.0, num_steps + 1, dtype=jnp.asarray(x0).dtype)
    path = solve_ode(vector_field, x0, solver=dfx.Euler(), steps=num_steps, ts=ts, args=args).ys
    velocities = jax.vmap(lambda t, y: vector_field(t, y, args))(ts[:-1], path[:-1])
    chord = path[-1] - path[0]
    return jnp.mean(jnp.sum((chord[None, :] - velocities) ** 2, axis=-1))
