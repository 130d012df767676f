"""Argument checks shared by every family, so that every message reads the same.

The rule, for every public entry point of jaxgen:

- What is known at trace time (shapes, ranks, dtypes, static sizes, option strings, the class of a
  module) is checked in Python and raises ``ValueError`` / ``TypeError`` whose message names the
  argument, what was expected and what was given: ``"`x` must have shape (n, dim), got (3,)."``.
- What depends on the values (finite entries, positive (semi-)definite matrices, probabilities
  on the simplex, non-negative couplings, bandwidths > 0) is checked with `equinox.error_if`,
  whose message names the argument too. Under `jax.jit` it raises ``EquinoxRuntimeError`` when
  the compiled function runs (set ``EQX_ON_ERROR=nan`` to get NaN instead, e.g. in sweeps).
  On concrete (non-traced) inputs the same checks raise ``ValueError`` directly, without
  dispatching a device computation.
- A function that skips a value check for speed says so in its docstring and names the checked
  path.

Each helper returns its (possibly converted) input: always use the returned value, which carries
the run-time check.
"""

from collections.abc import Iterable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike

__all__ = [
    "check_choice",
    "check_covariance",
    "check_finite",
    "check_floating",
    "check_in_interval",
    "check_key",
    "check_labels",
    "check_module",
    "check_nonnegative",
    "check_positive",
    "check_positive_int",
    "check_probabilities",
    "check_rank",
    "check_shape",
    "check_tuple",
    "is_traced",
]


def is_traced(x: Any) -> bool:
    """True when ``x`` (or any leaf of it) is a JAX tracer (inside `jit`, `vmap`, `grad`)."""
    return any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves(x))


def _host_or_device(x: ArrayLike) -> tuple[Any, Any]:
    """``(array, xp)``: host values (Python numbers, numpy arrays) stay numpy, so that their
    check is concrete and raises now even inside a `jax.jit` trace (where ``jnp`` on a constant
    gives a tracer); JAX arrays and tracers use ``jnp``. The checked value is returned as
    ``jnp.asarray(x)`` (a Python scalar stays weakly typed).
    """
    if isinstance(x, jax.Array | jax.core.Tracer):
        return x, jnp
    return np.asarray(x), np


def _fail_or_flag(x: Array, bad: Any, message: str) -> Array:
    """Raise ``ValueError(message)`` now for concrete ``bad``; else attach an ``error_if``."""
    if not is_traced(bad):
        if bool(np.any(np.asarray(bad))):
            raise ValueError(message)
        return x
    return eqx.error_if(x, bad, message)


def check_module(obj: Any, cls: type | tuple[type, ...], name: str) -> Any:
    """``obj`` must be an instance of the abstract interface ``cls`` (never a concrete class).

    Raises:
        TypeError: naming ``name``, the interface expected and the type given.
    """
    if not isinstance(obj, cls):
        names = " or ".join(c.__name__ for c in cls) if isinstance(cls, tuple) else cls.__name__
        raise TypeError(
            f"`{name}` must be a {names} (subclass it with your own equinox module), "
            f"got {type(obj).__name__}."
        )
    return obj


def check_key(key: Any, name: str = "key") -> Array:
    """``key`` must be a PRNG key: typed (``jax.random.key``) or raw (``jax.random.PRNGKey``).

    Raises:
        TypeError: for an int, a float array or anything else.
    """
    if isinstance(key, jax.Array | jax.core.Tracer) and jnp.issubdtype(
        key.dtype, jax.dtypes.prng_key
    ):
        return key
    if (
        isinstance(key, jax.Array | jax.core.Tracer | np.ndarray)
        and key.dtype == jnp.uint32
        and key.ndim >= 1
        and key.shape[-1] in (2, 4)
    ):
        return key
    given = (
        f"{type(key).__name__} with dtype {key.dtype} and shape {key.shape}"
        if hasattr(key, "dtype") and hasattr(key, "shape")
        else repr(key)
        if isinstance(key, int | float | str)
        else type(key).__name__
    )
    raise TypeError(f"`{name}` must be a PRNG key (jax.random.key(seed)), got {given}.")


