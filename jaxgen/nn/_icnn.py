r"""Constrained ReLU networks: plain ReLU nets, monotone ReLU+ nets and input-convex nets (ICNN).

Depth convention (Bakaev et al. 2025): a network
$f = T_{L+1} \circ \sigma \circ T_L \circ \dots \circ \sigma \circ T_1$ with affine $T_l$ and
$\sigma(t) = \max(t, 0)$ has ``n_hidden = L`` hidden layers and ``depth = L + 1`` affine maps.
"Depth 2" is one hidden layer. Every module exposes both ``n_hidden`` and ``depth``.

* `ReLUNet`: all weights free.
* `ReLUPlusNet`: every weight matrix entrywise $\ge 0$ (biases free); computes coordinate-wise
  non-decreasing, convex and supermodular functions.
* `ICNN` (Amos et al. 2017, with input skips):

  $z_1 = \sigma(A_1 x + b_1)$, $z_l = \sigma(W_l z_{l-1} + A_l x + b_l)$ for $l = 2..L$,
  $f(x) = w^\top z_L + a^\top x + c$, with $W_l \ge 0$ and $w \ge 0$ entrywise, $A_l, a$ free.

Non-negativity is imposed in one of two ways (``mode``):

* ``"softplus"`` (default, for training): the module stores raw weights $r$ and uses
  $\operatorname{softplus}(r) > 0$; smooth and always feasible, but never exactly zero.
* ``"project"``: the module stores the effective weights themselves; after every optimiser step
  they are clipped at 0, either by `project_nonneg(model)` or by chaining the optax
  transformation `nonneg_projection()` after the optimiser (it rewrites the update so that
  ``params + update`` is the projected point). Needed for exact constructions (exact zeros).
"""

import abc
import dataclasses
import functools as ft
import math
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray, PyTree

_MODES = ("softplus", "project")


# --------------------------------------------------------------------------------------------
# validation helpers
# --------------------------------------------------------------------------------------------


def _check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"`{name}` must be an int >= {minimum}, got {value!r}.")
    if value < minimum:
        raise ValueError(f"`{name}` must be an int >= {minimum}, got {value!r}.")
    return int(value)


def _check_widths(widths: Any) -> tuple[int, ...]:
    if isinstance(widths, int | np.integer) and not isinstance(widths, bool):
        raise TypeError(
            f"`widths` must be a sequence of hidden-layer widths (one int >= 1 per hidden layer), "
            f"got the int {widths!r}; write e.g. `widths=({widths},) * n_hidden`."
        )
    if not isinstance(widths, Sequence) or len(widths) == 0:
        raise ValueError(
            f"`widths` must be a non-empty sequence of ints >= 1 (one per hidden layer), "
            f"got {widths!r}."
        )
    out = []
    for i, w in enumerate(widths):
        if isinstance(w, bool) or not isinstance(w, int | np.integer):
            raise TypeError(f"`widths[{i}]` must be an int >= 1, got {w!r}.")
        if w < 1:
            raise ValueError(f"`widths[{i}]` must be an int >= 1, got {w!r}.")
        out.append(int(w))
    return tuple(out)


def _check_mode(mode: Any) -> str:
    if mode not in _MODES:
        raise ValueError(f"`mode` must be one of {_MODES}, got {mode!r}.")
    return mode


def _default_dtype(dtype: Any) -> Any:
    # The default float dtype of the running JAX (float64 under x64): never hard-coded.
    return jnp.result_type(float) if dtype is None else jnp.dtype(dtype)


def _check_input(x: Array, in_size: int, cls: str) -> None:
    if x.shape != (in_size,):
        raise ValueError(
            f"{cls}: `x` must have shape ({in_size},) (one sample; vmap for batches), "
            f"got {x.shape}."
        )


# --------------------------------------------------------------------------------------------
# non-negative parametrisation
# --------------------------------------------------------------------------------------------


def _inverse_softplus(y: Array) -> Array:
    # log(expm1(y)), stable for large y: y + log(1 - exp(-y)).
    return y + jnp.log(-jnp.expm1(-y))


def _effective(raw: Array, mode: str) -> Array:
    return jax.nn.softplus(raw) if mode == "softplus" else raw


