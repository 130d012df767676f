"""Flow matching: the regression loss that trains a velocity field on interpolant samples."""

import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, PRNGKeyArray

from ._interpolants import AbstractInterpolant
from ._velocity import AbstractVelocityField

TIME_SAMPLERS = ("uniform", "logit_normal")


def flow_matching_loss(
    model: AbstractVelocityField,
    batch: tuple[Array, ...],
    key: PRNGKeyArray,
    *,
    interpolant: AbstractInterpolant,
    time_margin: float = 1e-3,
    time_sampler: str = "uniform",
    cond_dropout: float = 0.0,
) -> Float[Array, ""]:
    r"""Mean squared error $E\|v_\theta(t, X_t, c) - \dot X_t\|^2$ over a batch of endpoint pairs.

    Times lie in $[\epsilon, 1 - \epsilon]$ with $\epsilon$ = ``time_margin`` (the
    noise-augmented target is singular at the ends): uniform, or logit-normal
    ($t = \mathrm{sigmoid}(n)$, $n \sim N(0, 1)$, clipped; Esser et al. 2024). Use with
    `jaxgen.core.fit` through ``functools.partial(flow_matching_loss, interpolant=...)``.

    A conditional field gets ``batch = (x0, x1, cond)``: sample ``i`` is called as
    ``model(t_i, x_t_i, cond_i)`` (the condition is the vector field's ``args``). With
    ``cond_dropout = p`` each condition is replaced by zeros with probability ``p``, which trains
    the unconditional field alongside for classifier-free guidance (Ho and Salimans 2022): give
    conditions whose zero means "none" (e.g. one-hot class vectors).

    Args:
        model: the velocity field being trained (one-sample ``(t, x, args)``).
        batch: ``(x0, x1)``, source and target samples of shape ``(B, dim)``, independent, or
            ``(x0, x1, cond)`` with ``cond`` of shape ``(B, ...)``.
        key: PRNG key for times, interpolant noise and condition dropout.
        interpolant: e.g. `LinearInterpolant()` or `GaussianStraightProcess.interpolant()`.
        time_margin: $\epsilon$ in ``[0, 0.5)``.
        time_sampler: ``"uniform"`` or ``"logit_normal"``.
        cond_dropout: probability in ``[0, 1]`` of dropping a sample's condition.

    Returns:
        The scalar loss.
    """
    if not isinstance(batch, tuple | list) or len(batch) not in (2, 3):
        raise ValueError("`batch` must be (x0, x1) or (x0, x1, cond).")
    x0, x1 = batch[0], batch[1]
    cond = batch[2] if len(batch) == 3 else None
    if x0.ndim != 2 or x0.shape != x1.shape:
        raise ValueError(
            f"`batch` must be (x0, x1) of equal shape (B, dim), got {x0.shape} and {x1.shape}."
        )
    if cond is not None and (cond.ndim < 1 or cond.shape[0] != x0.shape[0]):
        raise ValueError(
            f"`cond` must have the batch size {x0.shape[0]} as its leading axis, got {cond.shape}."
        )
    if not 0.0 <= time_margin < 0.5:
        raise ValueError(f"`time_margin` must lie in [0, 0.5), got {time_margin}.")
    if time_sampler not in TIME_SAMPLERS:
        raise ValueError(f"`time_sampler` must be one of {TIME_SAMPLERS}, got {time_sampler!r}.")
    if not 0.0 <= cond_dropout <= 1.0:
        raise ValueError(f"`cond_dropout` must lie in [0, 1], got {cond_dropout}.")
    if cond is None and cond_dropout > 0:
        raise ValueError("`cond_dropout` > 0 needs a condition: batch = (x0, x1, cond).")
    time_key, noise_key, drop_key = jr.split(key, 3)
    num = x0.shape[0]
    if time_sampler == "uniform":
        times = jr.uniform(time_key, (num,), x0.dtype, time_margin, 1.0 - time_margin)
    else:
        times = jnp.clip(
            jax.nn.sigmoid(jr.normal(time_key, (num,), x0.dtype)), time_margin, 1.0 - time_margin
        )
    keys = jr.split(noise_key, num)
    x_t, target = jax.vmap(interpolant.sample)(keys, x0, x1, times)
    if cond is None:
        prediction = jax.vmap(model)(times, x_t)
    else:
        if cond_dropout > 0:
            keep = jr.bernoulli(drop_key, 1.0 - cond_dropout, (num,))
            cond = jnp.where(keep.reshape((num,) + (1,) * (cond.ndim - 1)), cond, 0)
        prediction = jax.vmap(model)(times, x_t, cond)
    return jnp.mean(jnp.sum((prediction - target) ** 2, axis=-1))
