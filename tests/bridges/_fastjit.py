"""`fast_jit`: `equinox.filter_jit` compiled at XLA backend optimisation level 0.

The bridges tests are compile-bound (tiny shapes, one or two calls per program): XLA's backend
optimisation roughly halves the compile time of their float64 programs at level 0 while the
run time stays negligible. Library code is untouched (users get the default level).
"""

import functools as ft

import equinox as eqx
import jax

OPTIONS = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}


def fast_jit(fun):
    """Like `eqx.filter_jit(fun)` (arrays traced, everything else static), compiled at -O0."""
    cache = {}

    @ft.wraps(fun)
    def wrapper(*args, **kwargs):
        dyn, static = eqx.partition((args, kwargs), eqx.is_array)
        if any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(dyn)):
            return fun(*args, **kwargs)  # already inside a trace (compiler options: top level)
        leaves, treedef = jax.tree_util.tree_flatten(static)
        key = (treedef, tuple(leaves))
        if key not in cache:
            out_static = []

            def inner(d):
                a, kw = eqx.combine(d, static)
                out_dyn, out_st = eqx.partition(fun(*a, **kw), eqx.is_array)
                out_static.append(out_st)
                return out_dyn

            cache[key] = (jax.jit(inner, compiler_options=OPTIONS), out_static)
        jitted, out_static = cache[key]
        out_dyn = jitted(dyn)
        return eqx.combine(out_dyn, out_static[0])

    return wrapper
