"""Categorical and uniform draws whose random bits are generated as one flat vector.

Same distributions as `jax.random.categorical` / `jax.random.uniform`; the bits are drawn with
shape ``(size,)`` and reshaped. On XLA:CPU a threefry draw of a rank-3 shape (what a vmapped
``(L, V)`` draw becomes) compiles several times slower than the same number of bits drawn flat:
measured 1.9 s vs 0.4 s for 32768 bits, and the masked sampler's compile went from 12 s to 4 s.
The samplers and the forward noising (`InterpolatingSchedule.sample`, hence the losses' noisy
inputs) draw through these two functions.
"""

import math

import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, ArrayLike, Float, Int, PRNGKeyArray


def categorical(
    key: PRNGKeyArray, logits: Float[ArrayLike, "*batch S"], shape: tuple[int, ...] | None = None
) -> Int[Array, "..."]:
    """Index drawn from ``softmax(logits)`` along the last axis (Gumbel-max).

    ``shape`` (optional) is the batch shape of the draws; ``logits`` broadcast against it.
    """
    logits = jnp.asarray(logits)
    batch = logits.shape[:-1] if shape is None else tuple(shape)
    full = batch + logits.shape[-1:]
    gumbel = jr.gumbel(key, (math.prod(full),), logits.dtype).reshape(full)
    return jnp.argmax(jnp.broadcast_to(logits, full) + gumbel, axis=-1)


def uniform(key: PRNGKeyArray, shape: tuple[int, ...], dtype) -> Float[Array, "*shape"]:
    """``U[0, 1)`` draws of the given shape."""
    return jr.uniform(key, (math.prod(shape),), dtype).reshape(shape)
