"""The one ODE/SDE layer of jaxgen: thin wrappers over `diffrax.diffeqsolve`.

Every method that integrates a flow, a bridge, a guided SDE or a Fokker-Planck rollout calls
`solve_ode` or `solve_sde`, so defaults, step-size rules and failure handling live here.
"""

from collections.abc import Callable
from typing import Any

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import lineax as lx
from jaxtyping import Array, Float, PRNGKeyArray, PyTree

from .checks import check_finite, check_key


def _check_y0(y0: PyTree[Array]) -> PyTree[Array]:
    """Every floating leaf of ``y0`` finite: a NaN start would otherwise surface as a solver
    failure ("maximum number of solver steps") that points away from the cause.
    """
    return jax.tree.map(lambda leaf: check_finite(leaf, "y0"), y0)


def _check_interval(t0: Any, t1: Any) -> None:
    if isinstance(t0, int | float) and isinstance(t1, int | float) and not t1 > t0:
        raise ValueError(f"`t1` must be greater than `t0`, got t0={t0} and t1={t1}.")


def _check_steps(steps: Any) -> None:
    if steps is None:
        return
    if not isinstance(steps, int) or isinstance(steps, bool):
        raise TypeError(f"`steps` must be a Python int (a static number of steps), got {steps!r}.")
    if steps < 1:
        raise ValueError(f"`steps` must be >= 1, got {steps}.")


def _times_like(y0: Any, t0: Any, t1: Any, ts: Any) -> tuple[Any, Any, Any]:
    """Times in the state's float dtype: with x64 on, Python-float times would otherwise be
    float64 and promote a float32 state to float64 at the first step.
    """
    leaves = [
        x for x in jax.tree_util.tree_leaves(y0) if jnp.issubdtype(jnp.result_type(x), jnp.floating)
    ]
    if not leaves:
        return t0, t1, ts
    dtype = jnp.result_type(*leaves)
    cast = lambda t: None if t is None else jnp.asarray(t, dtype)  # noqa: E731
    return cast(t0), cast(t1), cast(ts)


def _saveat(ts: Float[Array, " T"] | None, t0: Any, t1: Any) -> dfx.SaveAt:
    if ts is None:
        return dfx.SaveAt(t1=True)
    ts = jnp.asarray(ts)
    if ts.ndim != 1 or ts.shape[0] < 1:
        raise ValueError(f"`ts` must be a non-empty 1-D array of times, got shape {ts.shape}.")
    ts = eqx.error_if(
        ts,
        jnp.any(jnp.diff(ts) <= 0),
        "`ts` must be strictly increasing.",
    )
    ts = eqx.error_if(ts, (ts[0] < t0) | (ts[-1] > t1), "`ts` must lie inside [t0, t1].")
    return dfx.SaveAt(ts=ts)


def solve_ode(
    vector_field: Callable[..., PyTree[Array]],
    y0: PyTree[Array],
    *,
    t0: float | Float[Array, ""] = 0.0,
    t1: float | Float[Array, ""] = 1.0,
    ts: Float[Array, " T"] | None = None,
    solver: dfx.AbstractSolver | None = None,
    steps: int | None = None,
    rtol: float = 1e-5,
    atol: float = 1e-5,
    args: Any = None,
    dt0: float | None = None,
    max_steps: int = 4096,
    adjoint: dfx.AbstractAdjoint | None = None,
    throw: bool = True,
) -> dfx.Solution:
    """Integrate dy/dt = f(t, y, args) from ``t0`` to ``t1``.

    ``steps=k`` takes k equal steps with ``solver`` (any diffrax solver, e.g. ``dfx.Euler()``);
    otherwise the step size is adaptive (PID controller with ``rtol``/``atol``).

    Args:
        vector_field: ``(t, y, args) -> dy/dt`` with the pytree structure of ``y0``; a jaxgen
            `AbstractVelocityField` instance works as is.
        y0: initial state (any pytree of arrays; vmap over this function for batches).
        t0: start time (a Python float or a traced scalar, e.g. under `jax.jit` / `jax.vmap`).
        t1: end time, ``t1 > t0`` (checked at trace time when both are Python numbers).
        ts: optional strictly increasing save times in ``[t0, t1]``, shape ``(T,)``; then
            ``sol.ys`` has a leading axis of length ``T``. Without it only ``t1`` is saved
            (``sol.ys`` has a leading axis of length 1).
        solver: a diffrax solver; default ``Tsit5()`` (``Euler()`` is typical with ``steps``).
        steps: number of fixed, equal steps; ``None`` for adaptive stepping.
        rtol: relative tolerance of the adaptive controller.
        atol: absolute tolerance of the adaptive controller.
        args: passed to ``vector_field``.
        dt0: initial step for adaptive stepping (``None`` lets diffrax choose).
        max_steps: the most solver steps (raised to ``steps`` when that is larger).
        adjoint: diffrax adjoint (default: recursive checkpointing, reverse-mode friendly).
        throw: raise on solver failure and on a non-finite ``y0``; with ``False`` inspect
            ``sol.result`` (nothing is checked at run time then).

    Returns:
        The `diffrax.Solution` (``sol.ts``, ``sol.ys``, ``sol.result``, ``sol.stats``).

    Raises:
        ValueError: for ``t1 <= t0`` or a bad ``steps`` at trace time; with ``throw``, for a NaN
            or inf in ``y0`` (an ``EquinoxRuntimeError`` under `jax.jit`).

    Examples:
        >>> import jax.numpy as jnp
        >>> sol = solve_ode(lambda t, y, args: -y, jnp.array([1.0]), rtol=1e-8, atol=1e-8)
        >>> round(float(sol.ys[-1, 0]), 6)
        0.367879
    """
    _check_interval(t0, t1)
    _check_steps(steps)
    t0, t1, ts = _times_like(y0, t0, t1, ts)
    if throw:
        y0 = _check_y0(y0)
    solver = dfx.Tsit5() if solver is None else solver
    if steps is not None:
        controller: dfx.AbstractStepSizeController = dfx.ConstantStepSize()
        dt0 = (t1 - t0) / steps
        max_steps = max(max_steps, steps)
    else:
        controller = dfx.PIDController(rtol=rtol, atol=atol)
    adjoint = dfx.RecursiveCheckpointAdjoint() if adjoint is None else adjoint
    return dfx.diffeqsolve(
        dfx.ODETerm(vector_field),
        solver,
        t0,
        t1,
        dt0,
        y0,
        args,
        saveat=_saveat(ts, t0, t1),
        stepsize_controller=controller,
        max_steps=max_steps,
        adjoint=adjoint,
        throw=throw,
    )


