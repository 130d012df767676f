r"""Shape checkers (convexity, monotonicity, supermodularity), the ReLU+ corner floor, a sup-error
estimator and a least-squares fitting helper on a box.

Lemma (ReLU+ supermodularity, derived for jaxgen from Bakaev et al. 2025, Thm A): every
ReLU+ network N is non-decreasing, convex and supermodular,
$N(x \vee y) + N(x \wedge y) \ge N(x) + N(y)$. $\mathrm{MAX}_n$ is submodular, so at the four
corners $\{b, b + s e_1, b + s e_2, b + s(e_1 + e_2)\}$ any ReLU+ net errs by at least $s / 4$.

References:
    Bakaev, Brunck, Hertrich, Reichman, Yehudayoff, On the depth of monotone ReLU neural
    networks and ICNNs, arXiv:2505.06169.
"""

from collections.abc import Callable
from typing import Any, Unpack

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import optax
from jaxtyping import Array, Float, PRNGKeyArray, PyTree

from ..core import FitOptions, FitResult, check_fit_options, fit
from ._icnn import ICNN, ReLUPlusNet, _check_int, nonneg_projection

ScalarFn = Callable[[Float[Array, " dim"]], Float[Array, ""]]


def _check_pairs(x: Array, y: Array | None = None) -> None:
    if x.ndim != 2:
        raise ValueError(f"`x` must be 2-D (B, n), got shape {x.shape}.")
    if y is not None and y.shape != x.shape:
        raise ValueError(f"`x` and `y` must have the same shape, got {x.shape} and {y.shape}.")


def convexity_gap(
    f: ScalarFn, x: Float[Array, "B n"], y: Float[Array, "B n"]
) -> Float[Array, " B"]:
    r"""Midpoint convexity gap $f(\tfrac{x+y}2) - \tfrac12(f(x) + f(y))$ per pair (``<= 0`` if
    $f$ is convex). ``f`` acts on one sample; it is vmapped here.
    """
    _check_pairs(x, y)
    fv = jax.vmap(f)
    return fv(0.5 * (x + y)) - 0.5 * (fv(x) + fv(y))


def monotonicity_gap(
    f: ScalarFn, x: Float[Array, "B n"], y: Float[Array, "B n"]
) -> Float[Array, " B"]:
    r"""$f(x \vee y) - f(x)$ per pair (``>= 0`` if $f$ is coordinate-wise non-decreasing)."""
    _check_pairs(x, y)
    fv = jax.vmap(f)
    return fv(jnp.maximum(x, y)) - fv(x)


def supermodularity_gap(
    f: ScalarFn, x: Float[Array, "B n"], y: Float[Array, "B n"]
) -> Float[Array, " B"]:
    r"""$f(x \vee y) + f(x \wedge y) - f(x) - f(y)$ per pair (``>= 0`` if $f$ is supermodular)."""
    _check_pairs(x, y)
    fv = jax.vmap(f)
    return fv(jnp.maximum(x, y)) + fv(jnp.minimum(x, y)) - fv(x) - fv(y)


def corner_points(
    n: int, *, low: float = 0.0, high: float = 1.0, dtype: Any = None
) -> Float[Array, "4 n"]:
    """The four corners ``b, b + s e_1, b + s e_2, b + s (e_1 + e_2)`` with ``b = low``,
    ``s = high - low``.
    """
    n = _check_int("n", n, 2)
    if not high > low:
        raise ValueError(f"need `high` > `low`, got low={low!r}, high={high!r}.")
    dtype = jnp.result_type(float) if dtype is None else dtype
    base = jnp.full((n,), low, dtype)
    e1 = jnp.zeros((n,), dtype).at[0].set(high - low)
    e2 = jnp.zeros((n,), dtype).at[1].set(high - low)
    return jnp.stack([base, base + e1, base + e2, base + e1 + e2])


def corner_floor(
    f: ScalarFn, n: int, *, low: float = 0.0, high: float = 1.0, dtype: Any = None
) -> Float[Array, ""]:
    r"""$\max |f - \mathrm{MAX}_n|$ over the four `corner_points`.

    For every ReLU+ network this is $\ge (\mathrm{high} - \mathrm{low}) / 4$ whatever its size
    and depth ($1/4$ on $[0,1]^n$, $r/2$ on $[-r, r]^n$): supermodularity of the net against
    submodularity of MAX_n. A smaller value means the non-negativity constraint leaks.
    """
    pts = corner_points(n, low=low, high=high, dtype=dtype)
    return jnp.max(jnp.abs(jax.vmap(f)(pts) - jnp.max(pts, axis=-1)))


