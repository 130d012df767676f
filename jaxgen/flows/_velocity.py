"""Velocity fields: the interface every flow method implements, and a learnable MLP field."""

import abc
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray


class AbstractVelocityField(eqx.Module):
    """A time-dependent velocity field v(t, x) on one sample; vmap for batches.

    Instances are diffrax vector fields: pass them to `jaxgen.core.solve_ode` as they are.
    """

    dim: eqx.AbstractVar[int]

    @abc.abstractmethod
    def __call__(
        self, t: Float[Array, ""] | float, x: Float[Array, " dim"], args: Any = None
    ) -> Float[Array, " dim"]:
        """Velocity at time ``t`` and position ``x`` (shape ``(dim,)``)."""


class MLPVelocityField(AbstractVelocityField):
    """v_theta(t, x) = MLP([t, x]) with SiLU activations."""

    mlp: eqx.nn.MLP
    dim: int = eqx.field(static=True)

    def __init__(self, dim: int, width: int = 128, depth: int = 3, *, key: PRNGKeyArray):
        """Build an MLP taking ``dim + 1`` inputs (time first) to ``dim`` outputs.

        Args:
            dim: state dimension (>= 1).
            width: hidden width (>= 1).
            depth: number of hidden layers (>= 1).
            key: PRNG key of the initial weights.
        """
        for name, value in (("dim", dim), ("width", width), ("depth", depth)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"`{name}` must be an int >= 1, got {value!r}.")
        self.dim = dim
        self.mlp = eqx.nn.MLP(dim + 1, dim, width, depth, jax.nn.silu, key=key)

    def __call__(self, t, x, args=None):
        if x.shape != (self.dim,):
            raise ValueError(
                f"`x` must have shape ({self.dim},) (one sample; vmap for batches), got {x.shape}."
            )
        t = jnp.reshape(jnp.asarray(t, dtype=x.dtype), (1,))
        return self.mlp(jnp.concatenate([t, x]))
