"""SelectToy: a seeded selectivity task with an exact generator and a noisy "docking" oracle.

The prior (the generator's data law) is an isotropic Gaussian mixture; each target is a
`WellLandscape` of Gaussian wells, higher = better binding; the oracle's docking energy of a
molecule x at target k is ``-(offset + a_k(x)) + noise_sd * eps`` (lower = better, the energy
convention of the metrics). The on-target shares one well with the off-target, so on-target
guidance alone pulls molecules into the shared site.
"""

from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

from ..core.checks import check_floating


class WellLandscape(eqx.Module):
    r"""Affinity :math:`a(x) = \sum_m h_m \exp(-\|x - c_m\|^2 / (2\ell^2))` of one sample.

    Attributes:
        centers: well centres ``(M, dim)``.
        heights: well depths ``(M,)`` (affinity units, higher = better).
        length_scale: :math:`\ell > 0`.
    """

    centers: Float[Array, "M dim"]
    heights: Float[Array, " M"]
    length_scale: float = eqx.field(static=True)

    def __init__(self, centers: ArrayLike, heights: ArrayLike, length_scale: float = 0.7):
        # Integer centres are positions like any other: cast, never truncate the heights.
        centers = check_floating(centers, "centers", allow_int=True)
        heights = jnp.asarray(heights, dtype=centers.dtype)
        if centers.ndim != 2 or heights.shape != (centers.shape[0],):
            raise ValueError(
                f"`centers` must be (M, dim) and `heights` (M,), got {centers.shape} and "
                f"{heights.shape}."
            )
        if not length_scale > 0:
            raise ValueError(f"`length_scale` must be > 0, got {length_scale}.")
        self.centers, self.heights, self.length_scale = centers, heights, float(length_scale)

    def __call__(self, x: Float[Array, " dim"]) -> Float[Array, ""]:
        """Affinity of one sample ``x`` (shape ``(dim,)``)."""
        if x.shape != self.centers.shape[1:]:
            raise ValueError(f"`x` must have shape {self.centers.shape[1:]}, got {x.shape}.")
        sq = jnp.sum((x[None, :] - self.centers) ** 2, axis=1)
        return jnp.sum(self.heights * jnp.exp(-sq / (2 * self.length_scale**2)))


class SelectToy(NamedTuple):
    """The toy task: a 2-D mixture prior, an on-target and K off-target landscapes.

    Attributes:
        weights: mixture weights ``(C,)``; means: ``(C, dim)``; sigma: component sd.
        on: the on-target `WellLandscape`; off: the off-target landscapes.
        offset: docking energy ``-(offset + a(x))``; noise_sd: oracle noise (kcal/mol).
    """

    weights: Float[Array, " C"]
    means: Float[Array, "C dim"]
    sigma: float
    on: WellLandscape
    off: tuple[WellLandscape, ...]
    offset: float = 5.0
    noise_sd: float = 0.5

    @classmethod
    def default(cls, dtype: jnp.dtype | None = None) -> "SelectToy":
        """The default values: prior (0.7, 0.3) at (-2, 0), (2, 0), sd 0.5; on wells at both
        modes, off wells at (-2, 0) (shared) and (0, 2.5); depths 3, length 0.7.
        """
        f = jnp.zeros((), dtype).dtype
        return cls(
            weights=jnp.array([0.7, 0.3], f),
            means=jnp.array([[-2.0, 0.0], [2.0, 0.0]], f),
            sigma=0.5,
            on=WellLandscape(jnp.array([[-2.0, 0.0], [2.0, 0.0]], f), jnp.array([3.0, 3.0], f)),
            off=(WellLandscape(jnp.array([[-2.0, 0.0], [0.0, 2.5]], f), jnp.array([3.0, 3.0], f)),),
        )

    @property
    def dim(self) -> int:
        """Dimension of a molecule's representation."""
        return int(self.means.shape[1])

    def sample_prior(self, key: PRNGKeyArray, num: int) -> Float[Array, "num dim"]:
        """``num`` iid draws from the mixture prior (what an unguided exact generator yields)."""
        kc, kz = jr.split(key)
        comp = jr.categorical(kc, jnp.log(self.weights), shape=(num,))
        z = jr.normal(kz, (num, self.dim), self.means.dtype)
        return self.means[comp] + self.sigma * z

    def affinities(self, x: Float[Array, " dim"]) -> Float[Array, " t"]:
        """Noise-free affinities ``(a_on, a_off_1, ..., a_off_K)`` of one sample."""
        return jnp.stack([self.on(x)] + [land(x) for land in self.off])

    def dock(self, key: PRNGKeyArray, x: Float[Array, "n dim"]) -> Float[Array, "n t"]:
        """Oracle energies ``S (n, K+1)``: ``-(offset + a_k(x)) + noise_sd * eps`` per entry."""
        if x.ndim != 2 or x.shape[1] != self.dim:
            raise ValueError(f"`x` must have shape (n, {self.dim}), got {x.shape}.")
        a = jax.vmap(self.affinities)(x)
        return -(self.offset + a) + self.noise_sd * jr.normal(key, a.shape, a.dtype)

    def on_affinity(self, x: Float[Array, " dim"]) -> Float[Array, ""]:
        """Noise-free on-target affinity of one sample (an exact guidance surrogate)."""
        return self.on(x)

    def off_affinities(self, x: Float[Array, " dim"]) -> Float[Array, " K"]:
        """Noise-free off-target affinities ``(K,)`` of one sample."""
        return jnp.stack([land(x) for land in self.off])