def _effective_weights(
    hidden_raw: tuple[Array, ...], out_raw: Array, mode: str
) -> tuple[tuple[Array, ...], Array]:
    """The non-negative weights of the hidden layers and of the output, from raw parameters."""
    return tuple(_effective(r, mode) for r in hidden_raw), _effective(out_raw, mode)


def _raw_from_effective(w: Array, mode: str) -> Array:
    return _inverse_softplus(w) if mode == "softplus" else w


def _load_nonneg(
    name: str,
    value: ArrayLike,
    shape: tuple[int, ...],
    dtype: Any,
    mode: str,
    project: bool,
    cls: str,
) -> Array:
    arr = jnp.asarray(value, dtype=dtype)
    if arr.shape != shape:
        raise ValueError(f"{cls}.from_weights: `{name}` must have shape {shape}, got {arr.shape}.")
    arr_np = np.asarray(arr)
    if np.any(arr_np < 0):
        if not project:
            raise ValueError(
                f"{cls}.from_weights: `{name}` has negative entries (min {arr_np.min():.3g}); "
                f"{cls} needs them >= 0 (convexity/monotonicity would be lost). Pass "
                "`project=True` to clip them to 0."
            )
        arr = jnp.maximum(arr, 0)
    if mode == "softplus" and np.any(np.asarray(arr) <= 0):
        raise ValueError(
            f"{cls}.from_weights: `{name}` has zero entries, which mode='softplus' cannot "
            "represent (softplus > 0); use mode='project' for exact zeros."
        )
    return _raw_from_effective(arr, mode)


def _new_module(cls: type, *, in_size: int, widths: Sequence[int], **fields: Any) -> Any:
    """Instantiate a network from given fields without running ``__init__`` (so loading
    weights needs no random init); the sizes are checked, every other field must be given.
    """
    fields.update(in_size=_check_int("in_size", in_size, 1), widths=_check_widths(widths))
    missing = {f.name for f in dataclasses.fields(cls)} - set(fields)
    if missing:  # pragma: no cover - internal invariant
        raise RuntimeError(f"_new_module: missing fields {sorted(missing)} for {cls.__name__}.")
    obj = object.__new__(cls)
    for name, value in fields.items():
        object.__setattr__(obj, name, value)
    return obj


def _layer_sizes(
    weights: Sequence[ArrayLike], biases: Sequence[ArrayLike], cls: str
) -> tuple[int, ...]:
    """``(m_0 = in_size, m_1, ..., m_L)`` read off the weight matrices given to ``from_weights``."""
    if len(weights) == 0 or len(weights) != len(biases):
        raise ValueError(
            f"{cls}.from_weights: `weights` and `biases` must be non-empty and of equal length, "
            f"got {len(weights)} and {len(biases)}."
        )
    shapes = [np.shape(W) for W in weights]
    if any(len(s) != 2 for s in shapes):
        raise ValueError(f"{cls}.from_weights: every `weights[l]` must be 2-D, got {shapes}.")
    return (shapes[0][1], *(s[0] for s in shapes))


_Arrays = Sequence[ArrayLike]


def _load_relu_layers(
    weights: _Arrays, biases: _Arrays, w_out: ArrayLike, c: ArrayLike, load: Callable, cls: str
) -> tuple[tuple[Array, ...], Array, dict[str, Any]]:
    """Checked layers of a `ReLUNet`/`ReLUPlusNet` given to ``from_weights``.

    ``load(name, value, shape)`` loads the weight matrices and ``w_out`` (free or
    sign-constrained, in the dtype it fixes); biases and ``c`` are free, in the same dtype.
    Returns ``(weights, w_out, fields)`` with ``fields`` the biases, ``c`` and the sizes.
    """
    sizes = _layer_sizes(weights, biases, cls)
    Ws = tuple(load(f"weights[{i}]", W, (sizes[i + 1], sizes[i])) for i, W in enumerate(weights))
    w = load("w_out", w_out, (sizes[-1],))
    bs = tuple(
        _load_free(f"biases[{i}]", b, (sizes[i + 1],), W.dtype, cls)
        for i, (b, W) in enumerate(zip(biases, Ws, strict=True))
    )
    fields = dict(biases=bs, c=_load_free("c", c, (), w.dtype, cls), in_size=sizes[0])
    return Ws, w, {**fields, "widths": sizes[1:]}