def check_positive_int(value: Any, name: str, *, minimum: int = 1) -> int:
    """A static Python int ``>= minimum`` (sizes, step counts)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ValueError(f"`{name}` must be an int >= {minimum}, got {value!r}.")
    return int(value)


def check_choice(value: Any, choices: Iterable[Any], name: str) -> Any:
    """An option string (or other static option) from a fixed set."""
    choices = tuple(choices)
    if value not in choices:
        raise ValueError(f"`{name}` must be one of {choices}, got {value!r}.")
    return value


def check_floating(x: ArrayLike, name: str, *, allow_int: bool = False) -> Array:
    """A floating-point array; with ``allow_int`` integers are cast to the default float dtype."""
    arr = jnp.asarray(x)
    if jnp.issubdtype(arr.dtype, jnp.floating):
        return arr
    if allow_int and (jnp.issubdtype(arr.dtype, jnp.integer) or arr.dtype == jnp.bool_):
        return arr.astype(jnp.result_type(float))
    raise TypeError(f"`{name}` must be a floating-point array, got dtype {arr.dtype}.")


def check_rank(x: ArrayLike, ndim: int, name: str, *, layout: str | None = None) -> Array:
    """An array of rank ``ndim`` (``layout`` such as ``"(n, dim)"`` is named in the message)."""
    arr = jnp.asarray(x)
    if arr.ndim != ndim:
        want = layout or f"rank {ndim}"
        raise ValueError(f"`{name}` must have shape {want}, got shape {arr.shape}.")
    return arr


def check_shape(x: ArrayLike, shape: tuple[int | None, ...], name: str) -> Array:
    """An array of a given shape; ``None`` entries match any size (at least 1)."""
    arr = jnp.asarray(x)
    ok = arr.ndim == len(shape) and all(
        (s is None and a >= 1) or a == s for a, s in zip(arr.shape, shape, strict=False)
    )
    if not ok:
        want = "(" + ", ".join("*" if s is None else str(s) for s in shape) + ")"
        raise ValueError(f"`{name}` must have shape {want}, got {arr.shape}.")
    return arr


def check_tuple(
    value: Any, length: int, name: str, *, layout: str | None = None
) -> tuple[Any, ...]:
    """A tuple (or list) of ``length`` entries, such as a batch ``(x, scales)``, as a tuple.

    ``layout`` such as ``"(x, scales)"`` is named in the message. The entries themselves are
    checked by the caller (each under its own name).

    Raises:
        TypeError: naming ``name``, the expected length (and layout) and what was given.
    """
    if isinstance(value, tuple | list) and len(value) == length:
        return tuple(value)
    want = f"a tuple {layout} of {length} entries" if layout else f"a tuple of {length} entries"
    if isinstance(value, tuple | list):
        given = f"a {type(value).__name__} of {len(value)} entries"
    elif hasattr(value, "shape") and hasattr(value, "dtype"):
        given = f"an array of shape {tuple(value.shape)}"
    else:
        given = type(value).__name__
    raise TypeError(f"`{name}` must be {want}, got {given}.")


def check_finite(x: ArrayLike, name: str) -> Array:
    """No NaN or inf anywhere in ``x`` (value check)."""
    arr, xp = _host_or_device(x)
    if not jnp.issubdtype(arr.dtype, jnp.inexact):
        return jnp.asarray(x)
    bad = ~xp.all(xp.isfinite(arr))
    return _fail_or_flag(jnp.asarray(x), bad, f"`{name}` must be finite (no NaN/inf).")


def check_positive(x: ArrayLike, name: str) -> Array:
    """Every entry finite and ``> 0`` (scales, bandwidths, step sizes)."""
    arr, xp = _host_or_device(x)
    bad = ~xp.all(xp.isfinite(arr) & (arr > 0))
    return _fail_or_flag(jnp.asarray(x), bad, f"`{name}` must be finite and > 0.")


def check_nonnegative(x: ArrayLike, name: str) -> Array:
    """Every entry finite and ``>= 0`` (couplings, rates, weights)."""
    arr, xp = _host_or_device(x)
    bad = ~xp.all(xp.isfinite(arr) & (arr >= 0))
    return _fail_or_flag(jnp.asarray(x), bad, f"`{name}` must be finite and >= 0.")


def check_in_interval(
    x: ArrayLike,
    name: str,
    low: float,
    high: float,
    *,
    closed: tuple[bool, bool] = (True, True),
) -> Array:
    """Every entry inside ``[low, high]`` (``closed`` says which ends are included)."""
    arr, xp = _host_or_device(x)
    above = arr >= low if closed[0] else arr > low
    below = arr <= high if closed[1] else arr < high
    interval = ("[" if closed[0] else "(") + f"{low}, {high}" + ("]" if closed[1] else ")")
    return _fail_or_flag(
        jnp.asarray(x),
        ~xp.all(above & below),
        f"`{name}` must lie in {interval} (and not be NaN).",
    )


def check_labels(x: ArrayLike, name: str, num_classes: int) -> Array:
    """Integer class labels in ``[0, num_classes)`` (dtype at trace time, range as a value check).

    Raises:
        TypeError: for a floating-point or boolean array.
    """
    arr = jnp.asarray(x)
    if not jnp.issubdtype(arr.dtype, jnp.integer):
        raise TypeError(f"`{name}` must be an integer array of labels, got dtype {arr.dtype}.")
    return _fail_or_flag(
        arr,
        ~jnp.all((arr >= 0) & (arr < num_classes)),
        f"`{name}` must be integer labels in [0, {num_classes}).",
    )


def check_probabilities(p: ArrayLike, name: str, *, axis: int = -1, atol: float = 1e-5) -> Array:
    """Rows on the probability simplex along ``axis``: entries in [0, 1] summing to one."""
    arr = jnp.asarray(p)
    if not jnp.issubdtype(arr.dtype, jnp.floating):
        raise TypeError(f"`{name}` must be floating-point probabilities, got dtype {arr.dtype}.")
    bad = ~jnp.all((arr >= 0) & (arr <= 1)) | jnp.any(jnp.abs(jnp.sum(arr, axis=axis) - 1) > atol)
    return _fail_or_flag(
        arr,
        bad,
        f"`{name}` must be probabilities: entries in [0, 1] summing to 1 along axis {axis} "
        "(pass probabilities, not logits).",
    )


def check_covariance(
    cov: ArrayLike,
    name: str,
    dim: int | None = None,
    *,
    definite: bool = False,
) -> Array:
    """A symmetric positive semi-definite (``definite=True``: definite) ``(dim, dim)`` matrix.

    Shape and dtype are checked at trace time; symmetry and the sign of the smallest eigenvalue
    (relative tolerance ``1e-8`` of the largest entry in float64, ``1e-5`` in float32) are
    value checks.
    """
    cov = jnp.asarray(cov)
    if cov.ndim != 2 or cov.shape[0] != cov.shape[1]:
        raise ValueError(f"`{name}` must be a square (dim, dim) matrix, got shape {cov.shape}.")
    if dim is not None and cov.shape[0] != dim:
        raise ValueError(f"`{name}` must have shape ({dim}, {dim}), got {cov.shape}.")
    if not jnp.issubdtype(cov.dtype, jnp.floating):
        raise TypeError(f"`{name}` must be a floating-point array, got dtype {cov.dtype}.")
    rel = 1e-8 if cov.dtype == jnp.float64 else 1e-5
    scale = 1.0 + jnp.max(jnp.abs(cov))
    cov = _fail_or_flag(cov, ~jnp.all(jnp.isfinite(cov)), f"`{name}` must be finite (no NaN/inf).")
    cov = _fail_or_flag(
        cov, jnp.max(jnp.abs(cov - cov.T)) > rel * scale, f"`{name}` must be symmetric."
    )
    smallest = jnp.linalg.eigvalsh(cov)[0]
    if definite:
        bad, what = smallest <= 0, "positive definite"
    else:
        bad, what = smallest < -rel * scale, "positive semi-definite"
    return _fail_or_flag(cov, bad, f"`{name}` must be {what} (smallest eigenvalue < 0).")
