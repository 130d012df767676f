"""Neural-network building blocks: channel mixers (MLP, SwiGLU, MoE, continued fractions),
attention, norms, time embeddings, the token transformer; constrained ReLU networks (ICNN, ReLU+)
and their exact constructions."""

from ._continued_fraction import (
    capped_reciprocal as capped_reciprocal,
    cf_bottom_up as cf_bottom_up,
    cf_log_positive as cf_log_positive,
    cf_signed_logexp as cf_signed_logexp,
    cf_value as cf_value,
    continuants as continuants,
    recip_logexp as recip_logexp,
)
from ._layers import (
    apply_rotary as apply_rotary,
    init_normal as init_normal,
    MultiHeadAttention as MultiHeadAttention,
    RMSNorm as RMSNorm,
    sinusoidal_embedding as sinusoidal_embedding,
    TimeEmbedding as TimeEmbedding,
)
from ._mixers import (
    AbstractChannelMixer as AbstractChannelMixer,
    CffnMixer as CffnMixer,
    count_parameters as count_parameters,
    DIVISIONS as DIVISIONS,
    dyadic_active_depth as dyadic_active_depth,
    dyadic_grad_mask as dyadic_grad_mask,
    dyadic_schedule as dyadic_schedule,
    dyadic_start_steps as dyadic_start_steps,
    GatedCFMixer as GatedCFMixer,
    make_mixer as make_mixer,
    MIXERS as MIXERS,
    MLPMixer as MLPMixer,
    MoEMixer as MoEMixer,
    swiglu_hidden as swiglu_hidden,
    SwiGLUMixer as SwiGLUMixer,
)
from ._transformer import (
    POSITIONS as POSITIONS,
    Transformer as Transformer,
    TransformerBlock as TransformerBlock,
)
from ._icnn import (
    center_biases as center_biases,
    ICNN as ICNN,
    NonNegProjectionState as NonNegProjectionState,
    ReLUNet as ReLUNet,
    ReLUPlusNet as ReLUPlusNet,
    check_constraints as check_constraints,
    nonneg_projection as nonneg_projection,
    project_nonneg as project_nonneg,
)
from ._icnn_exact import (
    SEPARATION_FAMILIES as SEPARATION_FAMILIES,
    icnn_max_affine_exact as icnn_max_affine_exact,
    icnn_max_exact as icnn_max_exact,
    icnn_separation_exact as icnn_separation_exact,
    lattice_points as lattice_points,
    max_affine as max_affine,
    max_n as max_n,
    relu_max_tree as relu_max_tree,
    separation_fk as separation_fk,
)
from ._monotone import (
    BoxSampler as BoxSampler,
    convexity_gap as convexity_gap,
    corner_floor as corner_floor,
    corner_points as corner_points,
    fit_on_box as fit_on_box,
    monotonicity_gap as monotonicity_gap,
    sup_error as sup_error,
    squared_error_loss as squared_error_loss,
    supermodularity_gap as supermodularity_gap,
)
