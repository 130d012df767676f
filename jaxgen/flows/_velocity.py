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
    """v_theta(t, x) = MLP([t, x]) with SiLU activations; conditional: MLP([t, x, c]).

    With ``cond_dim > 0`` the field is conditional: ``args`` must be a ``(cond_dim,)`` vector
    (e.g. a one-hot class, zeros for "unconditional" under classifier-free guidance).
    """

    mlp: eqx.nn.MLP
    dim: int = eqx.field(static=True)
    cond_dim: int = eqx.field(static=True)

    def __init__(
        self, dim: int, width: int = 128, depth: int = 3, *, key: PRNGKeyArray, cond_dim: int = 0
    ):
        """Build an MLP taking ``dim + 1 + cond_dim`` inputs (time first) to ``dim`` outputs.

        Args:
            dim: state dimension (>= 1).
            width: hidden width (>= 1).
            depth: number of hidden layers (>= 1).
            key: PRNG key of the initial weights.
            cond_dim: size of the condition vector passed as ``args`` (0: unconditional).
        """
        for name, value in (("dim", dim), ("width", width), ("depth", depth)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"`{name}` must be an int >= 1, got {value!r}.")
        if not isinstance(cond_dim, int) or isinstance(cond_dim, bool) or cond_dim < 0:
            raise ValueError(f"`cond_dim` must be an int >= 0, got {cond_dim!r}.")
        self.dim = dim
        self.cond_dim = cond_dim
        self.mlp = eqx.nn.MLP(dim + 1 + cond_dim, dim, width, depth, jax.nn.silu, key=key)

    def __call__(self, t, x, args=None):
        if x.shape != (self.dim,):
            raise ValueError(
                f"`x` must have shape ({self.dim},) (one sample; vmap for batches), got {x.shape}."
            )
        t = jnp.reshape(jnp.asarray(t, dtype=x.dtype), (1,))
        if self.cond_dim == 0:
            return self.mlp(jnp.concatenate([t, x]))
        cond = None if args is None else jnp.asarray(args)
        if cond is None or cond.shape != (self.cond_dim,):
            raise ValueError(
                f"this field is conditional: `args` must be a ({self.cond_dim},) vector, got "
                f"{None if cond is None else cond.shape}."
            )
        return self.mlp(jnp.concatenate([t, x, cond.astype(x.dtype)]))