def _load_free(name: str, value: ArrayLike, shape: tuple[int, ...], dtype: Any, cls: str) -> Array:
    arr = jnp.asarray(value, dtype=dtype)
    if arr.shape != shape:
        raise ValueError(f"{cls}.from_weights: `{name}` must have shape {shape}, got {arr.shape}.")
    return arr


# Random init without per-architecture compilation of the PRNG. Drawing every weight with its own
# `jr.normal` call inside one jitted initialiser put one threefry kernel per weight matrix into
# the compiled program (about 0.4 CPU s of XLA compile each, paid again for every new set of
# widths). Instead, standard normals come in fixed-size blocks from ONE compiled sampler per
# dtype (block i uses `fold_in(key, i)`), and a cheap jitted assembly (slices, exp, scaling; no
# PRNG) cuts them into weights. Still traceable: vmapping over keys works.

_NORMAL_BLOCK = 4096


@ft.partial(jax.jit, static_argnums=(1,))
def _normal_block(key: PRNGKeyArray, dtype: Any) -> Array:
    return jr.normal(key, (_NORMAL_BLOCK,), dtype)


def _standard_normals(key: PRNGKeyArray, count: int, dtype: Any) -> list[Array]:
    """``ceil(count / block)`` blocks of i.i.d. N(0, 1) (the assembly slices what it needs)."""
    num = max(1, -(-count // _NORMAL_BLOCK))
    return [_normal_block(jr.fold_in(key, i), dtype) for i in range(num)]


def _take(blocks: list[Array], offset: int, shape: tuple[int, ...]) -> tuple[Array, int]:
    size = math.prod(shape)
    flat = blocks[0] if len(blocks) == 1 else jnp.concatenate(blocks)
    return jnp.reshape(flat[offset : offset + size], shape), offset + size


def _nonneg_from_normal(z: Array, mode: str) -> Array:
    """Effective entries ``exp(0.5 z) / fan_in`` (mean ~1.13 / fan_in), stored as raw."""
    return _raw_from_effective(jnp.exp(0.5 * z) / z.shape[-1], mode)


def _free_from_normal(z: Array) -> Array:
    """He-style init ``N(0, 2 / fan_in)`` for free weights."""
    return z * math.sqrt(2.0 / z.shape[-1])


def _matrix_shapes(in_size: int, widths: tuple[int, ...]) -> list[tuple[int, ...]]:
    sizes = (in_size, *widths)
    return [(sizes[i + 1], sizes[i]) for i in range(len(widths))] + [(widths[-1],)]


def _num_params(shapes: list[tuple[int, ...]]) -> int:
    return sum(math.prod(s) for s in shapes)


@ft.partial(jax.jit, static_argnums=(1, 2, 3))
def _assemble_relu_net(
    blocks: list[Array], in_size: int, widths: tuple[int, ...], dtype: Any
) -> Any:
    off, mats = 0, []
    for shape in _matrix_shapes(in_size, widths):
        z, off = _take(blocks, off, shape)
        mats.append(_free_from_normal(z))
    biases = tuple(jnp.zeros((m,), dtype) for m in widths)
    return tuple(mats[:-1]), biases, mats[-1], jnp.zeros((), dtype)


@ft.partial(jax.jit, static_argnums=(1, 2, 3, 4))
def _assemble_relu_plus(
    blocks: list[Array], in_size: int, widths: tuple[int, ...], dtype: Any, mode: str
) -> Any:
    off, mats = 0, []
    for shape in _matrix_shapes(in_size, widths):
        z, off = _take(blocks, off, shape)
        mats.append(_nonneg_from_normal(z, mode))
    # Centre the first pre-activation roughly at 0 on [-1, 1]^n inputs; later layers see
    # non-negative inputs of mean ~0.5, so start their biases slightly negative.
    biases = tuple(jnp.full((m,), 0.0 if i == 0 else -0.5, dtype) for i, m in enumerate(widths))
    return tuple(mats[:-1]), biases, mats[-1], jnp.zeros((), dtype)


def _icnn_shapes(in_size: int, widths: tuple[int, ...]) -> list[tuple[int, ...]]:
    L = len(widths)
    return (
        [(m, in_size) for m in widths]
        + [(widths[i + 1], widths[i]) for i in range(L - 1)]
        + [(widths[-1],), (in_size,)]
    )


@ft.partial(jax.jit, static_argnums=(1, 2, 3, 4))
def _assemble_icnn(
    blocks: list[Array], in_size: int, widths: tuple[int, ...], dtype: Any, mode: str
) -> Any:
    L = len(widths)
    off, zs = 0, []
    for shape in _icnn_shapes(in_size, widths):
        z, off = _take(blocks, off, shape)
        zs.append(z)
    A = tuple(_free_from_normal(z) for z in zs[:L])
    W = tuple(_nonneg_from_normal(z, mode) for z in zs[L : 2 * L - 1])
    w = _nonneg_from_normal(zs[2 * L - 1], mode)
    a = zs[2 * L] / math.sqrt(in_size)
    b = tuple(jnp.zeros((m,), dtype) for m in widths)
    return A, b, W, w, a, jnp.zeros((), dtype)


def _init_relu_net(key: PRNGKeyArray, in_size: int, widths: tuple[int, ...], dtype: Any) -> Any:
    count = _num_params(_matrix_shapes(in_size, widths))
    return _assemble_relu_net(_standard_normals(key, count, dtype), in_size, widths, dtype)


def _init_relu_plus(
    key: PRNGKeyArray, in_size: int, widths: tuple[int, ...], dtype: Any, mode: str
) -> Any:
    count = _num_params(_matrix_shapes(in_size, widths))
    return _assemble_relu_plus(_standard_normals(key, count, dtype), in_size, widths, dtype, mode)


def _init_icnn(
    key: PRNGKeyArray, in_size: int, widths: tuple[int, ...], dtype: Any, mode: str
) -> Any:
    count = _num_params(_icnn_shapes(in_size, widths))
    return _assemble_icnn(_standard_normals(key, count, dtype), in_size, widths, dtype, mode)


# --------------------------------------------------------------------------------------------
# the three networks
# --------------------------------------------------------------------------------------------


def _relu_mlp(
    weights: tuple[Array, ...], biases: tuple[Array, ...], w_out: Array, c: Array, x: Array
):
    """``w_out . h_L + c`` with ``h_l = relu(W_l h_{l-1} + b_l)``, ``h_0 = x``."""
    h = x
    for W, b in zip(weights, biases, strict=True):
        h = jax.nn.relu(W @ h + b)
    return jnp.dot(w_out, h) + c


class _ScalarReLUNetwork(eqx.Module):
    """What the three scalar ReLU networks share: static sizes and the depth convention."""

    in_size: eqx.AbstractVar[int]
    widths: eqx.AbstractVar[tuple[int, ...]]

    @property
    def n_hidden(self) -> int:
        """Number of hidden layers L."""
        return len(self.widths)

    @property
    def depth(self) -> int:
        """Number of affine maps, ``n_hidden + 1``."""
        return len(self.widths) + 1

    def __call__(self, x: Float[Array, " dim"]) -> Float[Array, ""]:
        """Evaluate on one sample ``x`` of shape ``(in_size,)``; returns a scalar."""
        _check_input(x, self.in_size, type(self).__name__)
        return self._forward(x)

    @abc.abstractmethod
    def _forward(self, x: Array) -> Array:
        """The network on one checked sample."""


class _NonNegativeReLUNetwork(_ScalarReLUNetwork):
    """What `ReLUPlusNet` and `ICNN` share: sign-constrained weights stored raw under ``mode``.

    Subclasses name their parameter fields in ``_PARAMETERS`` (in the order their
    ``_random_init(key, in_size, widths, dtype, mode)`` returns them) and the two sign-constrained
    ones, hidden matrices then output vector, in ``_NONNEGATIVE``.
    """

    in_size: int = eqx.field(static=True)
    widths: tuple[int, ...] = eqx.field(static=True)
    mode: str = eqx.field(static=True)

    _PARAMETERS: ClassVar[tuple[str, ...]]
    _NONNEGATIVE: ClassVar[tuple[str, str]]
    _random_init: ClassVar[Callable[..., tuple[Any, ...]]]

    def __init__(
        self,
        in_size: int,
        widths: Sequence[int],
        *,
        key: PRNGKeyArray,
        mode: str = "softplus",
        dtype: Any = None,
    ):
        """Random init; the class docstring says which distribution.

        Args:
            in_size: input dimension n (int >= 1).
            widths: hidden widths ``(m_1, ..., m_L)``, each int >= 1, L >= 1.
            key: PRNG key.
            mode: ``"softplus"`` or ``"project"`` (see module docstring).
            dtype: parameter dtype (default: JAX's default float).
        """
        self.in_size = _check_int("in_size", in_size, 1)
        self.widths = _check_widths(widths)
        self.mode = _check_mode(mode)
        values = type(self)._random_init(
            key, self.in_size, self.widths, _default_dtype(dtype), self.mode
        )
        for name, value in zip(self._PARAMETERS, values, strict=True):
            setattr(self, name, value)

    def effective_weights(self) -> tuple[tuple[Array, ...], Array]:
        """The non-negative weights actually used: ``(hidden matrices, output weights)``."""
        hidden, out = (getattr(self, name) for name in self._NONNEGATIVE)
        return _effective_weights(hidden, out, self.mode)


class ReLUNet(_ScalarReLUNetwork):
    r"""Unconstrained ReLU network $x \in \mathbb{R}^n \mapsto \mathbb{R}$ on one sample.

    $h_0 = x$, $h_l = \sigma(W_l h_{l-1} + b_l)$ for $l = 1..L$, $f(x) = w^\top h_L + c$.

    Attributes:
        weights: ``W_l`` of shapes ``(m_l, m_{l-1})`` (``m_0 = in_size``).
        biases: ``b_l`` of shapes ``(m_l,)``.
        w_out: ``(m_L,)``; c: ``()``.
        in_size, widths: static sizes. ``n_hidden = len(widths)``, ``depth = n_hidden + 1``.
    """

    weights: tuple[Array, ...]
    biases: tuple[Array, ...]
    w_out: Array
    c: Array
    in_size: int = eqx.field(static=True)
    widths: tuple[int, ...] = eqx.field(static=True)

    def __init__(
        self, in_size: int, widths: Sequence[int], *, key: PRNGKeyArray, dtype: Any = None
    ):
        """Random init (He normal weights, zero biases).

        Args:
            in_size: input dimension n (int >= 1).
            widths: hidden widths ``(m_1, ..., m_L)``, each int >= 1, L >= 1.
            key: PRNG key.
            dtype: parameter dtype (default: JAX's default float).
        """
        self.in_size = _check_int("in_size", in_size, 1)
        self.widths = _check_widths(widths)
        dtype = _default_dtype(dtype)
        self.weights, self.biases, self.w_out, self.c = _init_relu_net(
            key, self.in_size, self.widths, dtype
        )

    def _forward(self, x: Array) -> Array:
        return _relu_mlp(self.weights, self.biases, self.w_out, self.c, x)

    @classmethod
    def from_weights(
        cls, weights: _Arrays, biases: _Arrays, w_out: ArrayLike, c: ArrayLike = 0.0, *, dtype=None
    ) -> "ReLUNet":
        """Build a `ReLUNet` from given weights (shapes inferred from ``weights``)."""
        dtype = _default_dtype(dtype)
        load = ft.partial(_load_free, dtype=dtype, cls="ReLUNet")
        Ws, w, fields = _load_relu_layers(weights, biases, w_out, c, load, "ReLUNet")
        return _new_module(cls, weights=Ws, w_out=w, **fields)


class ReLUPlusNet(_NonNegativeReLUNetwork):
    r"""Monotone ReLU network (ReLU+): every weight matrix entrywise $\ge 0$, biases free.

    Same layers as `ReLUNet`, with effective weights $\operatorname{softplus}(r)$ (``mode=
    "softplus"``) or the stored, projected weights (``mode="project"``). ReLU+ networks are
    non-decreasing in every coordinate, convex and supermodular, hence cannot compute nor
    uniformly approximate $\max_i x_i$ (Bakaev et al. 2025, Theorem A; see `corner_floor`).

    Random init: effective weights ``exp(0.5 N(0,1)) / fan_in`` (Hoedt & Klambauer 2023 spirit:
    mean-positive, scaled by fan-in so activations do not blow up with depth).

    Attributes:
        weights_raw: raw weights, shapes ``(m_l, m_{l-1})``; `effective_weights` gives them.
        biases: ``(m_l,)``; w_out_raw: ``(m_L,)``; c: ``()``.
        in_size, widths, mode: static.
    """

    weights_raw: tuple[Array, ...]
    biases: tuple[Array, ...]
    w_out_raw: Array
    c: Array
    _PARAMETERS = ("weights_raw", "biases", "w_out_raw", "c")
    _random_init = staticmethod(_init_relu_plus)

    _NONNEGATIVE = ("weights_raw", "w_out_raw")

    def _forward(self, x: Array) -> Array:
        weights, w_out = self.effective_weights()
        return _relu_mlp(weights, self.biases, w_out, self.c, x)

    @classmethod
    def from_weights(
        cls,
        weights: Sequence[ArrayLike],
        biases: Sequence[ArrayLike],
        w_out: ArrayLike,
        c: ArrayLike = 0.0,
        *,
        mode: str = "project",
        project: bool = False,
        dtype: Any = None,
    ) -> "ReLUPlusNet":
        """Build a `ReLUPlusNet` from effective weights.

        Raises ``ValueError`` if a weight is negative (unless ``project=True``, which clips it
        to 0) or, for ``mode="softplus"``, exactly zero.
        """
        _check_mode(mode)
        dtype = _default_dtype(dtype)
        load = ft.partial(_load_nonneg, dtype=dtype, mode=mode, project=project, cls="ReLUPlusNet")
        Ws, w, fields = _load_relu_layers(weights, biases, w_out, c, load, "ReLUPlusNet")
        return _new_module(cls, weights_raw=Ws, w_out_raw=w, mode=mode, **fields)


class ICNN(_NonNegativeReLUNetwork):
    r"""Input-convex neural network with input skips (Amos et al. 2017), on one sample.

    $z_1 = \sigma(A_1 x + b_1)$, $z_l = \sigma(W_l z_{l-1} + A_l x + b_l)$ ($l = 2..L$),
    $f(x) = w^\top z_L + a^\top x + c$, with $W_l \ge 0$, $w \ge 0$ (by ``mode``) and
    $A_l$, $a$ free. By induction each $z_l$ is convex, so $f$ is convex. The skips $A_l x$ and
    $a^\top x$ are not optional: without them $f$ is bounded below and cannot equal
    $\max_i x_i$. Computing $\max_i x_i$ exactly needs ``depth >= n`` (Bakaev et al. 2025,
    Theorem B); `icnn_max_exact` attains it.

    Random init: He-normal ``A``, effective ``W, w ~ exp(0.5 N(0,1)) / fan_in``.

    Attributes:
        A: free input weights ``(m_l, n)``, one per hidden layer.
        b: biases ``(m_l,)``.
        W_raw: raw hidden-to-hidden weights ``(m_l, m_{l-1})`` for ``l = 2..L``.
        w_raw: raw output weights ``(m_L,)``.
        a: output skip ``(n,)``; c: ``()``.
        in_size, widths, mode: static.

    References:
        Amos, Xu, Kolter, Input convex neural networks, ICML 2017, arXiv:1609.07152.
        Bakaev, Brunck, Hertrich, Reichman, Yehudayoff, On the depth of monotone ReLU neural
        networks and ICNNs, arXiv:2505.06169.
    """

    A: tuple[Array, ...]
    b: tuple[Array, ...]
    W_raw: tuple[Array, ...]
    w_raw: Array
    a: Array
    c: Array
    _PARAMETERS = ("A", "b", "W_raw", "w_raw", "a", "c")
    _random_init = staticmethod(_init_icnn)

    _NONNEGATIVE = ("W_raw", "w_raw")

    def _forward(self, x: Array) -> Array:
        Ws, w = self.effective_weights()
        z = jax.nn.relu(self.A[0] @ x + self.b[0])
        for W, A, b in zip(Ws, self.A[1:], self.b[1:], strict=True):
            z = jax.nn.relu(W @ z + A @ x + b)
        return jnp.dot(w, z) + jnp.dot(self.a, x) + self.c

    @classmethod
    def from_weights(
        cls,
        A: Sequence[ArrayLike],
        b: Sequence[ArrayLike],
        W: Sequence[ArrayLike],
        w: ArrayLike,
        a: ArrayLike,
        c: ArrayLike = 0.0,
        *,
        mode: str = "project",
        project: bool = False,
        dtype: Any = None,
    ) -> "ICNN":
        """Build an `ICNN` from effective weights (shapes inferred from ``A``).

        Args:
            A: ``L`` free input matrices ``(m_l, n)``.
            b: ``L`` biases ``(m_l,)``.
            W: ``L - 1`` hidden-to-hidden matrices ``(m_l, m_{l-1})``, must be ``>= 0``.
            w: output weights ``(m_L,)``, must be ``>= 0``.
            a: output skip ``(n,)``; c: output bias.
            mode: parametrisation of the result (``"project"`` keeps exact zeros).
            project: clip negative ``W``/``w`` entries to 0 instead of raising.
            dtype: parameter dtype.

        Raises:
            ValueError: negative ``W``/``w`` entries without ``project=True`` (the result would
                not be convex), zero entries under ``mode="softplus"``, or shape mismatches.
        """
        _check_mode(mode)
        if len(A) == 0 or len(A) != len(b) or len(W) != len(A) - 1:
            raise ValueError(
                f"ICNN.from_weights: expected L >= 1 input matrices `A`, L biases `b` and L-1 "
                f"hidden matrices `W`, got {len(A)}, {len(b)} and {len(W)}."
            )
        dtype = _default_dtype(dtype)
        shapes = [np.shape(Ai) for Ai in A]
        if any(len(s) != 2 for s in shapes) or len({s[1] for s in shapes}) != 1:
            raise ValueError(
                f"ICNN.from_weights: every `A[l]` must be 2-D (m_l, n) with a common n, got "
                f"{shapes}."
            )
        widths = tuple(s[0] for s in shapes)
        n = shapes[0][1]
        As = tuple(
            _load_free(f"A[{i}]", Ai, (widths[i], n), dtype, "ICNN") for i, Ai in enumerate(A)
        )
        bs = tuple(_load_free(f"b[{i}]", bi, (widths[i],), dtype, "ICNN") for i, bi in enumerate(b))
        Ws = tuple(
            _load_nonneg(f"W[{i}]", Wi, (widths[i + 1], widths[i]), dtype, mode, project, "ICNN")
            for i, Wi in enumerate(W)
        )
        ww = _load_nonneg("w", w, (widths[-1],), dtype, mode, project, "ICNN")
        aa = _load_free("a", a, (n,), dtype, "ICNN")
        cc = _load_free("c", c, (), dtype, "ICNN")
        return _new_module(
            cls,
            A=As,
            b=bs,
            W_raw=Ws,
            w_raw=ww,
            a=aa,
            c=cc,
            in_size=n,
            widths=widths,
            mode=mode,
        )


# --------------------------------------------------------------------------------------------
# projection and constraint checks
# --------------------------------------------------------------------------------------------


def _is_constrained(x: Any) -> bool:
    return isinstance(x, ReLUPlusNet | ICNN)


def _constrained_getter(m: Any) -> Any:
    if isinstance(m, ICNN):
        return lambda t: (t.W_raw, t.w_raw)
    return lambda t: (t.weights_raw, t.w_out_raw)


def project_nonneg(model: PyTree) -> PyTree:
    """Clip the constrained weights of every ``mode="project"`` `ICNN`/`ReLUPlusNet` in ``model``.

    Works on any pytree containing such modules (also on ``eqx.filter(model, ...)`` views);
    softplus-mode modules and other leaves are returned unchanged. Apply after each optimiser
    step, or use `nonneg_projection` inside the optimiser.
    """

    def project(m: Any) -> Any:
        if not _is_constrained(m) or m.mode != "project":
            return m
        get = _constrained_getter(m)
        clipped = jax.tree_util.tree_map(lambda v: jnp.maximum(v, 0), get(m))
        return eqx.tree_at(get, m, clipped)

    return jax.tree_util.tree_map(project, model, is_leaf=_is_constrained)


class NonNegProjectionState(NamedTuple):
    """`nonneg_projection` keeps no state."""


def nonneg_projection() -> optax.GradientTransformation:
    """Optax transformation making each update land on the non-negative set.

    Chain it last, ``optax.chain(optax.adam(lr), nonneg_projection())``: it replaces the update
    ``u`` by ``project_nonneg(p + u) - p`` so that ``optax.apply_updates`` / ``eqx.apply_updates``
    yields the projected point. Entries that are clipped become exactly 0 (``p + (-p) == 0``)
    and kept ones stay ``>= 0`` by monotone rounding. Only ``mode="project"`` modules change.
    """

    def init(params: PyTree) -> NonNegProjectionState:
        del params
        return NonNegProjectionState()

    def update(
        updates: PyTree, state: NonNegProjectionState, params: PyTree | None = None
    ) -> tuple[PyTree, NonNegProjectionState]:
        if params is None:
            raise ValueError(
                "nonneg_projection needs `params` in `update(updates, state, params)`."
            )
        new = eqx.apply_updates(params, updates)
        projected = project_nonneg(new)
        return jax.tree_util.tree_map(lambda q, p: q - p, projected, params), state

    return optax.GradientTransformation(init, update)


def check_constraints(model: PyTree) -> PyTree:
    """Return ``model`` with an ``eqx.error_if`` on negative constrained weights (traced check).

    Use it where a ``mode="project"`` model may have been updated without projection.
    """

    def check(m: Any) -> Any:
        if not _is_constrained(m):
            return m
        get = _constrained_getter(m)
        leaves = jax.tree_util.tree_leaves(get(m))
        bad = jnp.any(jnp.stack([jnp.any(v < 0) for v in leaves]))
        name = type(m).__name__
        checked = tuple(
            eqx.error_if(
                v,
                bad,
                f"{name}: a constrained (hidden-to-hidden or output) weight is "
                "negative; apply `project_nonneg` after the update.",
            )
            for v in leaves
        )
        treedef = jax.tree_util.tree_structure(get(m))
        return eqx.tree_at(get, m, jax.tree_util.tree_unflatten(treedef, checked))

    return jax.tree_util.tree_map(check, model, is_leaf=_is_constrained)


# --------------------------------------------------------------------------------------------
# data-dependent initialisation
# --------------------------------------------------------------------------------------------


def center_biases(model: Any, x: Float[Array, "batch dim"]) -> Any:
    r"""Shift every hidden bias so that each unit's pre-activation has mean zero over ``x``.

    Layer by layer (using the already centred earlier layers), $b_l \leftarrow b_l -
    \overline{\mathrm{pre}_l}$ where $\mathrm{pre}_l$ is the unit's pre-activation on the batch.
    Non-negative hidden-to-hidden weights applied to non-negative ReLU outputs give every unit of
    an `ICNN` / `ReLUPlusNet` a positive mean shift at random init, so most units start active and
    the network starts (nearly) affine; centring restores about half-active units (the
    zero-mean pre-activation principle of Hoedt & Klambauer 2023, here made exact on data, as in
    data-dependent / LSUV initialisation). Only free biases change, so convexity and
    monotonicity are untouched.

    Args:
        model: a `ReLUNet`, `ReLUPlusNet` or `ICNN`.
        x: a batch of inputs ``(batch, in_size)`` from the training distribution.

    Returns:
        The model with new biases (same structure).

    References:
        Hoedt, Klambauer, Principled weight initialisation for input-convex neural networks,
        NeurIPS 2023. Mishkin, Matas, All you need is a good init, ICLR 2016.
    """
    if not isinstance(model, ReLUNet | ReLUPlusNet | ICNN):
        raise TypeError(f"`model` must be a ReLUNet, ReLUPlusNet or ICNN, got {type(model)}.")
    if x.ndim != 2 or x.shape[1] != model.in_size or x.shape[0] < 1:
        raise ValueError(
            f"`x` must have shape (batch, {model.in_size}) with batch >= 1, got {x.shape}."
        )
    return _center_biases(model, x)


@eqx.filter_jit
def _center_biases(model: Any, x: Array) -> Any:
    # one compiled call per architecture instead of a dozen eager ops (each compiled per shape)
    if isinstance(model, ICNN):
        Ws, _ = model.effective_weights()
        new_b, z = [], None
        for layer in range(len(model.b)):
            pre = x @ model.A[layer].T + model.b[layer][None, :]
            if z is not None:
                pre = pre + z @ Ws[layer - 1].T
            shift = jnp.mean(pre, axis=0)
            new_b.append(model.b[layer] - shift)
            z = jax.nn.relu(pre - shift[None, :])
        return eqx.tree_at(lambda m: m.b, model, tuple(new_b))
    weights = model.weights if isinstance(model, ReLUNet) else model.effective_weights()[0]
    h, new_b = x, []
    for W, b in zip(weights, model.biases, strict=True):
        pre = h @ W.T + b[None, :]
        shift = jnp.mean(pre, axis=0)
        new_b.append(b - shift)
        h = jax.nn.relu(pre - shift[None, :])
    return eqx.tree_at(lambda m: m.biases, model, tuple(new_b))
