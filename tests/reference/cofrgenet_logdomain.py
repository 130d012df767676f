"""The log-domain positive ladder as it was before its closed-form VJP (an oracle for the tests).

``log K_0 = 0``, ``log K_1 = l_d``, ``log K_k = logaddexp(l_{d-k+1} + log K_{k-1}, log K_{k-2})``,
``f = exp(log K_{d-1} - log K_d)``, differentiated by plain autodiff (CoFrGeNet, arXiv 2601.21766,
continuants of Proposition 1 taken in the log domain).
"""

import jax.numpy as jnp


def cf_log_positive_logaddexp(log_a):
    """Continued fraction of ``a = exp(log_a)`` over the last axis, by logaddexp continuants."""
    d = log_a.shape[-1]
    prev2 = jnp.zeros_like(log_a[..., 0])
    prev1 = log_a[..., d - 1]
    if d == 1:
        return jnp.exp(prev2 - prev1)
    for k in range(2, d + 1):
        prev2, prev1 = prev1, jnp.logaddexp(log_a[..., d - k] + prev1, prev2)
    return jnp.exp(prev2 - prev1)