def solve_sde(
    drift: Callable[..., Float[Array, "..."]],
    diffusion: Callable[..., Float[Array, "..."]],
    y0: Float[Array, "..."],
    *,
    key: PRNGKeyArray,
    t0: float = 0.0,
    t1: float = 1.0,
    steps: int = 100,
    ts: Float[Array, " T"] | None = None,
    solver: dfx.AbstractSolver | None = None,
    args: Any = None,
    brownian: str = "virtual",
    adjoint: dfx.AbstractAdjoint | None = None,
    throw: bool = True,
) -> dfx.Solution:
    """Integrate the Itô SDE dY = b(t, Y) dt + sigma(t, Y) dW with ``steps`` equal steps.

    The noise kind is read off the shape of ``diffusion(t0, y0, args)``: the shape of ``y0``
    means diagonal noise (``sigma`` is the diagonal, one Brownian motion per coordinate);
    ``y0.shape + (m,)`` means a general ``(dim, m)`` matrix driven by an m-dimensional Brownian
    motion.

    Args:
        drift: ``(t, y, args) -> b``, the shape of ``y0``.
        diffusion: ``(t, y, args) -> sigma``, diagonal or matrix as above.
        y0: initial state, an array (vmap over this function, and over ``key``, for batches).
        key: PRNG key of the Brownian path.
        t0: start time.
        t1: end time, ``t1 > t0``.
        steps: number of fixed, equal steps (>= 1).
        ts: optional strictly increasing save times in ``[t0, t1]``, shape ``(T,)``.
        solver: a diffrax SDE solver; default ``Euler()`` (Euler-Maruyama).
        args: passed to ``drift`` and ``diffusion``.
        brownian: ``"virtual"`` (`VirtualBrownianTree`: reproducible, any adjoint) or
            ``"unsafe"`` (`UnsafeBrownianPath`: faster, fixed steps only, no reverse mode).
        adjoint: diffrax adjoint (default recursive checkpointing; ``ForwardMode`` for
            ``brownian="unsafe"``).
        throw: raise on solver failure and on a non-finite ``y0``.

    Returns:
        The `diffrax.Solution`.
    """
    _check_interval(t0, t1)
    t0, t1, ts = _times_like(y0, t0, t1, ts)
    _check_steps(steps)
    key = check_key(key)
    y0 = jnp.asarray(y0)
    if throw:
        y0 = _check_y0(y0)
    out = jax.eval_shape(diffusion, t0, y0, args)
    if out.shape == y0.shape:
        bm_shape: tuple[int, ...] = y0.shape

        def control_vf(t: Any, y: Array, a: Any) -> lx.AbstractLinearOperator:
            return lx.DiagonalLinearOperator(diffusion(t, y, a))
    elif out.shape[:-1] == y0.shape and y0.ndim == 1:
        bm_shape = out.shape[-1:]
        control_vf = diffusion  # type: ignore[assignment]
    else:
        raise ValueError(
            "`diffusion` must return an array of the shape of `y0` (diagonal noise) or "
            f"y0.shape + (m,) with 1-D y0 (matrix noise); y0 has shape {y0.shape} and "
            f"diffusion returned {out.shape}."
        )
    dt = (t1 - t0) / steps
    if brownian == "virtual":
        bm: dfx.AbstractBrownianPath = dfx.VirtualBrownianTree(
            t0, t1, tol=dt / 4, shape=jax.ShapeDtypeStruct(bm_shape, y0.dtype), key=key
        )
    elif brownian == "unsafe":
        bm = dfx.UnsafeBrownianPath(shape=jax.ShapeDtypeStruct(bm_shape, y0.dtype), key=key)
    else:
        raise ValueError(f"`brownian` must be 'virtual' or 'unsafe', got {brownian!r}.")
    terms = dfx.MultiTerm(dfx.ODETerm(drift), dfx.ControlTerm(control_vf, bm))
    solver = dfx.Euler() if solver is None else solver
    if adjoint is None:
        # UnsafeBrownianPath cannot be replayed backwards: forward-mode only.
        adjoint = dfx.ForwardMode() if brownian == "unsafe" else dfx.RecursiveCheckpointAdjoint()
    return dfx.diffeqsolve(
        terms,
        solver,
        t0,
        t1,
        dt,
        y0,
        args,
        saveat=_saveat(ts, t0, t1),
        stepsize_controller=dfx.ConstantStepSize(),
        max_steps=steps,
        adjoint=adjoint,
        throw=throw,
    )
