"""Shared jaxtyping aliases.

Dimension names are shared across the library: ``dim`` (state dimension), ``B`` (batch, only in
batched helpers), ``L`` (sequence), ``S`` (states), ``T`` (times), ``n``/``m`` (the two sides of a
coupling).
"""

from collections.abc import Callable
from typing import Any, TypeAlias

from jaxtyping import Array, ArrayLike, Bool, Float, Int, PRNGKeyArray, PyTree, Real, Shaped

Scalar: TypeAlias = Float[Array, ""]
ScalarLike: TypeAlias = float | Float[ArrayLike, ""]
Vector: TypeAlias = Float[Array, " dim"]
Matrix: TypeAlias = Float[Array, "dim dim"]
Times: TypeAlias = Float[Array, " T"]
Key: TypeAlias = PRNGKeyArray
# A vector field in diffrax's convention: (t, y, args) -> dy/dt with the structure of y.
VectorField: TypeAlias = Callable[[Any, PyTree[Array], Any], PyTree[Array]]

__all__ = [
    "Array",
    "ArrayLike",
    "Bool",
    "Float",
    "Int",
    "Key",
    "Matrix",
    "PRNGKeyArray",
    "PyTree",
    "Real",
    "Scalar",
    "ScalarLike",
    "Shaped",
    "Times",
    "Vector",
    "VectorField",
]
