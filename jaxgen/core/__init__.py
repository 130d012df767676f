"""Core of jaxgen: types, result flags, the ODE/SDE layer, iteration, training, sharding.

The conventions every family follows (docs/concepts/conventions.md; tests/test_conventions.py
checks them on the public signatures):

- Models are equinox modules acting on one sample; user models subclass a family's abstract
  interface and are checked with `checks.check_module`, never against a concrete class.
- Random functions take ``key`` first, like ``jax.random``; constructors take ``key=``
  keyword-only, like equinox.
- Losses are ``loss(model, batch, key, *, options) -> scalar``, so ``functools.partial`` plugs
  them into `fit`.
- Trainers are ``fit_<method>(model, data, *, key, num_steps, optimizer=None, ...,
  **fit_options) -> FitResult`` built on `fit`: ``data`` is a sampler ``batches(key)`` or arrays
  with ``batch_size`` (`as_batches`); ``optimizer=None`` is a documented default (usually
  `adamw_cosine`); `FitOptions` are forwarded to `fit`; extras are fields of a `FitResult`
  subclass.
- Argument checks come from `jaxgen.core.checks`, so messages read the same everywhere.
"""

from ._iterate import IterateOutput as IterateOutput, iterate as iterate
from ._linalg import gaussian_logpdf_chol as gaussian_logpdf_chol, psd_sqrt as psd_sqrt
from ._mmd import (
    check_kernel as check_kernel,
    kernel_gram as kernel_gram,
    mmd2_from_grams as mmd2_from_grams,
    mmd2_unbiased as mmd2_unbiased,
    pairwise_sq_dists as pairwise_sq_dists,
)
from ._montecarlo import (
    replicate_sharding as replicate_sharding,
    sample_many as sample_many,
    sharded_vmap as sharded_vmap,
)
from ._results import RESULTS as RESULTS
from .checkpoint import (
    CheckpointWarning as CheckpointWarning,
    CorruptCheckpointError as CorruptCheckpointError,
    latest_checkpoint as latest_checkpoint,
    load_checkpoint as load_checkpoint,
    load_latest_checkpoint as load_latest_checkpoint,
    save_checkpoint as save_checkpoint,
    verify_checkpoint as verify_checkpoint,
)
from .mesh import (
    bytes_per_device as bytes_per_device,
    data_mesh as data_mesh,
    fsdp_rule as fsdp_rule,
    init_processes as init_processes,
    param_shardings as param_shardings,
    replicate as replicate,
    shard_batch as shard_batch,
    shard_params as shard_params,
    sharded_minibatches as sharded_minibatches,
)
from .solve import solve_ode as solve_ode, solve_sde as solve_sde
from .train import (
    FIT_OPTIONS as FIT_OPTIONS,
    FitOptions as FitOptions,
    FitResult as FitResult,
    NonFiniteError as NonFiniteError,
    adamw_cosine as adamw_cosine,
    as_batches as as_batches,
    check_fit_options as check_fit_options,
    fit as fit,
    make_step as make_step,
    minibatches as minibatches,
    train_step as train_step,
)
