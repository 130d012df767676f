"""Key-first 2-D toy distributions for generative-model benchmarks."""

import math

import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, PRNGKeyArray

TOY_2D = ("8gaussians", "two_moons", "checkerboard")


def sample_toy_2d(key: PRNGKeyArray, name: str, num: int) -> Float[Array, "num 2"]:
    r"""``num`` i.i.d. points of a named 2-D toy distribution (default float dtype).

    - ``"8gaussians"``: equal mixture of $N(2 (\cos \theta_k, \sin \theta_k), 0.1^2 I)$,
      $\theta_k = 2 \pi k / 8$, $k = 0..7$.
    - ``"two_moons"``: two interleaved half circles of radius 1, upper
      $(\cos\theta, \sin\theta)$ and lower $(1 - \cos\theta, 1/2 - \sin\theta)$ with
      $\theta \sim U[0, \pi]$, centred by $(1/2, 1/4)$, scaled by 2, plus $N(0, 0.1^2 I)$ noise.
    - ``"checkerboard"``: uniform on the 8 black cells of a 4 x 4 board on $[-2, 2]^2$ (cell
      $(i, j)$ black when $i + j$ is even).

    Args:
        key: PRNG key.
        name: one of ``TOY_2D``.
        num: number of points (>= 1).

    Returns:
        Array of shape ``(num, 2)``.
    """
    if name not in TOY_2D:
        raise ValueError(f"unknown toy distribution {name!r}; expected one of {TOY_2D}.")
    if not isinstance(num, int) or isinstance(num, bool) or num < 1:
        raise ValueError(f"`num` must be an int >= 1, got {num!r}.")
    k1, k2, k3 = jr.split(key, 3)
    if name == "8gaussians":
        angle = 2 * math.pi * jr.randint(k1, (num,), 0, 8) / 8
        centres = 2.0 * jnp.stack([jnp.cos(angle), jnp.sin(angle)], axis=-1)
        return centres + 0.1 * jr.normal(k2, (num, 2))
    if name == "two_moons":
        theta = math.pi * jr.uniform(k1, (num,))
        upper = jnp.stack([jnp.cos(theta), jnp.sin(theta)], axis=-1)
        lower = jnp.stack([1 - jnp.cos(theta), 0.5 - jnp.sin(theta)], axis=-1)
        moon = jnp.where(jr.bernoulli(k2, 0.5, (num, 1)), upper, lower)
        return 2.0 * (moon - jnp.array([[0.5, 0.25]])) + 0.1 * jr.normal(k3, (num, 2))
    cell = jr.randint(k1, (num,), 0, 8)  # 8 black cells: row j, column i = 2 (cell % 2) + j % 2
    row = cell // 2
    col = 2 * (cell % 2) + row % 2
    corner = jnp.stack([col, row], axis=-1) - 2.0
    return corner + jr.uniform(k2, (num, 2))
