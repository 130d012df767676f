import equinox as eqx
import jax
import jax.numpy as jnp
import pytest

from jaxgen.confseq import betting_cs, confidence_region, excluded_path, log_wealth
from jaxgen.confseq._checks import check_m, check_weights, check_x

X = jnp.full((10, 2), 0.5)
M = jnp.array([0.5, 0.5])


def test_x_outside_unit_interval_and_nan():
    with pytest.raises(ValueError, match=r"x must lie in \[0, 1\]"):
        confidence_region(X.at[0, 0].set(1.5), 0.05, kind="box")
    with pytest.raises(ValueError, match="contain no NaN"):
        log_wealth(X.at[3, 1].set(jnp.nan), M)
    # traced data is checked too (error_if)
    with pytest.raises((eqx.EquinoxRuntimeError, jax.errors.JaxRuntimeError), match=r"x must lie"):
        jax.jit(lambda x: log_wealth(x, M))(X.at[0, 0].set(-0.1))


def test_shapes_alpha_weights_kind_bet():
    # the jaxtyping hook rejects wrong ranks first (TypeError); the checks behind it say why
    with pytest.raises(TypeError):
        confidence_region(jnp.full((10,), 0.5), 0.05, kind="box")
    with pytest.raises(TypeError):
        log_wealth(X, jnp.array([0.5, 0.5, 0.5]))
    with pytest.raises(ValueError, match=r"x must have shape \(T, d\)"):
        check_x(jnp.full((10,), 0.5))
    with pytest.raises(ValueError, match=r"x must have shape \(T,\)"):
        check_x(X, ndim=1)
    with pytest.raises(ValueError, match=r"m must have shape \(d,\)"):
        check_m(jnp.array([0.5, 0.5, 0.5]), X)
    with pytest.raises(ValueError, match=r"m must lie in \[0, 1\]"):
        log_wealth(X, jnp.array([0.5, 1.2]))
    for bad in (0.0, 1.0, -0.2, 1.5):
        with pytest.raises(ValueError, match=r"alpha must lie strictly inside \(0, 1\)"):
            confidence_region(X, bad, kind="bonferroni")
    with pytest.raises(ValueError, match="weights must be nonnegative and sum to 1"):
        confidence_region(X, 0.05, kind="portfolio", weights=jnp.array([1.2, -0.2]))
    with pytest.raises(ValueError, match="weights must be nonnegative and sum to 1"):
        confidence_region(X, 0.05, kind="portfolio", weights=jnp.array([0.5, 0.6]))
    with pytest.raises(ValueError, match=r"weights must have shape \(d,\)"):
        check_weights(jnp.array([1.0]), 2, jnp.float64)
    with pytest.raises(ValueError, match="kind must be one of"):
        confidence_region(X, 0.05, kind="sphere")
    with pytest.raises(ValueError, match="bet must be one of"):
        log_wealth(X, M, bet="kelly")
    with pytest.raises(ValueError, match="needs the convex"):
        confidence_region(X, 0.05, kind="box", bet="ons")
    with pytest.raises(ValueError, match="exact mode"):
        betting_cs(X[:, 0], 0.05, bet="agrapa", grid_size=None)
    with pytest.raises(ValueError, match="confseq_compat=True needs"):
        betting_cs(X[:, 0], 0.05, bet="ons", confseq_compat=True)
    with pytest.raises(ValueError, match="grid_size must be"):
        betting_cs(X[:, 0], 0.05, grid_size=1)
    with pytest.raises(ValueError, match=r"t must lie in \[1, T\]"):
        confidence_region(X, 0.05, kind="box", t=11)
    with pytest.raises(ValueError, match="ps must all be >= 2"):
        confidence_region(X, 0.05, kind="ellipsoid", ps=(1.0, 2.0))
    with pytest.raises(ValueError, match="kind must be one of"):
        excluded_path(X, M, kind="box")
