"""A generic bounded fixed-point / descent loop with a result flag."""

from collections.abc import Callable
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Int, PyTree

from ._results import RESULTS


class IterateOutput(NamedTuple):
    """State after `iterate`: the final state, the number of steps taken and the result flag."""

    state: PyTree
    num_steps: Int[Array, ""]
    result: RESULTS


def iterate(
    step_fn: Callable[[PyTree], PyTree],
    init_state: PyTree,
    *,
    converged_fn: Callable[[PyTree], Bool[Array, ""]],
    max_steps: int,
    throw: bool = True,
) -> IterateOutput:
    """Apply ``step_fn`` until ``converged_fn(state)`` or ``max_steps``, inside one
    `lax.while_loop`.

    Args:
        step_fn: ``state -> state``, one iteration (pure, traceable).
        init_state: the starting state (a pytree of arrays).
        converged_fn: ``state -> bool[]``, checked before every step.
        max_steps: the most iterations to run (a static Python int >= 1).
        throw: raise (through `eqx.error_if`) when ``max_steps`` is reached or a value is
            non-finite; with ``throw=False`` the flag is only returned.

    Returns:
        `IterateOutput` with the final state, the number of steps and a `RESULTS` flag.
    """
    if not isinstance(max_steps, int) or isinstance(max_steps, bool) or max_steps < 1:
        raise ValueError(f"`max_steps` must be a Python int >= 1, got {max_steps!r}.")

    def finite(state: PyTree) -> Bool[Array, ""]:
        leaves = [x for x in jax.tree_util.tree_leaves(state) if eqx.is_inexact_array(x)]
        return jnp.all(jnp.array([jnp.all(jnp.isfinite(x)) for x in leaves] or [True]))

    def cond(carry: tuple[PyTree, Any]) -> Bool[Array, ""]:
        state, k = carry
        return (k < max_steps) & ~converged_fn(state) & finite(state)

    def body(carry: tuple[PyTree, Any]) -> tuple[PyTree, Any]:
        state, k = carry
        return step_fn(state), k + 1

    state, num_steps = jax.lax.while_loop(cond, body, (init_state, jnp.array(0)))
    result = RESULTS.where(
        ~finite(state),
        RESULTS.nonfinite,
        RESULTS.where(converged_fn(state), RESULTS.successful, RESULTS.max_steps_reached),
    )
    if throw:
        state = result.error_if(state, result != RESULTS.successful)
    return IterateOutput(state, num_steps, result)