def sup_error(
    key: PRNGKeyArray,
    f: ScalarFn,
    g: ScalarFn,
    n: int,
    *,
    low: float = -1.0,
    high: float = 1.0,
    num_samples: int = 4096,
    num_starts: int = 64,
    num_ascent: int = 100,
    step_size: float = 0.02,
    dtype: Any = None,
) -> Float[Array, ""]:
    r"""Estimate $\sup_{x \in [\mathrm{low}, \mathrm{high}]^n} |f(x) - g(x)|$ from below.

    Random search over ``num_samples`` uniform points, then projected sign-gradient ascent on
    $|f - g|$ from the ``num_starts`` best points (random sampling alone badly underestimates
    the sup in $n \ge 4$). Returns the best value found (a lower bound of the true sup).
    """
    n = _check_int("n", n, 1)
    num_starts = _check_int("num_starts", num_starts, 1)
    num_samples = _check_int("num_samples", num_samples, num_starts)
    num_ascent = _check_int("num_ascent", num_ascent, 0)
    dtype = jnp.result_type(float) if dtype is None else dtype

    def err(x: Float[Array, " dim"]) -> Float[Array, ""]:
        return jnp.abs(f(x) - g(x))

    x = jr.uniform(key, (num_samples, n), dtype, low, high)
    e = jax.vmap(err)(x)
    best0 = jnp.max(e)
    _, idx = jax.lax.top_k(e, num_starts)
    starts = x[idx]
    grad = jax.vmap(jax.grad(err))
    scale = step_size * (high - low)

    def body(i: Any, carry: tuple[Array, Array]) -> tuple[Array, Array]:
        xs, best = carry
        decay = 1.0 - i / (num_ascent + 1.0)  # shrink steps to settle on a vertex
        xs = jnp.clip(xs + scale * decay * jnp.sign(grad(xs)), low, high)
        return xs, jnp.maximum(best, jnp.max(jax.vmap(err)(xs)))

    _, best = jax.lax.fori_loop(0, num_ascent, body, (starts, best0))
    return best


# --------------------------------------------------------------------------------------------
# least-squares fitting on a box, through jaxgen.core.fit
# --------------------------------------------------------------------------------------------


class BoxSampler(eqx.Module):
    """Pure batch sampler: ``x ~ U[low, high]^n`` and ``y = target(x)`` (fresh batch per step).

    ``target`` maps a batch ``(B, n)`` to ``(B,)`` (e.g. `max_n`, `separation_fk` with k bound).
    Use a module-level ``target`` (not a new lambda per call) so jitted steps are reused.
    """

    target: Callable[[Array], Array] = eqx.field(static=True)
    n: int = eqx.field(static=True)
    batch_size: int = eqx.field(static=True)
    low: float = eqx.field(static=True)
    high: float = eqx.field(static=True)
    dtype: Any = eqx.field(static=True)

    def __init__(
        self,
        target: Callable[[Array], Array],
        n: int,
        batch_size: int,
        *,
        low: float = -1.0,
        high: float = 1.0,
        dtype: Any = None,
    ):
        self.target = target
        self.n = _check_int("n", n, 1)
        self.batch_size = _check_int("batch_size", batch_size, 1)
        if not high > low:
            raise ValueError(f"need `high` > `low`, got low={low!r}, high={high!r}.")
        self.low, self.high = float(low), float(high)
        self.dtype = jnp.result_type(float) if dtype is None else jnp.dtype(dtype)

    def __call__(self, key: PRNGKeyArray) -> tuple[Array, Array]:
        """Draw one batch ``(x, y)`` of shapes ``(batch_size, n)`` and ``(batch_size,)``."""
        x = jr.uniform(key, (self.batch_size, self.n), self.dtype, self.low, self.high)
        return x, self.target(x)


def squared_error_loss(
    model: ScalarFn, batch: tuple[Array, Array], key: PRNGKeyArray
) -> Float[Array, ""]:
    """Mean squared error of a one-sample model on ``batch = (x, y)``."""
    del key
    x, y = batch
    return jnp.mean((jax.vmap(model)(x) - y) ** 2)


def _has_projected(model: PyTree) -> bool:
    leaves = jax.tree_util.tree_leaves(model, is_leaf=lambda m: isinstance(m, ICNN | ReLUPlusNet))
    return any(isinstance(m, ICNN | ReLUPlusNet) and m.mode == "project" for m in leaves)


def fit_on_box(
    model: PyTree,
    target: Callable[[Array], Array],
    *,
    key: PRNGKeyArray,
    num_steps: int,
    optimizer: optax.GradientTransformation | None = None,
    batch_size: int = 1024,
    low: float = -1.0,
    high: float = 1.0,
    **fit_options: Unpack[FitOptions],
) -> FitResult:
    r"""Least squares $\mathbb{E}_{x \sim U[\mathrm{low}, \mathrm{high}]^n}(N(x) - g(x))^2$ with a
    fresh batch per step, via `jaxgen.core.fit`.

    If ``model`` contains a ``mode="project"`` `ICNN`/`ReLUPlusNet`, `nonneg_projection` is
    chained after ``optimizer`` so every step ends on the feasible set (softplus-mode models
    need no projection: their parametrisation is feasible by construction).

    Args:
        model: a `jaxgen.nn` network with ``in_size`` (one sample ``(n,) -> ()``).
        target: the function ``g``, batched: ``(B, n) -> (B,)``; the data are drawn from the
            box by `BoxSampler` (this trainer has no data argument).
        key: PRNG key of the run.
        num_steps: optimiser steps.
        optimizer: default ``optax.adam(1e-3)``.
        batch_size: points per step.
        low, high: the box ``[low, high]^n``.
        **fit_options: `jaxgen.core.FitOptions`, forwarded to `jaxgen.core.fit`.

    Returns:
        `jaxgen.core.FitResult`.
    """
    check_fit_options(fit_options)
    if not hasattr(model, "in_size"):
        raise TypeError(f"`model` must be a jaxgen.nn network with `in_size`, got {type(model)}.")
    if optimizer is None:
        optimizer = optax.adam(1e-3)
    if _has_projected(model):
        optimizer = optax.chain(optimizer, nonneg_projection())
    sampler = BoxSampler(
        target,
        model.in_size,
        batch_size,
        low=low,
        high=high,
        dtype=jax.tree_util.tree_leaves(model)[0].dtype,
    )
    return fit(
        squared_error_loss,
        model,
        sampler,
        optimizer,
        num_steps=num_steps,
        key=key,
        **fit_options,
    )
