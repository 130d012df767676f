"""Flow matching: the regression loss that trains a velocity field on interpolant samples."""

import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, PRNGKeyArray

from ._interpolants import AbstractInterpolant
from ._velocity import AbstractVelocityField


def flow_matching_loss(
    model: AbstractVelocityField,
    batch: tuple[Float[Array, "B dim"], Float[Array, "B dim"]],
    key: PRNGKeyArray,
    *,
    interpolant: AbstractInterpolant,
    time_margin: float = 1e-3,
) -> Float[Array, ""]:
    r"""Mean squared error $E\|v_\theta(t, X_t) - \dot X_t\|^2$ over a batch of endpoint pairs.

    Times are uniform on $[\epsilon, 1 - \epsilon]$ with $\epsilon$ = ``time_margin`` (the
    noise-augmented target is singular at the ends). Use with `jaxgen.core.fit` through
    ``functools.partial(flow_matching_loss, interpolant=...)``.

    Args:
        model: the velocity field being trained (one-sample ``(t, x, args)``).
        batch: ``(x0, x1)``, source and target samples of shape ``(B, dim)``, independent.
        key: PRNG key for times and interpolant noise.
        interpolant: e.g. `LinearInterpolant()` or `GaussianStraightProcess.interpolant()`.
        time_margin: $\epsilon$ in ``[0, 0.5)``.

    Returns:
        The scalar loss.
    """
    x0, x1 = batch
    if x0.ndim != 2 or x0.shape != x1.shape:
        raise ValueError(
            f"`batch` must be (x0, x1) of equal shape (B, dim), got {x0.shape} and {x1.shape}."
        )
    if not 0.0 <= time_margin < 0.5:
        raise ValueError(f"`time_margin` must lie in [0, 0.5), got {time_margin}.")
    time_key, noise_key = jr.split(key)
    times = jr.uniform(time_key, (x0.shape[0],), x0.dtype, time_margin, 1.0 - time_margin)
    keys = jr.split(noise_key, x0.shape[0])
    x_t, target = jax.vmap(interpolant.sample)(keys, x0, x1, times)
    prediction = jax.vmap(model)(times, x_t)
    return jnp.mean(jnp.sum((prediction - target) ** 2, axis=-1))
