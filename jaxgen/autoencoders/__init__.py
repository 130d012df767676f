"""Constrained (exactly idempotent) and neuromodulated autoencoders for context-dependent
manifolds (NcAE), the six baselines of the paper, and their metrics.
"""

from ._cae import (
    AbstractAutoencoder as AbstractAutoencoder,
    BiorthoLayer as BiorthoLayer,
    ConstrainedAE as ConstrainedAE,
    hyperbolic_pair as hyperbolic_pair,
)
from ._metrics import (
    context_lipschitz as context_lipschitz,
    decoder_condition as decoder_condition,
    idempotency_error as idempotency_error,
    left_inverse_error as left_inverse_error,
    procrustes_consistency as procrustes_consistency,
    recon_rel_mse as recon_rel_mse,
)
from ._ncae import (
    CONDITION_WEIGHT as CONDITION_WEIGHT,
    ConcatAE as ConcatAE,
    ConcatCAE as ConcatCAE,
    FiLMAE as FiLMAE,
    FiLMCAE as FiLMCAE,
    MLPAutoencoder as MLPAutoencoder,
    NcAE as NcAE,
    ncae_loss as ncae_loss,
)
