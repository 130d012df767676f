"""Posterior sampling with blackjax NUTS and box constraints by a logistic bijection."""

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray


def box_transform(
    u: Float[Array, " p"], lo: Float[ArrayLike, "..."], hi: Float[ArrayLike, "..."]
) -> tuple[Float[Array, " p"], Float[Array, ""]]:
    r"""Map unconstrained u to the box: x = lo + (hi - lo) sigmoid(u); returns (x, log|dx/du|).

    log|dx/du| = sum log(hi - lo) + log sigmoid(u) + log sigmoid(-u). A uniform prior on the
    box is a density exp(log|dx/du|) in u.
    """
    u = jnp.asarray(u)
    lo, hi = jnp.asarray(lo, dtype=u.dtype), jnp.asarray(hi, dtype=u.dtype)
    if lo.shape != u.shape or hi.shape != u.shape:
        raise ValueError(
            f"`lo` and `hi` must have the shape of `u` {u.shape}, got {lo.shape} and {hi.shape}."
        )
    x = lo + (hi - lo) * jax.nn.sigmoid(u)
    return x, jnp.sum(jnp.log(hi - lo) + jax.nn.log_sigmoid(u) + jax.nn.log_sigmoid(-u))


def box_inverse(
    x: Float[Array, " p"], lo: Float[ArrayLike, " p"], hi: Float[ArrayLike, " p"]
) -> Float[Array, " p"]:
    """Inverse of `box_transform`: u = logit((x - lo) / (hi - lo))."""
    x = jnp.asarray(x)
    p = (x - jnp.asarray(lo, dtype=x.dtype)) / (
        jnp.asarray(hi, dtype=x.dtype) - jnp.asarray(lo, dtype=x.dtype)
    )
    return jnp.log(p) - jnp.log1p(-p)


class NutsResult(NamedTuple):
    """What `run_nuts` returns.

    Attributes:
        samples: draws, shape ``(chains, num_samples, p)``.
        acceptance: mean acceptance rate per chain, shape ``(chains,)``.
        num_grads: mean number of gradient evaluations per draw (leapfrog steps), a scalar.
        rhat: split-free potential scale reduction per coordinate, shape ``(p,)``.
        ess: effective sample size per coordinate (all chains), shape ``(p,)``.
    """

    samples: Array
    acceptance: Array
    num_grads: Array
    rhat: Array
    ess: Array


def run_nuts(
    key: PRNGKeyArray,
    logdensity_fn: Callable[[Float[Array, " p"]], Float[Array, ""]],
    init: Float[Array, " p"],
    *,
    num_warmup: int = 500,
    num_samples: int = 1000,
    num_chains: int = 2,
    init_jitter: float = 0.1,
) -> NutsResult:
    """NUTS (blackjax) with window adaptation, ``num_chains`` chains vmapped.

    Each chain starts from ``init`` plus N(0, init_jitter²) noise, adapts step size and a
    diagonal mass matrix for ``num_warmup`` steps (Stan's windows), then draws
    ``num_samples``. Work in unconstrained coordinates (see `box_transform`).

    References:
        Hoffman and Gelman (2014), The No-U-Turn sampler, JMLR 15; Cabezas et al., BlackJAX
        (2024), arXiv 2402.10797.
    """
    import blackjax

    init = jnp.asarray(init)
    if init.ndim != 1:
        raise ValueError(f"`init` must be a flat parameter vector (p,), got shape {init.shape}.")
    for name, v in (
        ("num_warmup", num_warmup),
        ("num_samples", num_samples),
        ("num_chains", num_chains),
    ):
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"`{name}` must be an int >= 1, got {v!r}.")

    def one_chain(k: PRNGKeyArray) -> tuple[Array, Array, Array]:
        kj, kw, ks = jr.split(k, 3)
        start = init + init_jitter * jr.normal(kj, init.shape, dtype=init.dtype)
        adapt = blackjax.window_adaptation(blackjax.nuts, logdensity_fn)
        (state, params), _ = adapt.run(kw, start, num_steps=num_warmup)
        step = blackjax.nuts(logdensity_fn, **params).step

        def body(s: object, kk: PRNGKeyArray) -> tuple[object, tuple[Array, Array, Array]]:
            s, info = step(kk, s)
            return s, (s.position, info.acceptance_rate, info.num_integration_steps)

        _, (pos, acc, nsteps) = jax.lax.scan(body, state, jr.split(ks, num_samples))
        return pos, jnp.mean(acc), jnp.mean(nsteps.astype(init.dtype))

    samples, acc, nsteps = jax.jit(jax.vmap(one_chain))(jr.split(key, num_chains))
    rhat = blackjax.diagnostics.potential_scale_reduction(samples)
    ess = blackjax.diagnostics.effective_sample_size(samples)
    return NutsResult(samples, acc, jnp.mean(nsteps), rhat, ess)
