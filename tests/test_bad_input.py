"""Every public entry point refuses bad input loudly (the rule of `jaxgen.core.checks`).

The registry is read from each family's ``__init__.py`` (its ``X as X`` re-exports), so a new public
name is covered here or must be listed in `EXEMPT` with a reason. For each covered entry point,
valid arguments come from its annotations (jaxtyping shapes and dtypes, tiny sizes) or from a
hand-written factory in `FACTORIES`; then one argument at a time is replaced by a bad one: NaN or
inf in a float array, a wrong rank, an integer array where floats are expected, an empty array,
mismatched leading sizes, a zero or negative size or scale, a level outside [0, 1], an int for a
PRNG key. The arrays inside a plain tuple argument (a batch ``(x, scales)``) are perturbed one entry
at a time, the others kept. Each case must raise a clear error (``ValueError``, ``TypeError``,
jaxtyping's ``TypeCheckError`` or ``EquinoxRuntimeError``) or return a result whose arrays are all
finite. For a NaN/inf input a NaN/inf output is accepted (IEEE propagation is visible) and counted
as "propagated"; a finite output is the silent failure (`metrics.energy_distance` returned about
-0.009 for a NaN in ``x``). Integer arrays where floats are expected must raise or give the result
of the same values as floats (`metrics.mmd_unbiased` truncated its bandwidths to the data's integer
dtype).

Entry points of `FAST_FAMILIES` (13 of the 18 families) run in the fast suite without the
`SLOW_ONLY_KINDS` (and a family of `REDUCED_FAST_TIER` without its extra kinds); their slow twin
`left_out` runs every left-out kind. The others (autoencoders, bridges, deconvolution, flows, nn:
their modules and training losses take seconds to compile each) run in the fast suite only the
`TRACE_KINDS` (a wrong shape, key or size, refused while tracing: through `eqx.filter_eval_shape`,
nothing compiles), and every kind in the slow suite. `SLOW_ENTRIES` (a whole solver or training
run per case) are slow only. The registry covers 508 of the 637 public names; the other 129 are
exempt, each with its reason (constants, exception types, interfaces, result types, and the
listings of `EXEMPT`). The examples of issue 40 have their own tests at the end of the module.
"""

import ast
import dataclasses
import functools as ft
import importlib
import inspect
import subprocess
import sys
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import jaxgen

ROOT = Path(jaxgen.__file__).parent


_TESTS_RUN = [0]


@pytest.fixture(autouse=True)
def _release_compiled_programs():
    """Drop the compiled programs every 50 entry points: a worker that runs hundreds of them
    otherwise keeps thousands of executables mapped (one worker's XLA compile aborted near the
    end of the whole registry). Clearing after every test doubled the registry's time, as the
    programs the entry points share were compiled again."""
    yield
    _TESTS_RUN[0] += 1
    if _TESTS_RUN[0] % 50 == 0:
        jax.clear_caches()


FAMILIES = sorted(p.parent.name for p in ROOT.glob("*/__init__.py"))


def public_names(family: str) -> list[str]:
    """The ``X as X`` re-exports of ``jaxgen/<family>/__init__.py`` (the public API)."""
    tree = ast.parse((ROOT / family / "__init__.py").read_text())
    names = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            names += [a.name for a in node.names if a.asname == a.name]
    return names


def _obj(qualname: str) -> Any:
    family, name = qualname.split(".")
    return getattr(importlib.import_module(f"jaxgen.{family}"), name)


# --------------------------------------------------------------------------------------------
# Valid arguments from the annotations.

# Named dims get distinct tiny sizes, so that a mismatch between two arguments shows.
DIM_SIZES = {"n": 5, "dim": 2, "d": 2, "K": 3, "k": 3, "m": 4, "T": 4, "N": 5, "C": 3, "B": 2}
DIM_SIZES |= {"H": 8, "W": 8, "h": 4, "w": 4, "D": 2}
DEFAULT_DIM = 3
KEY_NAMES = {"key", "keys", "rng"}
COV_HINTS = ("cov", "sigma_mat", "precision")
PROB_NAMES = {"probs", "p", "q", "pi", "weights_simplex"}


class NoFactory(Exception):
    """The annotations do not say how to build a valid value of this parameter."""


def _dim_size(dim: Any) -> int:
    if hasattr(dim, "size"):  # _FixedDim
        return int(dim.size)
    name = getattr(dim, "name", None)
    if name is None:
        raise NoFactory(f"dim {dim!r}")
    if isinstance(name, str) and name.isidentifier():
        return DIM_SIZES.get(name, DEFAULT_DIM)
    raise NoFactory(f"dim expression {name!r}")


def _is_jaxtyping(ann: Any) -> bool:
    return hasattr(ann, "dim_str") and hasattr(ann, "dtypes")


def _array_from(ann: Any, name: str) -> jax.Array:
    shape = []
    for dim in ann.dims:
        if type(dim).__name__ in ("_NamedVariadicDim", "_AnonymousVariadicDim"):
            continue  # "..." / "*batch": no batch axes
        shape.append(_dim_size(dim))
    shape = tuple(shape)
    dtypes = set(ann.dtypes)
    lname = name.lower()
    if dtypes and dtypes <= {"bool", "bool_"}:
        return jnp.ones(shape, bool)
    if dtypes and not dtypes & {"float32", "float64"}:
        if "int32" in dtypes or "int64" in dtypes or "uint32" in dtypes:
            return (jnp.arange(int(np.prod(shape))) % 2).reshape(shape).astype(jnp.int32)
        raise NoFactory(f"dtype {dtypes}")
    size = int(np.prod(shape))
    if any(h in lname for h in COV_HINTS) and len(shape) == 2 and shape[0] == shape[1]:
        return jnp.eye(shape[0]) * 0.7
    if lname in PROB_NAMES and len(shape) >= 1:
        return jnp.full(shape, 1.0 / shape[-1])
    # Generic floats inside (0.2, 0.8): positive, inside [0, 1], away from the ends.
    return jnp.asarray(0.2 + 0.6 * ((np.arange(size) * 0.618034) % 1.0)).reshape(shape)


def _family_classes(cls: type) -> list[type]:
    """Concrete public classes of jaxgen that are ``cls`` or subclass it (for module arguments)."""
    found = []
    for family in FAMILIES:
        mod = importlib.import_module(f"jaxgen.{family}")
        for name in public_names(family):
            obj = getattr(mod, name)
            if inspect.isclass(obj) and issubclass(obj, cls) and not inspect.isabstract(obj):
                found.append(obj)
    return found


def _instance_of(cls: type, depth: int) -> Any:
    """An instance of a jaxgen class, built from its annotations (first subclass that builds)."""
    if depth > 2 or not getattr(cls, "__module__", "").startswith("jaxgen"):
        raise NoFactory(f"class {cls!r}")
    for concrete in _family_classes(cls):
        try:
            return concrete(**auto_args(concrete, depth + 1))
        except Exception:  # noqa: BLE001, S112 - try the next subclass
            continue
    raise NoFactory(f"no buildable subclass of {cls.__name__}")


def _value_for(param: inspect.Parameter, depth: int = 0) -> Any:
    ann, name = param.annotation, param.name
    if inspect.isclass(ann) and not _is_jaxtyping(ann) and ann.__module__.startswith("jaxgen"):
        return _instance_of(ann, depth)
    if name in KEY_NAMES or "PRNGKey" in str(ann):
        return jr.key(0)
    if _is_jaxtyping(ann):
        return _array_from(ann, name)
    origin = typing.get_origin(ann)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        for arm in typing.get_args(ann):
            if _is_jaxtyping(arm):
                return _array_from(arm, name)
        arms = typing.get_args(ann)
        ann = next((t for t in (float, int, bool) if t in arms), ann)
    if ann is float:
        return 0.5
    if ann is int:
        return 2
    if ann is bool:
        return False
    if typing.get_origin(ann) is typing.Literal:
        return typing.get_args(ann)[0]
    raise NoFactory(f"parameter `{name}`: {ann!r}")


def auto_args(fn: Callable, depth: int = 0) -> dict[str, Any]:
    """Valid keyword arguments for the required parameters of ``fn`` from its annotations."""
    sig = inspect.signature(fn)
    hints = {}
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # noqa: BLE001 - forward references we cannot resolve: use raw annotations
        pass
    args = {}
    for param in sig.parameters.values():
        if (
            param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD)
            or param.default is not param.empty
        ):
            continue
        param = param.replace(annotation=hints.get(param.name, param.annotation))
        args[param.name] = _value_for(param, depth)
    return args


# --------------------------------------------------------------------------------------------
# Bad inputs, one argument at a time.

ACCEPTED = (ValueError, TypeError, eqx.EquinoxRuntimeError)


@dataclasses.dataclass(frozen=True)
class Case:
    arg: str
    kind: str  # nan, inf, rank_up, rank_down, int_dtype, empty, negative, mismatch, ...
    value: Any
    part: int | None = None  # the entry perturbed when ``arg`` is a tuple, e.g. batch=(x, scales)

    def label(self) -> str:
        return f"`{self.arg}`" if self.part is None else f"`{self.arg}[{self.part}]`"


def _is_float_array(v: Any) -> bool:
    return isinstance(v, jax.Array) and jnp.issubdtype(v.dtype, jnp.floating)


def _is_key(v: Any) -> bool:
    return isinstance(v, jax.Array) and jnp.issubdtype(v.dtype, jax.dtypes.prng_key)


# Kinds left out of the fast suite (each repeats a check of a kept kind, or recompiles).
SLOW_ONLY_KINDS = {"inf", "negative_int", "above_one"}


def _array_cases(v: Any) -> list[tuple[str, Any]]:
    """``(kind, bad value)`` for one array (nothing for other values)."""
    out = []
    if _is_float_array(v):
        if v.size:
            out.append(("nan", v.ravel().at[0].set(jnp.nan).reshape(v.shape)))
            out.append(("inf", v.ravel().at[-1].set(jnp.inf).reshape(v.shape)))
            out.append(("negative", -v - 1.0))
        out.append(("rank_up", v[None]))
        if v.ndim >= 1:
            out.append(("rank_down", v[..., 0]))
            out.append(("empty", v[:0]))
        out.append(("int_dtype", jnp.round(v * 4).astype(jnp.int32)))
    elif isinstance(v, jax.Array) and jnp.issubdtype(v.dtype, jnp.integer) and not _is_key(v):
        if v.size:
            out.append(("int_too_large", v + 1000))
            out.append(("int_negative", v - 1000))
        if v.ndim >= 1:
            out.append(("empty", v[:0]))
    return out


def _mismatches(items: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """``(name, shortened array)``: for each array, the next one sharing its leading size."""
    arrays = [(k, v) for k, v in items if isinstance(v, jax.Array) and v.ndim >= 1]
    arrays = [(k, v) for k, v in arrays if not _is_key(v)]
    out = []
    for i, (_, v1) in enumerate(arrays):
        for k2, v2 in arrays[i + 1 :]:
            if v1.shape[0] == v2.shape[0] >= 2:
                out.append((k2, v2[:-1]))
                break
    return out


def bad_cases(fn: Callable, args: dict[str, Any], *, fast: bool = False) -> list[Case]:
    """The bad inputs that the valid ``args`` (and the int/float defaults of ``fn``) admit.

    With ``fast``, the kinds of `SLOW_ONLY_KINDS` are left out.
    """
    cases = []
    for name, v in args.items():
        if _is_key(v):
            cases.append(Case(name, "key_int", 0))
        elif isinstance(v, tuple) and not hasattr(v, "_fields"):
            # A plain tuple of arrays (a batch such as (x, scales)): each entry in turn, the
            # others kept, and mismatched leading sizes between its entries.
            for i, entry in enumerate(v):
                for kind, bad in _array_cases(entry):
                    cases.append(Case(name, kind, v[:i] + (bad,) + v[i + 1 :], part=i))
            for i, bad in _mismatches(list(enumerate(v))):
                cases.append(Case(name, "mismatch", v[:i] + (bad,) + v[i + 1 :], part=i))
        else:
            cases += [Case(name, kind, bad) for kind, bad in _array_cases(v)]
    # Mismatched leading sizes between two array arguments that share one.
    cases += [Case(k, "mismatch", bad) for k, bad in _mismatches(list(args.items()))]
    # Sizes, scales and levels: the required ones and the defaults.
    for param in inspect.signature(fn).parameters.values():
        v = args.get(param.name, param.default)
        if isinstance(v, bool) or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if isinstance(v, int):
            cases += [Case(param.name, "zero", 0), Case(param.name, "negative_int", -1)]
        elif isinstance(v, float):
            cases += [
                Case(param.name, "nan_scalar", float("nan")),
                Case(param.name, "negative_scalar", -1.0),
                Case(param.name, "above_one", 1.5),
            ]
    return [c for c in cases if not (fast and c.kind in SLOW_ONLY_KINDS)]


def _leaves(out: Any) -> list[jax.Array]:
    return [x for x in jax.tree.leaves(out) if eqx.is_inexact_array(x)]


def _finite(out: Any) -> bool:
    return all(bool(jnp.all(jnp.isfinite(x))) for x in _leaves(out))


def _same(a: Any, b: Any) -> bool:
    """Equal arrays (any numeric dtype compared as floats) and equal other leaves."""
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    if len(la) != len(lb):
        return False
    for x, y in zip(la, lb, strict=True):
        if isinstance(x, jax.Array | np.ndarray) and isinstance(y, jax.Array | np.ndarray):
            if _is_key(x) or _is_key(y):
                continue
            if x.shape != y.shape or not np.allclose(
                np.asarray(x, float), np.asarray(y, float), rtol=1e-6, atol=1e-9, equal_nan=True
            ):
                return False
    return True


def run_case(fn: Callable, args: dict[str, Any], case: Case) -> str:
    """``"raised"`` or ``"finite"`` for a pass, else a description of the silent failure."""
    bad = {**args, case.arg: case.value}
    try:
        out = fn(**bad)
    except ACCEPTED:
        return "raised"
    except Exception as e:  # noqa: BLE001 - anything else is an unclear error
        if "EquinoxRuntimeError" in str(e) or "EqxRuntimeError" in type(e).__name__:
            return "raised"
        return f"unclear {type(e).__name__}: {str(e).splitlines()[0][:100] if str(e) else ''}"
    if case.kind in ("nan", "inf", "nan_scalar"):
        # NaN in, NaN out is visible (IEEE propagation), a finite number is not.
        return "propagated" if not _finite(out) else "returned a finite result for a NaN/inf input"
    if not _finite(out):
        return "returned NaN/inf"
    if case.kind == "int_dtype":
        if case.part is None:
            as_float = {**args, case.arg: case.value.astype(args[case.arg].dtype)}
        else:
            i, valid = case.part, args[case.arg]
            entry = case.value[i].astype(valid[i].dtype)
            as_float = {**args, case.arg: valid[:i] + (entry,) + valid[i + 1 :]}
        if not _same(out, fn(**as_float)):
            return "integer input gave a different result from the same values as floats"
    return "finite"


# --------------------------------------------------------------------------------------------
# Hand-written valid arguments, where the annotations do not say enough (callables, symmetric
# graphs, option strings).


def _adjacency(n: int = 6) -> jax.Array:
    upper = jnp.triu((jnp.arange(n)[:, None] + jnp.arange(n)[None, :]) % 2 == 0, k=1)
    return (upper | upper.T).astype(jnp.float64)


def _smooth_graphon(u: jax.Array, v: jax.Array) -> jax.Array:
    return 0.3 + 0.4 * u * v


def _unit_data(shape: tuple[int, ...]) -> jax.Array:
    """Deterministic values inside (0.1, 0.9) (bounded observations)."""
    size = int(np.prod(shape))
    return jnp.asarray(0.1 + 0.8 * ((np.arange(size) * 0.618034) % 1.0)).reshape(shape)


def _std_normal_logdensity(u: jax.Array) -> jax.Array:
    return -0.5 * jnp.sum(u**2)


def _shifted_normal_logdensity(u: jax.Array) -> jax.Array:
    return -0.5 * jnp.sum((u - 0.1) ** 2)


def _quadratic_potential() -> Any:
    return _obj("bridges.QuadraticLogPotential")(jnp.eye(2) * 0.5, jnp.array([0.2, -0.1]))


def _canonical() -> Any:
    return _obj("bridges.Canonical")(
        jnp.asarray(-0.3), jnp.array([0.2, -0.1]), jnp.array([[0.5, 0.1], [0.1, 0.4]])
    )


def _convex_log_wealth(m: jax.Array) -> jax.Array:
    return 10.0 * (m - 0.4) ** 2


def _gmm_args() -> dict[str, Any]:
    return {
        "weights": jnp.array([0.4, 0.6]),
        "means": jnp.array([[0.0, 0.5], [1.0, -0.5]]),
        "covs": jnp.stack([jnp.eye(2) * 0.5, jnp.eye(2) * 0.8]),
    }


def _uniform_schedule() -> Any:
    return _obj("discrete.InterpolatingSchedule")("uniform", 4)


def _masked_schedule() -> Any:
    return _obj("discrete.InterpolatingSchedule")("masked", 4, mask_id=4)


def _tiny_dit(vocab_size: int) -> Any:
    """A 1-layer bidirectional diffusion transformer (width 8, 2 heads, length <= 4)."""
    return _obj("discrete.DiffusionTransformer")(vocab_size, 8, 1, 2, 4, key=jr.key(0))


# Two clean sequences of length 4 over the 4 tokens of `_uniform_schedule` / `_masked_schedule`.
_SEQS = jnp.array([[0, 1, 2, 3], [3, 2, 2, 0]], jnp.int32)


def _discrete_loss(schedule: Callable[[], Any]) -> Callable[[], dict[str, Any]]:
    def factory() -> dict[str, Any]:
        s = schedule()
        return {"model": _tiny_dit(s.vocab_size), "x": _SEQS, "key": jr.key(0), "schedule": s}

    return factory


def _jump_args() -> dict[str, Any]:
    return {
        "key": jr.key(0),
        "z": jnp.array([0, 1, 2]),
        "log_lam": jnp.log(jnp.array([0.5, 1.0, 2.0])),
        "log_pi": jnp.log(jnp.full((3, 4), 0.25)),
        "h": 0.1,
    }


def _fp_args() -> dict[str, Any]:
    def logp(t: jax.Array, x: jax.Array) -> jax.Array:
        return -0.5 * jnp.sum(x**2) / (1.0 + t)

    return {
        "logp_fn": logp,
        "t": jnp.asarray(0.3),
        "x": jnp.array([0.3, -0.2]),
        "drift": lambda x: -x,
        "diffusion": lambda x: jnp.eye(2) * 0.5,
    }


def _gaussian_average_velocity() -> Any:
    return _obj("flows.GaussianAverageVelocity")(jnp.array([0.1, -0.2]), jnp.asarray(0.5))


def _conditional_average_velocity() -> Any:
    """u(z, r, t, c) of x | c ~ N(W c + b, s^2): a condition that enters the targets."""
    return _obj("flows.GaussianAverageVelocity")(
        jnp.array([0.1, -0.2]), jnp.asarray(0.5), jnp.array([[0.3], [-0.4]])
    )


def _uniform_rate_fn(z: jax.Array, t: jax.Array) -> tuple[jax.Array, jax.Array]:
    log_lam = jnp.full(z.shape, jnp.log(0.5))
    log_pi = jnp.where(jax.nn.one_hot(z, 4, dtype=bool), -1e9, jnp.log(1.0 / 3.0))
    return log_lam, log_pi


def _transition_flow_args() -> dict[str, Any]:
    return {
        "model": _obj("pde.CoxIngersollRoss")(),
        "box_lo": jnp.array([0.2, 0.5, 0.2, 0.1]),
        "box_hi": jnp.array([1.0, 2.0, 1.0, 0.5]),
        "num_units": 2,
        "width": 4,
        "depth": 1,
        "key": jr.key(0),
    }


@ft.cache  # an immutable module, built once for every factory that uses it
def _transition_flow() -> Any:
    return _obj("pde.TransitionFlow")(**_transition_flow_args())


def _ae_batch() -> dict[str, Any]:
    """A batch of 4 samples in R^3 with a 1-d context, for the autoencoder metrics."""
    return {
        "X": jnp.linspace(0.2, 0.8, 12).reshape(4, 3),
        "C": jnp.linspace(0.1, 0.4, 4).reshape(4, 1),
    }


def _ae_model() -> Any:
    return _obj("autoencoders.ConcatCAE")((3, 2), 1, key=jr.key(0))


def _ae_project(x: jax.Array, c: jax.Array) -> jax.Array:
    return 0.9 * x + 0.1 * c


_MARKOV = np.array([[0.9, 0.1], [0.3, 0.7]])
_DOCS = ["the cat sat on the mat", "abababababababab", "zq xj vk wp"]


def _icnn() -> Any:
    return _obj("nn.ICNN")(2, (3, 1), key=jr.key(0))


def _bowl(v: jax.Array) -> jax.Array:
    return jnp.sum(v**2)


def _pairs() -> dict[str, Any]:
    return {
        "x": jnp.linspace(0.1, 0.5, 6).reshape(3, 2),
        "y": jnp.linspace(0.4, 0.9, 6).reshape(3, 2),
    }


def _tiny_lm() -> Any:
    """A 1-layer causal transformer over 6 tokens (width 8, 2 heads)."""
    return _obj("nn.Transformer")(6, 8, 1, 2, 8, key=jr.key(0))


_TOKENS = jnp.array([[1, 2, 3, 4, 5, 0], [0, 5, 4, 3, 2, 1]], jnp.int32)


def _tiny_qes() -> Any:
    cfg = _obj("transformers.QESConfig")(num_experts=2, rank=2)
    return _obj("transformers.attach_qes")(_tiny_lm(), cfg, key=jr.key(1))


def _reverse_task() -> tuple[Any, Any]:
    return _obj("transformers.make_task")(jr.key(0), "reverse", 4)


def _planted_sparse_data() -> jax.Array:
    """(4, 12) data X = D R + 0.01 noise with 3 unit-norm atoms and ~40% non-zero codes."""
    k_dict, k_codes, k_mask, k_noise = jr.split(jr.key(1), 4)
    dictionary = jr.normal(k_dict, (4, 3))
    dictionary = dictionary / jnp.linalg.norm(dictionary, axis=0, keepdims=True)
    codes = jr.normal(k_codes, (3, 12)) * (jr.uniform(k_mask, (3, 12)) < 0.4)
    return dictionary @ codes + 0.01 * jr.normal(k_noise, (4, 12))


FACTORIES: dict[str, Callable[[], dict[str, Any]]] = {
    # discrete: a tiny diffusion transformer on two sequences of 4 tokens.
    "discrete.neural_ctmc_loss": _discrete_loss(_uniform_schedule),
    "discrete.gidd_loss": _discrete_loss(_uniform_schedule),
    "discrete.sedd_loss": _discrete_loss(_uniform_schedule),
    "discrete.mdlm_loss": _discrete_loss(_masked_schedule),
    "discrete.nelbo": lambda: {
        **_discrete_loss(_uniform_schedule)(),
        "x": _SEQS[0],
        "num_times": 4,
    },
    # flows: the exact Gaussian average velocity as student and its velocity as teacher, on a
    # batch of 4 two-dimensional samples with a one-dimensional condition.
    "flows.splitmeanflow_loss": lambda: {
        "student": _conditional_average_velocity(),
        "batch": (_unit_data((4, 2)), _unit_data((4, 1))),
        "key": jr.key(0),
        "teacher": _obj("flows.GaussianVelocity")(_conditional_average_velocity()),
    },
    # deconvolution: two steps of the sampled loss on 6 observations (bandwidths from the data).
    "deconvolution.fit_convmmd": lambda: {
        "prior": _obj("deconvolution.GaussianMixture")(**_gmm_args()),
        "data": (_unit_data((6, 2)), _unit_data((6, 2))),
        "key": jr.key(0),
        "num_steps": 2,
        "noise": _obj("deconvolution.NoiseModel")("gaussian"),
        "batch_size": 4,
        "progress": False,
    },
    # selectivity: 6 molecules, 2 targets, balanced labels; a 2-d toy objective.
    "selectivity.cross_target_auroc": lambda: {
        "C": jnp.array(
            [[-8.0, -6.0], [-6.5, -7.5], [-7.0, -6.2], [-6.1, -8.1], [-7.7, -7.0], [-6.9, -7.2]]
        ),  # fmt: skip
        "labels": jnp.array([0, 1, 0, 1, 0, 1]),
    },
    "selectivity.bootstrap_ci": lambda: {
        "key": jr.key(0),
        "metric_fn": _obj("selectivity.top1_rate"),
        "S": jnp.array([[-8.0, -6.0, -7.0], [-6.5, -7.5, -6.0], [-7.2, -6.2, -6.4]]),
        "n_boot": 16,
    },
    "selectivity.SelectivityObjective": lambda: {
        "on_fn": lambda x: -jnp.sum(x**2),
        "off_fn": lambda x: jnp.stack([-jnp.sum((x - 1) ** 2), -jnp.sum((x + 1) ** 2)]),
    },
    "selectivity.ClassifierGuidedVelocity": lambda: {
        "base": lambda t, x, args=None: -x,
        "objective": lambda x: -jnp.sum(x**2),
    },
    "selectivity.SurrogateBackend": lambda: {"landscapes": {"on": _bowl, "off": _bowl}},
    # transformers: a 1-layer LM over 6 tokens and the QES task generators.
    "transformers.token_nll": lambda: {"model": _tiny_lm(), "tokens": _TOKENS[0]},
    "transformers.sequence_log_prob": lambda: {"model": _tiny_lm(), "tokens": _TOKENS[0]},
    "transformers.score_sequences": lambda: {"model": _tiny_lm(), "tokens": _TOKENS},
    "transformers.generative_perplexity": lambda: {"scorer": _tiny_lm(), "samples": _TOKENS},
    "transformers.lm_loss": lambda: {"model": _tiny_lm(), "batch": _TOKENS, "key": jr.key(0)},
    "transformers.sample_lm": lambda: {
        "key": jr.key(0),
        "model": _tiny_lm(),
        "num_samples": 2,
        "length": 4,
        "prompt": jnp.array([1], jnp.int32),
    },
    # The in-context regressors and task batches at tiny sizes (the defaults compile a 4-layer,
    # width-64 network per case).
    **{
        f"transformers.{cls}": lambda: {
            "D": 2,
            "dim": 8,
            "num_layers": 1,
            "num_heads": 2,
            "num_frequencies": 4,
            "key": jr.key(0),
        }
        for cls in ("LinearAttentionICL", "SoftmaxICL")
    },
    "transformers.task_batch": lambda: {
        "key": jr.key(0),
        "batch": 2,
        "n_min": 3,
        "n_max": 4,
        "D": 2,
        "kappa": 0.25,
        "J": 4,
    },
    "transformers.attach_lora": lambda: {
        "model": _tiny_lm(),
        "rank": 2,
        "alpha": 4.0,
        "key": jr.key(0),
    },
    "transformers.attach_qes": lambda: {
        "model": _tiny_lm(),
        "cfg": _obj("transformers.QESConfig")(num_experts=2, rank=2),
        "key": jr.key(0),
    },
    "transformers.shutdown": lambda: {"model": _tiny_qes(), "expert": 1},
    "transformers.restore": lambda: {"model": _tiny_qes()},
    "transformers.trainable_filter": lambda: {"model": _tiny_qes()},
    "transformers.adapter_optimizer": lambda: {
        "model": _tiny_qes(),
        "learning_rate": 1e-3,
        "num_steps": 10,
    },
    "transformers.attack_success_rate": lambda: {
        "pred": jnp.zeros((2, 15), jnp.int32),
        "task": "reverse",
    },
    "transformers.poison": lambda: {
        "key": jr.key(0),
        "x": _reverse_task()[0],
        "y": _reverse_task()[1],
        "task": "reverse",
        "attack": "rare_token",
        "rate": 0.5,
    },
    "transformers.evaluate_lm": lambda: {
        "model": _tiny_lm(),
        "tokens": jnp.arange(40) % 6,
        "context": 4,
        "batch_size": 4,
    },
    "transformers.make_task": lambda: {"key": jr.key(0), "name": "reverse", "n": 4},
    "transformers.clean_test_set": lambda: {"key": jr.key(0), "task": "reverse", "n": 4},
    "transformers.triggered_test_set": lambda: {
        "key": jr.key(0),
        "task": "reverse",
        "attack": "rare_token",
        "n": 4,
    },
    # nn: 2-input networks of widths (3, 1), a quadratic bowl for the shape diagnostics.
    "nn.ICNN": lambda: {"in_size": 2, "widths": (3, 1), "key": jr.key(0)},
    "nn.ReLUNet": lambda: {"in_size": 2, "widths": (3, 1), "key": jr.key(0)},
    "nn.ReLUPlusNet": lambda: {"in_size": 2, "widths": (3, 1), "key": jr.key(0)},
    "nn.center_biases": lambda: {"model": _icnn(), "x": jnp.linspace(0.1, 0.9, 10).reshape(5, 2)},
    "nn.check_constraints": lambda: {
        "model": _obj("nn.project_nonneg")(
            _obj("nn.ICNN")(2, (3, 1), key=jr.key(0), mode="project")
        )
    },
    "nn.project_nonneg": lambda: {"model": _icnn()},
    "nn.count_parameters": lambda: {"tree": _icnn()},
    "nn.adapted_linear": lambda: {
        "x": jnp.linspace(0.1, 0.9, 12).reshape(4, 3),
        "w": jnp.linspace(-0.5, 0.5, 6).reshape(2, 3),
        "name": "w",
        "adapter": None,
    },
    "nn.init_normal": lambda: {"key": jr.key(0), "shape": (2, 3)},
    "nn.apply_rotary": lambda: {
        "x": jnp.linspace(-1.0, 1.0, 32).reshape(4, 2, 4),
        "positions": jnp.arange(4.0),
    },
    "nn.make_mixer": lambda: {"mixer": "mlp", "dim": 4, "key": jr.key(0)},
    "nn.TransformerBlock": lambda: {
        "dim": 8,
        "num_heads": 2,
        "mixer": "mlp",
        "mixer_kwargs": {},
        "rotary": True,
        "time_conditioning": False,
        "out_std": 0.02,
        "key": jr.key(0),
    },
    "nn.dyadic_active_depth": lambda: {"step": 3, "total_steps": 10, "depth": 3},
    "nn.dyadic_schedule": lambda: {
        "optimizer": __import__("optax").sgd(0.1),
        "total_steps": 10,
        "depth": 3,
    },
    "nn.dyadic_grad_mask": lambda: {
        "tree": _obj("nn.CffnMixer")(4, key=jr.key(0)),
        "active_depth": 2,
    },
    "nn.convexity_gap": lambda: {"f": _bowl, **_pairs()},
    "nn.monotonicity_gap": lambda: {"f": _bowl, **_pairs()},
    "nn.supermodularity_gap": lambda: {"f": _bowl, **_pairs()},
    "nn.corner_floor": lambda: {"f": _bowl, "n": 2},
    "nn.squared_error_loss": lambda: {
        "model": _bowl,
        "batch": (_pairs()["x"], jnp.array([0.1, 0.2, 0.3])),
        "key": jr.key(0),
    },
    "nn.sup_error": lambda: {
        "key": jr.key(0),
        "f": _bowl,
        "g": lambda v: jnp.sum(v**2) + 0.1 * v[0],
        "n": 2,
        "num_samples": 16,
        "num_starts": 2,
        "num_ascent": 3,
    },
    "nn.BoxSampler": lambda: {"target": _bowl, "n": 2, "batch_size": 4},
    # autoencoders: tiny models (dims (3, 2), a 1-d context) and batches of 4.
    "autoencoders.MLPAutoencoder": lambda: {"dims": (3, 2), "key": jr.key(0)},
    "autoencoders.ConstrainedAE": lambda: {"dims": (3, 2), "key": jr.key(0)},
    "autoencoders.ConcatAE": lambda: {"dims": (3, 2), "context_dim": 1, "key": jr.key(0)},
    "autoencoders.ConcatCAE": lambda: {"dims": (3, 2), "context_dim": 1, "key": jr.key(0)},
    "autoencoders.FiLMAE": lambda: {"dims": (3, 2), "context_dim": 1, "key": jr.key(0)},
    "autoencoders.FiLMCAE": lambda: {"dims": (3, 2), "context_dim": 1, "key": jr.key(0)},
    "autoencoders.NcAE": lambda: {
        "dims": (3, 2),
        "context_dim": 1,
        "hyper_width": 4,
        "hyper_depth": 1,
        "key": jr.key(0),
    },
    "autoencoders.recon_rel_mse": lambda: {"project": _ae_project, **_ae_batch()},
    "autoencoders.idempotency_error": lambda: {"project": _ae_project, **_ae_batch()},
    "autoencoders.left_inverse_error": lambda: {"model": _ae_model(), **_ae_batch()},
    "autoencoders.decoder_condition": lambda: {"model": _ae_model(), **_ae_batch()},
    "autoencoders.context_lipschitz": lambda: {
        "model": _ae_model(),
        "Z": jnp.linspace(0.2, 0.8, 8).reshape(4, 2),
        "C": jnp.linspace(0.1, 0.4, 4).reshape(4, 1),
        "delta": 0.1,
    },
    "autoencoders.procrustes_consistency": lambda: {
        "Z_a": jnp.array([[0.1, 0.9], [0.4, 0.2], [0.8, 0.5], [0.3, 0.7]]),
        "Z_b": jnp.array([[0.2, 0.8], [0.5, 0.1], [0.7, 0.6], [0.3, 0.6]]),
    },
    "autoencoders.ncae_loss": lambda: {
        "model": _ae_model(),
        "batch": tuple(_ae_batch().values()),
        "key": jr.key(0),
    },
    # entropy: short byte strings and a two-state chain.
    "entropy.markov_entropy_rate": lambda: {"transition": jnp.asarray(_MARKOV)},
    "entropy.sample_markov": lambda: {
        "key": jr.key(0),
        "transition": jnp.asarray(_MARKOV),
        "length": 16,
    },
    "entropy.to_symbols": lambda: {"seq": "abracadabra"},
    "entropy.match_lengths": lambda: {"seq": "abracadabra"},
    "entropy.match_lengths_bruteforce": lambda: {"seq": "abracadabra"},
    "entropy.entropy_rate": lambda: {"seq": "abracadabra abracadabra"},
    "entropy.score_documents": lambda: {"docs": _DOCS},
    "entropy.diversity_metrics": lambda: {"docs": _DOCS},
    "entropy.filter_by_entropy": lambda: {"docs": _DOCS, "keep": 2},
    "entropy.filter_random": lambda: {"key": jr.key(0), "docs": _DOCS, "keep": 2},
    "entropy.filter_by_logprob": lambda: {
        "docs": _DOCS,
        "model": lambda doc: -float(len(doc)),
        "keep": 0.5,
    },
    # dictionary: a 4 x 12 data matrix and a 3-atom dictionary.
    "dictionary.transform": lambda: {
        "X": jnp.linspace(-1.0, 1.0, 48).reshape(4, 12) ** 3,
        "dictionary": jnp.eye(4)[:, :3],
        "lam1": 0.05,
        "num_steps": 10,
    },
    # Planted sparse data (3 unit atoms, 40% active codes, noise 0.01): the MDL prices keep atoms
    # there, while on dense data this small (e.g. a 4 x 12 sine grid) every atom is pruned and
    # fit_padl rightly raises.
    "dictionary.fit_padl": lambda: {
        "X": _planted_sparse_data(),
        "num_atoms": 3,
        "key": jr.key(0),
        "max_steps": 4,
        "warmup_steps": 5,
        "ramp_steps": 1,
        "fista_steps": 5,
        "prune_every": 2,
        "reestimate_every": 2,
        "path_size": 3,
        "path_steps": 3,
    },
    # an optimiser factory: only its numbers get bad cases (checked when it is built)
    "core.adamw_cosine": lambda: {"learning_rate": 1e-3, "num_steps": 10},
    "core.solve_ode": lambda: {"vector_field": lambda t, y, a: -y, "y0": jnp.array([1.0, 0.5])},
    "core.solve_sde": lambda: {
        "drift": lambda t, y, a: -y,
        "diffusion": lambda t, y, a: 0.1 * jnp.ones_like(y),
        "y0": jnp.array([1.0, 0.5]),
        "key": jr.key(0),
        "steps": 4,
    },
    "core.check_kernel": lambda: {"kernel": "gaussian"},
    "graphs.check_adjacency": lambda: {"A": _adjacency()},
    "graphs.usvt": lambda: {"A": _adjacency()},
    "graphs.sas": lambda: {"A": _adjacency()},
    "graphs.network_histogram": lambda: {"A": _adjacency(), "K": 2, "key": jr.key(0)},
    "graphs.estimate_graphon": lambda: {
        "A": _adjacency(),
        "K": 2,
        "key": jr.key(0),
        "max_steps": 5,
    },
    "graphs.graphon": lambda: {"name": next(iter(_obj("graphs.GRAPHONS")))},
    "graphs.graphon_grid": lambda: {"graphon_fn": _smooth_graphon, "r": 4},
    "graphs.sample_graphon": lambda: {"key": jr.key(0), "n": 5, "graphon_fn": _smooth_graphon},
    "graphs.graphon_l2_sorted": lambda: {
        "block_matrix": jnp.array([[0.6, 0.2], [0.2, 0.5]]),
        "block_proportions": jnp.array([0.5, 0.5]),
        "graphon_fn": _smooth_graphon,
        "r": 8,
    },
    "graphs.link_auc": lambda: {
        "scores": jnp.linspace(0.1, 0.9, 36).reshape(6, 6),
        "A": _adjacency(),
        "mask": jnp.ones((6, 6), bool),
    },
    "metrics.psnr": lambda: {
        "x": jnp.full((8, 8), 0.4),
        "y": jnp.full((8, 8), 0.5),
        "data_range": 1.0,
    },
    "metrics.ssim": lambda: {
        "x": jnp.linspace(0.2, 0.8, 64).reshape(8, 8),
        "y": jnp.linspace(0.25, 0.75, 64).reshape(8, 8),
        "data_range": 1.0,
    },
    "metrics.lr_consistency_psnr": lambda: {
        "sr": jnp.linspace(0.2, 0.8, 64).reshape(8, 8),
        "lr": jnp.full((4, 4), 0.5),
        "scale": 2,
    },
    # bridges, confseq, data, deconvolution, discrete, energy, flows, pde:
    "confseq.miscoverage": lambda: {
        "x": _unit_data((2, 6, 2)),
        "mu": jnp.array([0.5, 0.5]),
        "kind": "bonferroni",
    },
    "bridges.gaussian_kl": lambda: {
        "mu0": jnp.array([0.1, -0.2]),
        "S0": jnp.eye(2) * 0.7,
        "mu1": jnp.array([0.3, 0.1]),
        "S1": jnp.array([[1.0, 0.2], [0.2, 0.8]]),
    },
    "bridges.log_h": lambda: {
        "psi": _quadratic_potential(),
        "ref": _obj("bridges.OUReference")(2),
        "x": jnp.array([0.3, -0.2]),
        "t": jnp.asarray(0.2),
        "T": jnp.asarray(1.0),
    },
    "bridges.DoobDrift": lambda: {
        "psi": _quadratic_potential(),
        "ref": _obj("bridges.OUReference")(2),
        "T": jnp.asarray(1.0),
        "quad": None,
    },
    "bridges.evaluate_nll": lambda: {
        "key": jr.key(0),
        "psi": _quadratic_potential(),
        "Y": _unit_data((5, 2)),
        "ref": _obj("bridges.OUReference")(2),
        "T": 1.0,
        "num_sources": 8,
        "num_inner": 4,
    },
    "bridges.sample_bridge": lambda: {
        "key": jr.key(0),
        "psi": _quadratic_potential(),
        "ref": _obj("bridges.OUReference")(2),
        "T": 1.0,
        "x0": _unit_data((3, 2)),
        "num_steps": 4,
    },
    "bridges.check_samples": lambda: {"Y": _unit_data((5, 2)), "dim": 2},
    "bridges.leaf_message": lambda: {
        "y": jnp.array([0.3, -0.1]),
        "C": jnp.array([[1.0, 0.0], [0.5, 1.0]]),
        "R": jnp.eye(2) * 0.5,
    },
    "bridges.pullback": lambda: {
        "msg": _canonical(),
        "Phi": jnp.eye(2) * 0.9,
        "beta": jnp.array([0.1, -0.1]),
        "Q": jnp.eye(2) * 0.2,
    },
    "bridges.log_evidence": lambda: {"root_msg": _canonical(), "x_root": jnp.array([0.1, 0.2])},
    "bridges.fuse": lambda: {
        "msgs": jax.tree.map(lambda a: jnp.stack([a, a]), _canonical()),
    },
    "bridges.guided_drift": lambda: {
        "drift": lambda t, x, a: -x,
        "diffusion_matrix": jnp.eye(2) * 0.5,
        "grad_log_h": lambda t, x, a: -x,
    },
    "bridges.GuidedDrift": lambda: {
        "drift": lambda t, x, a: -x,
        "diffusion_matrix": jnp.eye(2) * 0.5,
        "grad_log_h": lambda t, x, a: -x,
    },
    "confseq.excluded_path": lambda: {
        "x": _unit_data((6, 2)),
        "mu": jnp.array([0.5, 0.5]),
        "kind": "bonferroni",
    },
    "confseq.confidence_region": lambda: {"x": _unit_data((6, 2)), "kind": "box"},
    "confseq.cs_exact": lambda: {
        "f": _convex_log_wealth,
        "level": jnp.asarray(1.0),
        "center": jnp.asarray(0.4),
    },
    "confseq.wealth_min_lower_bound": lambda: {
        "f": _convex_log_wealth,
        "dtype": jnp.result_type(float),
    },
    "data.laplace_mixture_1d": lambda: {"key": jr.key(0), "n": 5, "noise": "gaussian"},
    "data.blur_radius": lambda: {"sigma_max": 1.0, "shape": (8, 8)},
    "data.upsample": lambda: {"lr": _unit_data((4, 4)), "shape": (8, 8)},
    "data.sample_toy_2d": lambda: {"key": jr.key(0), "name": "two_moons", "num": 5},
    "data.corrupt": lambda: {
        "key": jr.key(0),
        "images": _unit_data((2, 8, 8)),
        "name": "gaussian_noise",
        "severity": 0.5,
    },
    "data.coupled_pendulum_field": lambda: {
        "t": 0.0,
        "x": _unit_data((4,)),
        "args": (0.5, jnp.array([1.0, 1.2]), 9.81, 0.1),
    },
    "data.lorenz96_field": lambda: {"t": 0.0, "x": _unit_data((5,)), "args": 8.0},
    "deconvolution.NoiseModel": lambda: {"kind": "gaussian"},
    "deconvolution.GaussianMixture": lambda: _gmm_args(),
    "deconvolution.noise_covariances": lambda: {"scales": _unit_data((5, 2))},
    "deconvolution.posterior_mean_gmm": lambda: {
        "gmm": _obj("deconvolution.GaussianMixture")(**_gmm_args()),
        "x": _unit_data((5, 2)),
        "scales": _unit_data((5, 2)),
    },
    "deconvolution.convmmd_loss_gmm_closed": lambda: {
        "gmm": _obj("deconvolution.GaussianMixture")(**_gmm_args()),
        "batch": (_unit_data((5, 2)), _unit_data((5, 2))),
        "bandwidths": jnp.array([0.5, 1.0]),
    },
    "deconvolution.deconv_kde": lambda: {
        "x": _unit_data((5, 1)),
        "scales": _unit_data((5, 1)),
        "z_grid": jnp.linspace(-1.0, 1.0, 6),
        "bandwidth": 0.5,
        "noise": _obj("deconvolution.NoiseModel")("gaussian"),
        "num_t": 64,
    },
    "deconvolution.npmle_em": lambda: {
        "x": _unit_data((5, 2)),
        "scales": _unit_data((5, 2)),
        "grid": _unit_data((4, 2)),
        "noise": _obj("deconvolution.NoiseModel")("gaussian"),
        "max_steps": 5,
        "throw": False,
    },
    "deconvolution.npmle_posterior_mean": lambda: {
        "x": _unit_data((5, 2)),
        "scales": _unit_data((5, 2)),
        "grid": _unit_data((4, 2)),
        "weights": jnp.full((4,), 0.25),
        "noise": _obj("deconvolution.NoiseModel")("gaussian"),
    },
    "deconvolution.init_gaussian_mixture": lambda: {
        "key": jr.key(0),
        "x": _unit_data((6, 2)),
        "num_components": 2,
        "scales": _unit_data((6, 2)),
        "num_iters": 3,
    },
    "discrete.InterpolatingSchedule": lambda: {"kind": "masked", "num_tokens": 4, "mask_id": 4},
    "discrete.conditional_targets": lambda: {
        "schedule": _uniform_schedule(),
        "x": jnp.array([0, 1, 2, 3]),
        "z": jnp.array([0, 3, 2, 3]),
        "t": jnp.asarray(0.5),
    },
    "discrete.reference_log_exit_rate": lambda: {
        "schedule": _uniform_schedule(),
        "z": jnp.array([0, 3, 2, 3]),
        "t": jnp.asarray(0.5),
    },
    "discrete.rates_from_x0": lambda: {
        "schedule": _uniform_schedule(),
        "z": jnp.array([0, 3, 2, 3]),
        "log_x0": jnp.log(jnp.full((4, 4), 0.25)),
        "t": jnp.asarray(0.5),
    },
    "discrete.rates_from_score": lambda: {
        "schedule": _uniform_schedule(),
        "z": jnp.array([0, 3, 2, 3]),
        "log_score": jnp.log(jnp.full((4, 4), 0.5)),
        "t": jnp.asarray(0.5),
    },
    "discrete.score_entropy": lambda: {
        "schedule": _uniform_schedule(),
        "x": jnp.array([0, 1, 2, 3]),
        "z": jnp.array([0, 3, 2, 3]),
        "log_score": jnp.log(jnp.full((4, 4), 0.5)),
        "t": jnp.asarray(0.5),
    },
    "discrete.mdlm_integrand": lambda: {
        "schedule": _masked_schedule(),
        "x": jnp.array([0, 1, 2, 3]),
        "z": jnp.array([0, 4, 2, 4]),
        "log_x0": jnp.log(jnp.full((4, 5), 0.2)),
        "t": jnp.asarray(0.5),
    },
    "discrete.gidd_integrand": lambda: {
        "schedule": _obj("discrete.InterpolatingSchedule")("gidd", 4, mask_id=4),
        "x": jnp.array([0, 1, 2, 3]),
        "z": jnp.array([0, 4, 2, 4]),
        "log_x0": jnp.log(jnp.full((4, 5), 0.2)),
        "t": jnp.asarray(0.5),
    },
    "discrete.euler_jump_step": lambda: _jump_args(),
    "discrete.tau_leap_step": lambda: _jump_args(),
    "energy.sgld": lambda: {
        "key": jr.key(0),
        "energy_fn": lambda x: 0.5 * jnp.sum(x**2),
        "x0": _unit_data((3, 2)),
        "num_steps": 3,
    },
    "flows.euler_pushforward": lambda: {
        "vector_field": lambda t, x, a: -x,
        "x0": jnp.array([0.3, -0.2]),
        "num_steps": 3,
    },
    "flows.material_acceleration": lambda: {
        "vector_field": lambda t, x, a: -x * (1.0 + t),
        "t": jnp.asarray(0.3),
        "x": jnp.array([0.3, -0.2]),
    },
    "flows.straightness": lambda: {
        "vector_field": lambda t, x, a: -x * (1.0 + t),
        "x0": jnp.array([0.3, -0.2]),
        "num_steps": 3,
    },
    "flows.monotone_tanh_inverse": lambda: {
        "params": _unit_data((8,)) - 0.5,
        "z": jnp.asarray(0.3),
        "num_units": 2,
        "num_iters": 5,
    },
    "flows.rq_spline": lambda: {
        "params": _unit_data((11,)) - 0.5,
        "x": jnp.asarray(0.3),
        "num_bins": 4,
        "tail_bound": 3.0,
    },
    "flows.reverse_posterior_coeffs": lambda: {"t": jnp.asarray(0.6), "s": jnp.asarray(0.3)},
    "flows.trajectory_covariance": lambda: {"ts": jnp.array([0.2, 0.5, 0.8, 1.0])},
    "flows.ema_update": lambda: {
        "ema": {"w": jnp.array([0.1, 0.2])},
        "model": {"w": jnp.array([0.3, 0.4])},
        "decay": 0.9,
    },
    "pde.box_inverse": lambda: {
        "x": jnp.array([0.3, 1.5]),
        "lo": jnp.array([0.0, 1.0]),
        "hi": jnp.array([1.0, 2.0]),
    },
    "pde.box_transform": lambda: {
        "u": jnp.array([0.3, -0.5]),
        "lo": jnp.array([0.0, 1.0]),
        "hi": jnp.array([1.0, 2.0]),
    },
    "pde.exact_log_transition": lambda: {
        "model": _obj("pde.CoxIngersollRoss")(),
        "t": jnp.asarray(0.1),
        "x": jnp.array([0.5]),
        "x0": jnp.array([0.4]),
        "lam": jnp.array([1.0, 0.5, 0.3]),
    },
    "pde.exact_path_loglik": lambda: {
        "model": _obj("pde.CoxIngersollRoss")(),
        "xs": jnp.array([[0.4], [0.5], [0.45]]),
        "lam": jnp.array([1.0, 0.5, 0.3]),
        "delta": jnp.asarray(0.1),
    },
    "pde.euler_path_loglik": lambda: {
        "model": _obj("pde.CoxIngersollRoss")(),
        "xs": jnp.array([[0.4], [0.5], [0.45]]),
        "lam": jnp.array([1.0, 0.5, 0.3]),
        "delta": jnp.asarray(0.1),
    },
    "pde.frozen_gaussian_reference": lambda: {
        "model": _obj("pde.CoxIngersollRoss")(),
        "x0": jnp.array([0.4]),
        "lam": jnp.array([1.0, 0.5, 0.3]),
        "t": jnp.asarray(0.1),
    },
    "pde.simulate_path": lambda: {
        "key": jr.key(0),
        "model": _obj("pde.CoxIngersollRoss")(),
        "x0": jnp.array([0.4]),
        "lam": jnp.array([1.0, 0.5, 0.3]),
        "delta": 0.1,
        "n_obs": 3,
        "substeps": 2,
    },
    "pde.fp_log_rhs": lambda: _fp_args(),
    "pde.fp_log_residual": lambda: _fp_args(),
    "data.lorenz96_eigenplane": lambda: {"N": 8, "k": 2},
    "energy.ReplayBuffer": lambda: {
        "data": _unit_data((4, 2)),
        "num_classes": 2,
        "low": -1.0,
        "high": 1.0,
    },
    "flows.monotone_tanh": lambda: {
        "params": _unit_data((8,)) - 0.5,
        "x": jnp.asarray(0.3),
        "num_units": 2,
    },
    "pde.to_y": lambda: {"model": _obj("pde.CoxIngersollRoss")(), "x": jnp.array([0.5])},
    "pde.log_abs_det_jphi": lambda: {
        "model": _obj("pde.CoxIngersollRoss")(),
        "x": jnp.array([0.5]),
    },
    "bridges.TreeTopology": lambda: {
        "parent": np.array([-1, 0, 0, 1, 1]),
        "branch_length": np.array([0.0, 0.5, 0.4, 0.3, 0.2]),
    },
    "data.random_windows": lambda: {"tokens": jnp.arange(20), "batch_size": 2, "length": 4},
    # numpy data (the dtype the annotation asks for): only the scalars get bad cases.
    "data.pendulum_lowest_mode": lambda: {"kappa": 0.5, "lengths": np.array([1.0, 1.2])},
    "data.extract_patches": lambda: {
        "key": jr.key(0),
        "image": np.asarray(_unit_data((8, 8))),
        "size": 4,
        "num": 3,
    },
    "deconvolution.tweedie": lambda: {
        "log_marginal_fn": lambda x, cov: -0.5 * x @ jnp.linalg.solve(jnp.eye(2) + cov, x),
        "x": _unit_data((5, 2)),
        "cov": jnp.broadcast_to(jnp.eye(2) * 0.3, (5, 2, 2)),
    },
    "deconvolution.convmmd_loss": lambda: {
        "prior": _obj("deconvolution.GaussianMixture")(**_gmm_args()),
        "batch": (_unit_data((5, 2)), _unit_data((5, 2))),
        "key": jr.key(0),
        "noise": _obj("deconvolution.NoiseModel")("gaussian"),
        "bandwidths": jnp.array([0.5, 1.0]),
    },
    "deconvolution.convmmd_loss_gmm_marginal": lambda: {
        "gmm": _obj("deconvolution.GaussianMixture")(**_gmm_args()),
        "batch": (_unit_data((5, 2)), _unit_data((5, 2))),
        "noise": _obj("deconvolution.NoiseModel")("gaussian"),
        "bandwidths": jnp.array([0.5, 1.0]),
        "key": jr.key(0),
    },
    "deconvolution.posterior_mean_snis": lambda: {
        "key": jr.key(0),
        "prior": _obj("deconvolution.GaussianMixture")(**_gmm_args()),
        "x": _unit_data((5, 2)),
        "scales": _unit_data((5, 2)),
        "noise": _obj("deconvolution.NoiseModel")("gaussian"),
        "num_samples": 128,
        "batch_size": None,
    },
    "discrete.sample_rates": lambda: {
        "key": jr.key(0),
        "rate_fn": _uniform_rate_fn,
        "schedule": _uniform_schedule(),
        "num": 2,
        "length": 3,
        "steps": 2,
    },
    "energy.jem_loss": lambda: {
        "model": _obj("energy.MLPClassifier")(2, 3, width=4, depth=1, key=jr.key(0)),
        "x": _unit_data((3, 2)),
        "y": jnp.array([0, 1, 2]),
        "x_neg": _unit_data((3, 2)) - 0.5,
        "config": _obj("energy.JEMConfig")(mix=0.5, num_steps=2),
    },
    "flows.one_step_generate": lambda: {
        "student": _gaussian_average_velocity(),
        "noise": _unit_data((3, 2)) - 0.5,
        "cond": None,
    },
    "flows.sample_average_velocity": lambda: {
        "key": jr.key(0),
        "model": _gaussian_average_velocity(),
        "cond": None,
        "shape": (2,),
    },
    "flows.sample_velocity_euler": lambda: {
        "key": jr.key(0),
        "velocity": _obj("flows.GaussianVelocity")(_gaussian_average_velocity()),
        "cond": None,
        "dim": 2,
        "steps": 3,
    },
    "flows.isc_target": lambda: {
        "model": _gaussian_average_velocity(),
        "z_t": jnp.array([0.3, -0.2]),
        "r": jnp.asarray(0.2),
        "s": jnp.asarray(0.5),
        "t": jnp.asarray(0.8),
    },
    "flows.forward_trajectory": lambda: {
        "key": jr.key(0),
        "x0": jnp.array([0.3, -0.2]),
        "ts": jnp.array([0.2, 0.5, 0.8, 1.0]),
    },
    "flows.flow_matching_loss": lambda: {
        "model": _obj("flows.MLPVelocityField")(2, 4, 1, key=jr.key(0)),
        "batch": (_unit_data((4, 2)) - 0.5, _unit_data((4, 2))),
        "key": jr.key(1),
        "interpolant": _obj("flows.LinearInterpolant")(),
    },
    "flows.meanflow_loss": lambda: {
        "model": _gaussian_average_velocity(),
        "batch": (_unit_data((4, 2)), None),
        "key": jr.key(1),
    },
    "pde.TransitionFlow": lambda: _transition_flow_args(),
    "pde.flow_parameters": lambda: {"flow": _transition_flow()},
    "pde.surrogate_path_loglik": lambda: {
        "flow": _transition_flow(),
        "xs": jnp.array([[0.4], [0.5], [0.45]]),
        "lam": jnp.array([1.0, 0.5, 0.3]),
        "delta": jnp.asarray(0.1),
    },
    "pde.ng_velocity": lambda: {
        "flow": _transition_flow(),
        "t": jnp.asarray(0.1),
        "xs": jnp.array([[0.4], [0.5], [0.45]]),
        "x0s": jnp.array([[0.45], [0.4], [0.5]]),
        "lams": jnp.tile(jnp.array([1.0, 0.5, 0.3]), (3, 1)),
    },
    "pde.delayed_acceptance_hmc": lambda: {
        "key": jr.key(0),
        "surrogate_logdensity_fn": _std_normal_logdensity,
        "exact_logdensity_fn": _shifted_normal_logdensity,
        "init": jnp.zeros(2),
        "num_samples": 3,
        "step_size": 0.3,
        "inverse_mass_matrix": jnp.ones(2),
        "num_integration_steps": 2,
        "num_surrogate_steps": 1,
    },
}

# --- bridges: a 3-node tree (root, two leaves), discrete edges in R^2 and SDE edges in R^1 ---


def _tree_topo() -> Any:
    return _obj("bridges.TreeTopology").balanced(1, branch_length=0.5)


_TREE_Y = jnp.array([[0.5], [-0.4]])  # one observation per leaf
_TREE_C, _TREE_R = jnp.array([[1.0, 0.5]]), jnp.array([[0.05]])


def _tree_kernels() -> Any:
    return _obj("bridges.LinearKernels")(
        jnp.broadcast_to(jnp.array([[0.9, 0.2], [-0.1, 0.8]]), (3, 2, 2)),
        jnp.broadcast_to(jnp.array([0.1, -0.2]), (3, 2)),
        jnp.broadcast_to(jnp.array([[0.3, 0.05], [0.05, 0.2]]), (3, 2, 2)),
    )


def _tree_mean(x: jax.Array, tau: jax.Array) -> jax.Array:
    return jnp.array([[0.9, 0.2], [-0.1, 0.8]]) @ x + jnp.array([0.1, -0.2])


def _tree_cov(x: jax.Array, tau: jax.Array) -> jax.Array:
    return jnp.array([[0.3, 0.05], [0.05, 0.2]])


def _tree_drift(t: jax.Array, x: jax.Array) -> jax.Array:
    return -0.5 * x


def _tree_sigma(t: jax.Array, x: jax.Array) -> jax.Array:
    return 0.6 * jnp.eye(1, dtype=x.dtype)


def _tree_sde_proxy() -> Any:
    a = jnp.full((3, 1, 1), 0.36)
    return _obj("bridges.LinearSDEs")(jnp.zeros((3, 1, 1)), jnp.zeros((3, 1)), a, a)


def _guided_tree_args(kind: str = "kernel") -> dict[str, Any]:
    """Valid `GuidedTree` fields: discrete edges (``"kernel"``) or SDE edges, 2 steps each."""
    return dict(_guided_tree_fields(kind))


@ft.cache  # immutable modules: the backward filter is compiled once per kind
def _guided_tree_fields(kind: str) -> dict[str, Any]:
    topo = _tree_topo()
    backward_filter = eqx.filter_jit(_obj("bridges.backward_filter"))
    if kind == "kernel":
        proxy = _tree_kernels()
        filt = backward_filter(topo, _TREE_Y, proxy, C=_TREE_C, R=_TREE_R)
        model, x_root = _obj("bridges.TreeKernel")(_tree_mean, _tree_cov), jnp.array([0.3, -0.2])
    else:
        proxy = _tree_sde_proxy()
        filt = backward_filter(topo, _TREE_Y, proxy, R=_TREE_R, num_steps=2)
        model, x_root = _obj("bridges.TreeSDE")(_tree_drift, _tree_sigma), jnp.zeros(1)
    return {"topo": topo, "model": model, "filt": filt, "proxy": proxy, "x_root": x_root}


@ft.cache
def _guided_tree(kind: str = "kernel") -> Any:
    return _obj("bridges.GuidedTree")(**_guided_tree_args(kind))


def _control_net() -> Any:
    return _obj("bridges.ControlNet")(1, 1, 4, 1, key=jr.key(0))


BRIDGES_FACTORIES: dict[str, Callable[[], dict[str, Any]]] = {
    "bridges.fit_log_potential": lambda: {
        "psi": _quadratic_potential(),
        "Y": _unit_data((8, 2)),
        "key": jr.key(0),
        "ref": _obj("bridges.OUReference")(2),
        "T": 1.0,
        "num_steps": 2,
        "batch_size": 4,
        "num_sources": 4,
        "num_inner": 2,
        "progress": False,
    },
    "bridges.ControlNet": lambda: {
        "dim": 1,
        "noise_dim": 1,
        "width": 4,
        "depth": 1,
        "key": jr.key(0),
    },
    "bridges.GuidedTree": lambda: _guided_tree_args(),
    "bridges.TreeKernel": lambda: {"mean": _tree_mean, "cov": _tree_cov},
    "bridges.TreeSDE": lambda: {"drift": _tree_drift, "diffusion": _tree_sigma},
    "bridges.backward_filter": lambda: {
        "topo": _tree_topo(),
        "y": _TREE_Y,
        "proxy": _tree_kernels(),
        "C": _TREE_C,
        "R": _TREE_R,
    },
    "bridges.dense_tree_smoother": lambda: {
        "topo": _tree_topo(),
        "kernels": _tree_kernels(),
        "y": _TREE_Y,
        "C": _TREE_C,
        "R": _TREE_R,
        "x_root": jnp.array([0.3, -0.2]),
    },
    "bridges.fit_nbffg": lambda: {
        "control": _control_net(),
        "gt": _guided_tree("sde"),
        "key": jr.key(0),
        "num_steps": 2,
        "batch_size": 2,
        "progress": False,
    },
    "bridges.full_tree_loss": lambda: {
        "key": jr.key(0),
        "gt": _guided_tree("sde"),
        "control": _control_net(),
    },
    "bridges.guided_sample": lambda: {"key": jr.key(0), "gt": _guided_tree()},
    "bridges.importance_sample": lambda: {"key": jr.key(0), "gt": _guided_tree(), "num_samples": 4},
    "bridges.path_loss": lambda: {
        "key": jr.key(0),
        "gt": _guided_tree("sde"),
        "leaf_rows": jnp.array([0, 1]),
        "control": _control_net(),
    },
    "bridges.proxy_posterior_mean": lambda: {"gt": _guided_tree()},
    "bridges.sde_proxy_from_anchors": lambda: {
        "topo": _tree_topo(),
        "sde": _obj("bridges.TreeSDE")(_tree_drift, _tree_sigma),
        "anchors": jnp.array([[0.1], [0.3], [-0.2]]),
    },
    "bridges.simulate_tree": lambda: {
        "key": jr.key(0),
        "topo": _tree_topo(),
        "sde": _obj("bridges.TreeSDE")(_tree_drift, _tree_sigma),
        "x_root": jnp.array([0.2]),
        "num_steps": 2,
    },
    "bridges.stratified_leaf_batches": lambda: {"topo": _tree_topo(), "batch_size": 2},
}
FACTORIES |= BRIDGES_FACTORIES

# --- flows: a 4-pixel super-resolution teacher (2 x 2 x 1 images), a 2 x 1 NTM ---


@ft.cache  # immutable modules, built once
def _sr_teacher() -> Any:
    """``NoiseAtOneVelocity`` of a width-8 `SRVelocityNet` on flat 2 x 2 x 1 images."""
    net = _obj("flows.SRVelocityNet")((2, 2, 1), width=8, depth=1, emb_dim=4, key=jr.key(0))
    return _obj("flows.NoiseAtOneVelocity")(net)


@ft.cache
def _sr_student() -> Any:
    return _obj("flows.IntervalConditionedNet").from_velocity(
        _sr_teacher(), key=jr.key(1), freq_dim=4, width=4
    )


@ft.cache
def _sr_features() -> Any:
    return _obj("flows.FrozenFeatures")(_sr_teacher(), tau=0.1)


@ft.cache
def _sr_discriminator() -> Any:
    feats = _sr_features()(_unit_data((4,)), _unit_data((4,)))
    channels = tuple(f.shape[0] for f in feats)
    return _obj("flows.FeatureDiscriminator")(channels, 4, width=4, key=jr.key(2))


def _sr_batch() -> dict[str, Any]:
    """Three flat HR images, generator outputs and conditions (all ``(3, 4)``)."""
    return {
        "x": _unit_data((3, 4)) - 0.5,
        "g_out": _unit_data((3, 4)) - 0.3,
        "cond": _unit_data((3, 4)),
    }


@ft.cache
def _ntm() -> Any:
    """An NTM on states ``(L, c) = (2, 1)``: identity transporter, width-4 MLP predictor."""
    predictor = _obj("flows.MLPPredictor")(2, 1, width=4, depth=1, key=jr.key(0))
    return _obj("flows.NTM")(_obj("flows.IdentityTransporter")(), predictor)


def _ntm_schedule() -> jax.Array:
    return _obj("flows.ntm_schedule")(2, 2, 0.02)


def _ntm_trajectory() -> jax.Array:
    return jnp.array([[[0.3], [-0.2]], [[0.25], [-0.1]], [[0.1], [0.2]]])


def _ema_loss(model: Any, batch: Any, key: jax.Array) -> jax.Array:
    return jnp.sum(model["w"] ** 2)


FLOWS_FACTORIES: dict[str, Callable[[], dict[str, Any]]] = {
    "flows.SRVelocityNet": lambda: {
        "shape": (2, 2, 1),
        "width": 8,
        "depth": 1,
        "emb_dim": 4,
        "key": jr.key(0),
    },
    "flows.FrozenFeatures": lambda: {"teacher": _sr_teacher(), "tau": 0.1},
    "flows.FeatureDiscriminator": lambda: {
        "feature_channels": (8,),
        "cond_dim": 4,
        "width": 4,
        "key": jr.key(0),
    },
    "flows.IntervalConditionedNet": lambda: {
        "backbone": _sr_teacher(),
        "interval": eqx.nn.MLP(8, 4, 4, 1, jax.nn.silu, key=jr.key(1)),
        "freq_dim": 4,
    },
    "flows.fake_score_loss": lambda: {
        "fake": _sr_teacher(),
        "g_out": _sr_batch()["g_out"],
        "cond": _sr_batch()["cond"],
        "key": jr.key(0),
    },
    "flows.vsd_loss": lambda: {
        "g_out": _sr_batch()["g_out"],
        "teacher": _sr_teacher(),
        "fake": _sr_teacher(),
        "cond": _sr_batch()["cond"],
        "key": jr.key(0),
    },
    "flows.feature_matching_loss": lambda: {"features": _sr_features(), **_sr_batch()},
    "flows.gan_optimizer": lambda: {
        "generator": __import__("optax").adam(1e-3),
        "discriminator": __import__("optax").adam(1e-3),
        "fake_score": __import__("optax").adam(1e-3),
    },
    "flows.gan_refine_loss": lambda: {
        "model": (_sr_student(), _sr_discriminator(), _sr_teacher()),
        "batch": (_sr_batch()["x"], _sr_batch()["cond"]),
        "key": jr.key(0),
        "teacher": _sr_teacher(),
        "features": _sr_features(),
    },
    "flows.with_ema": lambda: {"loss_fn": _ema_loss, "decay": 0.9},
    "flows.MixtureInterpolantVelocity": lambda: {
        "m0": jnp.array([0.1, -0.1]),
        "cov0": jnp.eye(2),
        "weights": jnp.array([0.4, 0.6]),
        "means": jnp.array([[-0.5, 0.2], [0.5, -0.2]]),
        "covs": jnp.stack([jnp.eye(2) * 0.3, jnp.eye(2) * 0.5]),
    },
    "flows.denoiser_loss": lambda: {
        "denoiser": _obj("flows.Denoiser")(2, 1, width=4, depth=1, key=jr.key(0)),
        "batch": (_ntm_trajectory(), jnp.full((3,), 0.02), 0.9 * _ntm_trajectory()),
        "key": jr.key(1),
    },
    "flows.ntm_loss": lambda: {
        "model": _ntm(),
        "batch": _ntm_trajectory(),
        "key": jr.key(1),
        "steps": (2,),
    },
    "flows.denoiser_targets": lambda: {
        "key": jr.key(0),
        "model": _ntm(),
        "x0": jnp.array([[0.3], [-0.2]]),
        "ts": _ntm_schedule(),
    },
    "flows.mean_alignment_loss": lambda: {
        "model": _ntm(),
        "frozen_fm": _obj("flows.GaussianVelocity")(_gaussian_average_velocity()),
        "xs": _ntm_trajectory(),
        "ts": _ntm_schedule(),
    },
    "flows.ntm_elbo": lambda: {
        "key": jr.key(0),
        "model": _ntm(),
        "x_t0": jnp.array([[0.3], [-0.2]]),
        "ts": _ntm_schedule(),
    },
    "flows.trajectory_score_denoise": lambda: {
        "model": _ntm(),
        "xs": _ntm_trajectory(),
        "ts": _ntm_schedule(),
    },
}
FACTORIES |= FLOWS_FACTORIES

# --- pde: the CIR transition flow of `_transition_flow_args`, one fixed condition ---


def _cir_condition(key: jax.Array) -> tuple[jax.Array, jax.Array]:
    del key
    return jnp.array([0.4]), jnp.array([1.0, 0.5, 0.3])


def _spacetime_flow() -> Any:
    """The CIR flow with time features (the space-time ablation's class)."""
    return _obj("pde.TransitionFlow")(**_transition_flow_args(), time_range=(1e-2, 1.0))


def _theta_path() -> Any:
    theta = _obj("pde.flow_parameters")(_transition_flow())[0]
    return _obj("pde.ThetaPath")(jnp.array([1e-3, 0.1]), jnp.stack([theta, 0.9 * theta]))


def _nuts_logdensity(u: jax.Array) -> jax.Array:
    return -0.5 * jnp.sum((u - 0.1) ** 2)


PDE_FACTORIES: dict[str, Callable[[], dict[str, Any]]] = {
    "pde.flow_at": lambda: {"flow": _transition_flow(), "path": _theta_path()},
    "pde.integrate_ng": lambda: {
        "key": jr.key(0),
        "flow": _transition_flow(),
        "sample_condition": _cir_condition,
        "delta": 0.1,
        "num_steps": 2,
        "num_colloc": 4,
        "num_saves": 2,
        "solver": __import__("diffrax").Euler(),
    },
    "pde.spacetime_loss": lambda: {
        "flow": _spacetime_flow(),
        "batch": (
            jnp.array([0.05, 0.1]),
            jnp.array([[0.4], [0.45]]),
            jnp.tile(jnp.array([1.0, 0.5, 0.3]), (2, 1)),
            jnp.array([[0.2], [-0.3]]),
        ),
        "key": jr.key(0),
    },
    "pde.fit_spacetime": lambda: {
        "flow": _spacetime_flow(),
        "sample_condition": _cir_condition,
        "key": jr.key(0),
        "num_steps": 2,
        "batch_size": 4,
        "progress": False,
    },
    "pde.run_nuts": lambda: {
        "key": jr.key(0),
        "logdensity_fn": _nuts_logdensity,
        "init": jnp.array([0.2, -0.1]),
        "num_warmup": 4,
        "num_samples": 4,
        "num_chains": 2,
    },
}
FACTORIES |= PDE_FACTORIES
# --- discrete: the network-level names (a masked process over 4 tokens, V = 5) ---


def _diffusion_net() -> Any:
    """A 1-block bidirectional `DiffusionTransformer` over V = 5 states (width 8, 2 heads)."""
    return _obj("discrete.DiffusionTransformer")(5, 8, 1, 2, 4, key=jr.key(0))


_NOISY = jnp.array([0, 4, 2, 4], jnp.int32)  # a noisy sequence of the masked process (4 = mask)

FACTORIES |= {
    "discrete.DiffusionTransformer": lambda: {
        "vocab_size": 5,
        "dim": 8,
        "num_layers": 1,
        "num_heads": 2,
        "max_len": 4,
        "key": jr.key(0),
    },
    "discrete.model_log_x0": lambda: {
        "model": _diffusion_net(),
        "schedule": _masked_schedule(),
        "z": _NOISY,
        "t": jnp.asarray(0.5),
    },
    # The uniform process: under the masked one the exit rate of an unmasked token is exactly
    # 0 (log rate -inf, documented), not a failure.
    "discrete.model_rates": lambda: {
        "model": _obj("discrete.DiffusionTransformer")(4, 8, 1, 2, 4, key=jr.key(0)),
        "schedule": _uniform_schedule(),
        "z": jnp.array([0, 3, 2, 3], jnp.int32),
        "t": jnp.asarray(0.5),
    },
    "discrete.sample": lambda: {
        "key": jr.key(0),
        "model": _diffusion_net(),
        "schedule": _masked_schedule(),
        "num": 2,
        "length": 4,
        "steps": 2,
    },
}

# --- data: the dynamics datasets at tiny sizes, the optional-package loaders ---

FACTORIES |= {
    "data.require_module": lambda: {"name": "numpy"},
    "data.load_skimage_grey": lambda: {"name": "camera"},
    "data.BPETokenizer": lambda: {"texts": list(_DOCS), "vocab_size": 260},
    "data.pendulum_manifold_dataset": lambda: {
        "key": jr.key(0),
        "kappas": [0.5],
        "n_amp": 2,
        "n_t": 3,
    },
    "data.lorenz96_manifold_dataset": lambda: {
        "key": jr.key(0),
        "forcings": [8.0],
        "N": 5,
        "n_ic": 2,
        "n_t": 3,
        "t_burn": 0.5,
        "t_end": 1.0,
    },
}

# --- selectivity: tasks, a manifest, a PDBQT fragment, the surrogate back-end ---

# An amide fragment (C, O acceptor, N donor with its polar H), a methyl carbon and a chlorine.
_PDBQT = """\
ATOM      1  C1  LIG A   1       0.000   0.000   0.000  0.00  0.00     0.200 C
ATOM      2  O1  LIG A   1       1.230   0.000   0.000  0.00  0.00    -0.270 OA
ATOM      3  N1  LIG A   1      -0.700   1.150   0.000  0.00  0.00    -0.350 N
ATOM      4  H1  LIG A   1      -0.300   2.050   0.000  0.00  0.00     0.160 HD
ATOM      5  C2  LIG A   1      -0.800  -1.280   0.000  0.00  0.00     0.030 C
ATOM      6 CL1  LIG A   1      -0.300  -2.900   0.300  0.00  0.00    -0.080 Cl
"""


def _task_manifest() -> str:
    """A JSON manifest of one task over dockstring target names (no structure file read).

    One file in the temporary directory, replaced atomically (test workers may write it at once).
    """
    import json
    import os
    import tempfile

    path = Path(tempfile.gettempdir()) / "jaxgen_bad_input_tasks.json"
    part = path.with_suffix(f".{os.getpid()}.part")
    part.write_text(json.dumps({"tasks": [{"name": "t", "on": "DRD3", "off": ["DRD2"]}]}))
    os.replace(part, path)
    return str(path)


FACTORIES |= {
    "selectivity.TargetSpec": lambda: {
        "name": "pocket",
        "receptor_pdbqt": "pocket.pdbqt",
        "center": (0.0, 1.0, 2.0),
        "size": (10.0, 10.0, 10.0),
    },
    "selectivity.Task": lambda: {"name": "t", "on": "DRD3", "off": ("DRD2",)},
    "selectivity.load_task_manifest": lambda: {"path": _task_manifest()},
    "selectivity.parse_pdbqt": lambda: {"text": _PDBQT},
    "selectivity.evaluate_samples": lambda: {
        "samples": {"t": _unit_data((4, 2))},
        "tasks": {"t": _obj("selectivity.Task")("t", "on", ("off",))},
        "backend": _obj("selectivity.SurrogateBackend")({"on": _bowl, "off": _bowl}),
    },
}

# --- energy: a linear 2-class "model" on 4 x 4 images for the proxies; a 2-step JEM run ---

_PIXEL_WEIGHTS = jnp.linspace(-1.0, 1.0, 32).reshape(2, 16)


def _pixel_logits(x: jax.Array) -> jax.Array:
    return _PIXEL_WEIGHTS @ x


def _images_4x4() -> jax.Array:
    return _unit_data((4, 4, 4)) * 2.0 - 1.0  # in (-0.8, 0.8): images scaled to [-1, 1]


FACTORIES |= {
    "energy.cue_conflict_shape_bias": lambda: {
        "key": jr.key(0),
        "predict": _pixel_logits,
        "images": _images_4x4(),
        "labels": jnp.array([0, 1, 0, 1]),
        "low_pass": lambda x: jnp.broadcast_to(jnp.mean(x, axis=(1, 2), keepdims=True), x.shape),
        "num_pairs": 8,
    },
    "energy.saliency_diagnostic_correlation": lambda: {
        "log_prob": lambda x, y: jax.nn.log_softmax(_pixel_logits(x))[y],
        "images": _images_4x4().reshape(4, 16),
        "labels": jnp.array([0, 1, 0, 1]),
        "diagnostic": jnp.abs(_PIXEL_WEIGHTS),
    },
    "energy.distortion_ordering": lambda: {
        "key": jr.key(0),
        "features": _pixel_logits,
        "images": _images_4x4().reshape(4, 16),
    },
    "energy.fit_jem": lambda: {
        "model": _obj("energy.MLPClassifier")(2, 3, width=4, depth=1, key=jr.key(0)),
        "data": (_unit_data((6, 2)) - 0.5, jnp.array([0, 1, 2, 0, 1, 2])),
        "config": _obj("energy.JEMConfig")(mix=0.5, num_steps=2),
        "key": jr.key(1),
        "num_steps": 2,
        "batch_size": 3,
        "buffer_size": 4,
        "progress": False,
    },
}

# --- transformers: the trainers (2 steps), the QES model and losses, the ICL task draws ---
# The backdoor tasks need the QES vocabulary (33 ids) and sequences of 35 tokens; the losses
# and fit_qes / fit_finetune run on the 6-token LM of `_tiny_lm` with a weighted dict batch.


def _qes_base() -> Any:
    """A 1-block causal transformer over the 33 ids of the backdoor tasks (width 8, 2 heads)."""
    return _obj("nn.Transformer")(33, 8, 1, 2, 36, key=jr.key(0))


def _qes_lora() -> Any:
    return _obj("transformers.attach_lora")(_qes_base(), rank=2, alpha=4.0, key=jr.key(1))


def _qes_cfg() -> Any:
    return _obj("transformers.QESConfig")(num_experts=2, rank=2)


def _weighted_batch() -> dict[str, jax.Array]:
    """``_TOKENS`` with weight on the last three predictions (a QES dict batch)."""
    return {"tokens": _TOKENS, "weights": jnp.tile(jnp.array([0.0, 0.0, 1.0, 1.0, 1.0]), (2, 1))}


def _icl_regressor() -> Any:
    # Built as the registry builds the `LinearAttentionICL` entry (jitted, same arguments), so
    # the compiled constructor is reused (eagerly its initialisation costs ~2 CPU-s).
    cls = _obj("transformers.LinearAttentionICL")
    return eqx.filter_jit(cls)(**FACTORIES["transformers.LinearAttentionICL"]())


def _icl_batch() -> Any:
    """A padded batch of 2 tasks (4 context slots, 3 real, 1 query) in R^2, written out (an
    eager `task_batch` draw costs several CPU-seconds)."""
    x = _unit_data((2, 4, 2))
    return _obj("transformers.ICLBatch")(
        x=x,
        y=jnp.sum(x, axis=-1),
        mask=jnp.broadcast_to(jnp.arange(4) < 3, (2, 4)),
        xq=x[:, :1] + 0.05,
        yq=jnp.sum(x[:, :1], axis=-1) + 0.1,
        fq=jnp.sum(x[:, :1], axis=-1) + 0.1,
        n=jnp.asarray(3),
    )


_NO_PROGRESS = {"progress": False}

FACTORIES |= {
    "transformers.fit_lm": lambda: {
        "model": _tiny_lm(),
        "data": _TOKENS,
        "batch_size": 2,
        "key": jr.key(0),
        "num_steps": 2,
        **_NO_PROGRESS,
    },
    "transformers.fit_finetune": lambda: {
        "model": _tiny_lm(),
        "data": _weighted_batch(),
        "batch_size": 2,
        "key": jr.key(0),
        "num_steps": 2,
        **_NO_PROGRESS,
    },
    "transformers.fit_qes": lambda: {
        "model": _tiny_qes(),
        "data": _weighted_batch(),
        "batch_size": 2,
        "key": jr.key(0),
        "num_steps": 2,
        **_NO_PROGRESS,
    },
    "transformers.fit_abl": lambda: {
        "model": _qes_lora(),
        "data": _obj("transformers.make_task")(jr.key(2), "reverse", 8),
        "key": jr.key(0),
        "num_steps": 2,
        "batch_size": 4,
        "isolate_after": 1,
        **_NO_PROGRESS,
    },
    "transformers.fit_fine_prune": lambda: {
        "model": _qes_lora(),
        "data": _obj("transformers.make_task")(jr.key(2), "reverse", 8),
        "key": jr.key(0),
        "num_steps": 2,
        "batch_size": 4,
        "max_frac": 0.25,
        "prune_step": 0.125,
        **_NO_PROGRESS,
    },
    "transformers.greedy_decode": lambda: {
        "model": _qes_lora(),
        "x": jnp.asarray(_obj("transformers.make_task")(jr.key(2), "reverse", 2)[0]),
        "max_len": 4,
    },
    "transformers.backdoor_batches": lambda: {
        "x": _reverse_task()[0],
        "y": _reverse_task()[1],
        "batch_size": 2,
    },
    "transformers.QESTransformer": lambda: {
        name: getattr(_tiny_qes(), name)
        for name in ("base", "adapters", "routers", "mask", "quarantine")
    },
    "transformers.qes_loss": lambda: {
        "model": _tiny_qes(),
        "batch": _weighted_batch(),
        "key": jr.key(0),
        "cfg": _obj("transformers.QESConfig")(num_experts=2, rank=2),
    },
    "transformers.adapter_task_loss": lambda: {
        "model": _tiny_qes(),
        "batch": _weighted_batch(),
        "key": jr.key(0),
    },
    "transformers.sample_losses": lambda: {"model": _tiny_qes(), **_weighted_batch()},
    "transformers.suspect_recall": lambda: {
        "result": _obj("core.FitResult")(
            model=None,
            opt_state=None,
            losses=np.zeros(2),
            resumed_from=0,
            state={"poisoned_seen": jnp.asarray(4.0), "poisoned_trimmed": jnp.asarray(3.0)},
        )
    },
    "transformers.icl_loss": lambda: {"model": _icl_regressor(), "batch": _icl_batch()},
    "transformers.sample_task": lambda: {
        "key": jr.key(0),
        "pieces": _obj("transformers.sample_mixture")(jr.key(1), 2, 2),
        "n": 4,
        "num_queries": 2,
        "J": 4,
    },
}

# Names not exercised here, each with its reason. Constants, exception types, abstract
# interfaces and NamedTuple results are recognised by `exemption` without a listing.
_TRAINING = "a training loop or step over a user model and loss (compiles a model per case)"
_CALLABLE = "takes a user callable or model; exercised with real ones in its family's tests"
EXEMPT: dict[str, str] = {
    "core.RESULTS": "an enumeration of solver outcomes",
    "core.FitResult": "a result type",
    "core.IterateOutput": "a result type",
    "core.iterate": _CALLABLE,
    "core.fit": _TRAINING + "; its guards are tested in tests/core/test_core_train.py",
    "core.make_step": _TRAINING,
    "core.train_step": _TRAINING,
    "core.minibatches": "returns a sampler over a user pytree; tested in tests/core",
    "core.latest_checkpoint": "file-system I/O; tested in tests/core/test_core_train.py",
    "core.load_checkpoint": "file-system I/O; tested in tests/core/test_core_train.py",
    "core.save_checkpoint": "file-system I/O; tested in tests/core/test_core_train.py",
    "core.data_mesh": "device placement (no array arguments to check)",
    "core.replicate": "device placement of a user pytree",
    "core.shard_batch": "device placement of a user pytree",
    "core.FitOptions": "a TypedDict of fit's options (a type, not an entry point)",
    "core.as_batches": "wraps user data into a sampler; its errors are tested in "
    "tests/test_conventions.py",
    "core.check_fit_options": "an argument check itself (tests/test_conventions.py)",
    "metrics.digits_fd": "needs 8x8 digit images; tested in tests/metrics/test_metrics_digits.py",
    "metrics.digits_features": "needs 8x8 digit images; tested in "
    "tests/metrics/test_metrics_digits.py",
    "metrics.digits_logits": "needs 8x8 digit images; tested in "
    "tests/metrics/test_metrics_digits.py",
    "core.replicate_sharding": "device placement (takes a mesh, no array arguments)",
    "core.sharded_vmap": "wraps a user function; its mapped calls are the entry points checked",
    "core.sample_many": "wraps a user sampler; `key` and `num_samples` are checked and tested in "
    "tests/core/test_core_sharded_montecarlo.py",
    "core.load_latest_checkpoint": _TRAINING + "; corrupt checkpoints tested in "
    "tests/core/test_core_guard.py",
    "core.verify_checkpoint": _TRAINING + "; tested in tests/core/test_core_guard.py",
    "core.bytes_per_device": "device placement bookkeeping of a user pytree",
    "core.fsdp_rule": "device placement rule; bad input tested in tests/core/test_core_scale.py",
    "core.init_processes": "multi-process start-up from environment variables (tests/core)",
    "core.param_shardings": "device placement of a user pytree (tests/core/test_core_scale.py)",
    "core.shard_params": "device placement of a user pytree (tests/core/test_core_scale.py)",
    "core.sharded_minibatches": "a batch sampler over user data; tested in "
    "tests/core/test_core_scale.py",
    "graphs.GraphonEstimate": "a result type",
    "deconvolution.ConvMMDResult": "a result type",
    "dictionary.PADLResult": "a result type (a FitResult of fit_padl)",
    "energy.JEMResult": "a result type",
    "pde.run_delayed_acceptance": "a whole warm-up and delayed-acceptance run, compiled once per "
    "case (about 35 CPU-s here); its kernel `pde.delayed_acceptance_hmc` is covered and its "
    "checks are tested in tests/pde/test_pde_delayed_acceptance.py",
    "nn.LinearAdapter": "a type alias (Callable) of the adapter hook, not an entry point",
    "nn.fit_on_box": _TRAINING + "; tested in tests/nn/test_nn_icnn_modules.py",
    "transformers.ABLResult": "a result type (a FitResult of fit_abl)",
    "selectivity.VinaBackend": "needs the docking extra (vina, meeko, gemmi, rdkit), absent here; "
    "its settings are checked before the imports (tests/selectivity/test_selectivity_backends.py)",
    "selectivity.PoseScoreBackend": "needs the docking extra (vina), absent here; `mode` is "
    "checked before the import",
    "selectivity.DockstringBackend": "needs the dockstring package and the obabel program, absent "
    "here; its only argument is a cache directory",
    "data.debian_files": "lists the files of an installed Debian package through `dpkg -L` "
    "(system state; its only argument is a package name); the missing-package error is tested "
    "in tests/data/test_data_common.py",
    "confseq.ConfidenceRegion": "a result type (the eqx.Module that confidence_region returns; "
    "its fields are computed, not user input); confidence_region is covered",
    "transformers.FinePruneResult": "a result type (a FitResult of fit_fine_prune)",
}


# Cases that still fail silently, by entry point: kinds (or (argument, kind) pairs) with the
# reason they are not fixed yet. Counted as gaps in the printed summary.
KNOWN_GAPS: dict[str, set] = {
    # Documented exemptions: the ODE vector fields of the dynamics data are autonomous, `t` is
    # unused (the diffrax signature) and a check would run at every solver step.
    # The same field's parameters are not checked either (its docstring says so); an infinite
    # pendulum length is the zero-gravity limit, a finite field.
    "data.coupled_pendulum_field": {("t", "nan_scalar"), ("args", "inf")},
    "data.lorenz96_field": {("t", "nan_scalar")},
    # NaN in `S` marks a failed docking where `valid` is not given (the documented convention
    # of jaxgen.selectivity): those rows are reported as failures, not as a silent result.
    "selectivity.hit_frequency": {("S", "nan")},
    "selectivity.selective_hit_rate": {("S", "nan")},
    "selectivity.success_rate": {("S", "nan")},
    "selectivity.summarize": {("S", "nan")},
    "selectivity.top1_rate": {("S", "nan")},
    "selectivity.bootstrap_ci": {("S", "nan")},
}

# Families whose entry points run in the fast suite; the others are marked slow.
FAST_FAMILIES = {
    "confseq",
    "core",
    "data",
    "dictionary",
    "discrete",
    "energy",
    "entropy",
    "graphs",
    "metrics",
    "pde",
    "selectivity",
    "transformers",
    "transport",
}
MIN_CASES = 500

# Entry points that compile a whole solver or training run per case: slow tier only, where
# every kind runs.
_FIT = "a training run through core.fit, recompiled for each bad case"
SLOW_ENTRIES: dict[str, str] = {
    "bridges.fit_log_potential": _FIT,
    "bridges.fit_nbffg": _FIT + " (SDE tree, guided sampler inside)",
    "deconvolution.fit_convmmd": _FIT,
    "pde.fit_spacetime": _FIT + " (second derivatives of the flow)",
    "pde.integrate_ng": "the natural-gradient ODE solve compiles per case (diffrax, Jacobians)",
    "pde.run_nuts": "blackjax window adaptation and NUTS compile per case",
    "transformers.fit_abl": "two `fit` runs (isolation, unlearning) and a loss pass compile per "
    "call (about 7 CPU-s); its checks are tested in tests/transformers",
    "transformers.fit_fine_prune": "greedy decoding of every pruning candidate and a `fit` run "
    "compile per call (about 5 CPU-s); max_drop is tested in tests/transformers",
    "transformers.fit_qes": "a `fit` run of the QES adapters compiles per call (about 4 CPU-s)",
    "transformers.fit_lm": "a `fit` run compiles per call (about 3 CPU-s)",
    "transformers.fit_finetune": "a `fit` run compiles per call (about 2.5 CPU-s)",
}

# Every fast family's left-out kinds run in its slow twin (the `left_out` tier): family -> the
# kinds its fast tier leaves out on top of `SLOW_ONLY_KINDS`. transformers' entry points compile
# a network per case, and a scalar case that does not raise at trace time compiles one more (a
# Python float is static under `eqx.filter_jit`); its fast tier keeps the kinds that reuse the
# compiled program (array values) or fail at trace time (shapes, dtypes, keys, zero sizes).
REDUCED_FAST_TIER: dict[str, set[str]] = {"transformers": {"nan_scalar", "negative_scalar"}}


def fast_tier(qualname: str) -> bool:
    """Whether ``qualname`` runs in the fast suite (with the kinds of `left_out_kinds` left out)."""
    return qualname.split(".")[0] in FAST_FAMILIES and qualname not in SLOW_ENTRIES


def left_out_kinds(qualname: str) -> set[str]:
    """The kinds the fast tier of ``qualname`` leaves out (none for a slow entry point)."""
    if not fast_tier(qualname):
        return set()
    return SLOW_ONLY_KINDS | REDUCED_FAST_TIER.get(qualname.split(".")[0], set())


# --------------------------------------------------------------------------------------------
# The registry: every public name is covered or exempt.


def exemption(qualname: str, obj: Any) -> str | None:
    """Why ``qualname`` is not exercised here, or ``None`` when it is."""
    if qualname in EXEMPT:
        return EXEMPT[qualname]
    if not callable(obj):
        return "a constant"
    if inspect.isclass(obj):
        if issubclass(obj, Exception):
            return "an exception type"
        if inspect.isabstract(obj) or obj.__name__.startswith("Abstract"):
            return "an interface (abstract class): its implementations are covered"
        if issubclass(obj, tuple):
            return "a result type (NamedTuple)"
    return None


ALL_NAMES = [f"{family}.{name}" for family in FAMILIES for name in public_names(family)]
COVERED = [q for q in ALL_NAMES if exemption(q, _obj(q)) is None]
STATS: dict[str, int] = {"entries": 0, "cases": 0, "raised": 0, "finite": 0, "propagated": 0}
STATS |= {"gaps": 0, "trace_entries": 0, "trace_cases": 0, "trace_raised": 0, "trace_traced": 0}
STATS["untraceable"] = 0


def valid_call(qualname: str) -> tuple[Callable, dict[str, Any]]:
    """The entry point, jitted when it can be (compiled once), and valid arguments for it."""
    obj = _obj(qualname)
    args = FACTORIES[qualname]() if qualname in FACTORIES else auto_args(obj)
    jitted = eqx.filter_jit(obj)
    try:
        out, fn = jitted(**args), jitted
    except Exception:  # noqa: BLE001 - not traceable (Python control flow on values): run eagerly
        out, fn = obj(**args), obj
    assert _finite(out), f"{qualname}: the valid call gave a non-finite result"
    return fn, args


def _tiers() -> list[Any]:
    """``(qualname, tier)`` parameters: ``"fast"`` (unmarked; `FAST_FAMILIES` without their
    left-out kinds) with its slow twin ``"left_out"``; ``"trace"`` (unmarked; the other families,
    `TRACE_KINDS` through `eqx.filter_eval_shape`) with its slow twin ``"all"`` (every kind, real
    calls); `SLOW_ENTRIES` run only ``"all"`` (slow)."""
    params = []
    for q in COVERED:
        if q in SLOW_ENTRIES:
            params.append(pytest.param(q, "all", marks=pytest.mark.slow, id=q))
        elif fast_tier(q):
            params.append(pytest.param(q, "fast", id=q))
            params.append(pytest.param(q, "left_out", marks=pytest.mark.slow, id=f"{q}-left_out"))
        else:
            params.append(pytest.param(q, "trace", id=f"{q}-trace"))
            params.append(pytest.param(q, "all", marks=pytest.mark.slow, id=q))
    return params


def check_entry(qualname: str, kinds: Callable[[str], bool]) -> None:
    """Run the bad cases of ``qualname`` whose kind ``kinds`` keeps; fail on a silent one."""
    obj = _obj(qualname)
    try:
        fn, args = valid_call(qualname)
    except NoFactory as e:
        pytest.fail(f"{qualname}: no valid arguments ({e}); add a factory or an exemption")
    failures = []
    gaps = KNOWN_GAPS.get(qualname, {})
    for case in bad_cases(obj, args):
        if not kinds(case.kind):
            continue
        verdict = run_case(fn, args, case)
        STATS["cases"] += 1
        if verdict in ("raised", "finite", "propagated"):
            STATS[verdict] += 1
        elif case.kind in gaps or (case.arg, case.kind) in gaps:
            STATS["gaps"] += 1
        else:
            failures.append(f"{case.label()} {case.kind}: {verdict}")
    STATS["entries"] += 1
    assert not failures, f"{qualname}: " + "; ".join(failures)


# The fast tier of the families outside `FAST_FAMILIES`: their modules and losses take seconds
# to compile each, so only the kinds that a correct entry point refuses while tracing run there
# (a shape, a key, a static size), traced by `eqx.filter_eval_shape` and never compiled. A case
# that traces is judged by the slow tier, which calls it.
TRACE_KINDS = {"rank_up", "rank_down", "empty", "mismatch", "key_int", "zero"}


def run_trace_case(obj: Callable, args: dict[str, Any], case: Case) -> str:
    """``"raised"`` (a clear error while tracing), ``"traced"``, or the unclear error."""
    try:
        eqx.filter_eval_shape(obj, **{**args, case.arg: case.value})
    except ACCEPTED:
        return "raised"
    except Exception as e:  # noqa: BLE001 - anything else is an unclear error
        return f"unclear {type(e).__name__}: {str(e).splitlines()[0][:100] if str(e) else ''}"
    return "traced"


def _trace_tier(qualname: str) -> None:
    obj = _obj(qualname)
    args = FACTORIES[qualname]() if qualname in FACTORIES else auto_args(obj)
    try:
        eqx.filter_eval_shape(obj, **args)
    except Exception:  # noqa: BLE001 - Python control flow on values: the slow tier calls it
        STATS["untraceable"] += 1
        return
    failures = []
    gaps = KNOWN_GAPS.get(qualname, {})
    for case in bad_cases(obj, args, fast=True):
        if case.kind not in TRACE_KINDS:
            continue
        verdict = run_trace_case(obj, args, case)
        STATS["trace_cases"] += 1
        if verdict in ("raised", "traced"):
            STATS[f"trace_{verdict}"] += 1
        elif case.kind in gaps or (case.arg, case.kind) in gaps:
            STATS["gaps"] += 1
        else:
            failures.append(f"{case.label()} {case.kind}: {verdict}")
    STATS["trace_entries"] += 1
    assert not failures, f"{qualname} (traced): " + "; ".join(failures)


@pytest.mark.parametrize(("qualname", "tier"), _tiers())
def test_bad_inputs_raise_or_return_finite(qualname, tier):
    left_out = left_out_kinds(qualname)
    if tier == "trace":
        _trace_tier(qualname)
    elif tier == "fast":
        check_entry(qualname, lambda kind: kind not in left_out)
    elif tier == "left_out":
        check_entry(qualname, lambda kind: kind in left_out)
    else:
        check_entry(qualname, lambda kind: True)


def test_zz_case_count(capsys):
    """Print how many entry points and cases ran (and check the minimum when all ran)."""
    with capsys.disabled():
        print(
            f"\nbad-input registry: {len(ALL_NAMES)} public names, {len(COVERED)} covered, "
            f"{len(ALL_NAMES) - len(COVERED)} exempt; ran {STATS}"
        )
    fast_covered = [q for q in COVERED if fast_tier(q)]
    if STATS["entries"] >= len(fast_covered):  # not when a -k selection ran a few entries
        assert STATS["cases"] >= MIN_CASES


# --------------------------------------------------------------------------------------------
# The examples of issue 40: each raised nothing and returned a plausible (or wrong) value.


def _raises_both_ways(fn: Callable, *args: Any, match: str, **kwargs: Any) -> None:
    """Eagerly a ``ValueError``; under `eqx.filter_jit` an ``EquinoxRuntimeError``."""
    with pytest.raises(ValueError, match=match):
        fn(*args, **kwargs)
    with pytest.raises(eqx.EquinoxRuntimeError, match=match):
        jax.block_until_ready(eqx.filter_jit(fn)(*args, **kwargs))


def test_adjusted_rand_index_refuses_labels_outside_range():
    from jaxgen.graphs import adjusted_rand_index

    true, pred = jnp.array([0, 0, 1, 1]), jnp.array([0, 5, 1, 7])
    _raises_both_ways(adjusted_rand_index, true, pred, match=r"`labels_pred` must be integer")
    with pytest.raises(TypeError, match="labels_true"):  # ours or jaxtyping's message
        adjusted_rand_index(jnp.array([0.0, 0.0, 1.0, 1.0]), pred)
    # In range it still computes the index: ARI of a relabelled partition is 1.
    assert float(adjusted_rand_index(true, jnp.array([1, 1, 0, 0]))) == pytest.approx(1.0)


def test_mmd_unbiased_refuses_integer_samples_and_keeps_its_bandwidths():
    from jaxgen.metrics import mmd_unbiased

    x = jnp.arange(10).reshape(5, 2)
    # Ours ("`x` must be a floating-point array") or, under the test suite's jaxtyping hook, its.
    with pytest.raises(TypeError, match=r"`x` must be a floating-point array|parameter 'x'"):
        mmd_unbiased(x, x + 1)
    # Float samples with integer-valued entries: the 0.5 bandwidth is not truncated to 0.
    xf = x.astype(jnp.float32)
    got = mmd_unbiased(xf, xf + 1, bandwidths=(0.5, 1.5))
    want = mmd_unbiased(xf.astype(jnp.float64), xf.astype(jnp.float64) + 1, bandwidths=(0.5, 1.5))
    assert jnp.isfinite(got) and float(got) == pytest.approx(float(want), rel=1e-5)
    with pytest.raises(ValueError, match="`bandwidths` must be finite and > 0"):
        mmd_unbiased(xf, xf + 1, bandwidths=(0.0, 1.0))


def test_expected_calibration_error_refuses_logits():
    from jaxgen.metrics import brier_score, classification_nll, expected_calibration_error

    logits, labels = jnp.array([[2.0, -1.0], [0.5, 3.0]]), jnp.array([0, 1])
    for fn in (expected_calibration_error, brier_score, classification_nll):
        _raises_both_ways(fn, logits, labels, match=r"`probs` must be probabilities.*not logits")
    probs = jax.nn.softmax(logits, axis=1)
    assert jnp.isfinite(expected_calibration_error(probs, labels))
    with pytest.raises(ValueError, match=r"`labels` must be integer labels in \[0, 2\)"):
        expected_calibration_error(probs, jnp.array([0, 2]))


def test_gaussian_straight_process_and_gaussian_w2_refuse_indefinite_covariances():
    from jaxgen.flows import GaussianStraightProcess
    from jaxgen.metrics import gaussian_w2

    m, eye, indefinite = jnp.zeros(2), jnp.eye(2), jnp.diag(jnp.array([1.0, -1.0]))
    # The constructor compiles its checks with its factorisations: a run-time error.
    with pytest.raises(eqx.EquinoxRuntimeError, match="`cov1` must be positive semi-definite"):
        GaussianStraightProcess(m, eye, m, indefinite)
    with pytest.raises(eqx.EquinoxRuntimeError, match="`cov0` must be positive definite"):
        GaussianStraightProcess(m, indefinite, m, eye)
    _raises_both_ways(gaussian_w2, m, eye, m, indefinite, match="`cov_b` must be positive semi")
    _raises_both_ways(gaussian_w2, m, indefinite, m, eye, match="`cov_a` must be positive semi")
    # A singular PSD covariance is valid: W2 between N(0, I) and N(0, diag(1, 0)) is 1.
    assert float(gaussian_w2(m, eye, m, jnp.diag(jnp.array([1.0, 0.0])))) == pytest.approx(1.0)


def test_energy_distance_refuses_nan_samples():
    from jaxgen.metrics import energy_distance

    x = jr.normal(jr.key(0), (6, 2))
    _raises_both_ways(energy_distance, x.at[0, 0].set(jnp.nan), x, match=r"`x` must be finite")
    _raises_both_ways(energy_distance, x, x.at[1, 1].set(jnp.inf), match=r"`y` must be finite")


def test_solve_srgw_coupling_refuses_a_negative_initial_coupling():
    from jaxgen.transport import solve_srgw_coupling

    A, W = _adjacency(4), jnp.array([[0.8, 0.1], [0.1, 0.8]])
    T0 = jnp.full((4, 2), 1 / 8).at[0, 0].set(-0.1)
    with pytest.raises(ValueError, match=r"`T0` must be finite and >= 0"):
        solve_srgw_coupling(A, W, T0)
    with pytest.raises(eqx.EquinoxRuntimeError, match=r"`T0` must be finite and >= 0"):
        eqx.filter_jit(solve_srgw_coupling)(A, W, T0)


def test_solve_ode_names_a_nan_initial_state():
    from jaxgen.core import solve_ode

    def field(t, y, args):
        return -y

    y0 = jnp.array([jnp.nan, 1.0])
    with pytest.raises(ValueError, match=r"`y0` must be finite"):
        solve_ode(field, y0)
    with pytest.raises(eqx.EquinoxRuntimeError, match=r"`y0` must be finite") as info:
        eqx.filter_jit(lambda y: solve_ode(field, y).ys)(y0)
    assert "max_steps" not in str(info.value)
    # throw=False: no value check (the caller inspects the solution), nothing is raised.
    sol = solve_ode(field, y0, throw=False, steps=4)
    assert not bool(jnp.all(jnp.isfinite(sol.ys)))


_ONE_DIMENSION_SHORT = """
import jax.numpy as jnp
from jaxgen.bridges import (
    Canonical, follmer_drift_gaussian, follmer_marginal_gaussian, gaussian_kl, leaf_message,
    pullback,
)
from jaxgen.flows import mixture_quantiles_1d, straightness

I, z, s = jnp.eye(2), jnp.zeros(2), jnp.asarray(0.5)
calls = {
    "x": lambda: follmer_drift_gaussian(0.5, s, z, I),
    "mu": lambda: follmer_marginal_gaussian(0.5, s, I),
    "mu0": lambda: gaussian_kl(s, I, z, I),
    "C": lambda: leaf_message(z, jnp.ones(2), I),
    "Phi": lambda: pullback(Canonical(s, z, I), jnp.ones(2), z, I),
    "x0": lambda: straightness(lambda t, y, args: -y, s, 4),
    "levels": lambda: mixture_quantiles_1d(s, z + 0.5, z, z + 1.0),
}
for name, call in calls.items():
    try:
        call()
    except ValueError as e:
        assert str(e).startswith(f"`{name}` must have shape"), (name, str(e))
    else:
        raise AssertionError(f"{name}: no error")
print("named", len(calls))
"""


def test_vector_arguments_one_dimension_short_are_named_without_the_type_hook():
    # The test suite's jaxtyping hook refuses these shapes first, so the library's own checks
    # run in a plain interpreter (they used to end in an IndexError there).
    out = subprocess.run(
        [sys.executable, "-c", _ONE_DIMENSION_SHORT], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "named 7" in out.stdout
