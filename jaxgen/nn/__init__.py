"""Neural-network building blocks: channel mixers (MLP, SwiGLU, MoE, continued fractions),
attention, norms, time embeddings, the token transformer; constrained ReLU networks (ICNN, ReLU+)
and their exact constructions.
"""

from ._continued_fraction import (
    capped_reciprocal as capped_reciprocal,
    cf_bottom_up as cf_bottom_up,
    cf_log_positive as cf_log_positive,
    cf_signed_logexp as cf_signed_logexp,
    cf_value as cf_value,
    continuants as continuants,
    recip_logexp as recip_logexp,
)
from ._icnn import (
    ICNN as ICNN,
    NonNegProjectionState as NonNegProjectionState,
    ReLUNet as ReLUNet,
    ReLUPlusNet as ReLUPlusNet,
    center_biases as center_biases,
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
from ._layers import (
    LinearAdapter as LinearAdapter,
    MultiHeadAttention as MultiHeadAttention,
    RMSNorm as RMSNorm,
    TimeEmbedding as TimeEmbedding,
    adapted_linear as adapted_linear,
    apply_rotary as apply_rotary,
    init_normal as init_normal,
    sinusoidal_embedding as sinusoidal_embedding,
)
from ._mixers import (
    DIVISIONS as DIVISIONS,
    MIXERS as MIXERS,
    AbstractAdaptableMixer as AbstractAdaptableMixer,
    AbstractChannelMixer as AbstractChannelMixer,
    CffnMixer as CffnMixer,
    GatedCFMixer as GatedCFMixer,
    MLPMixer as MLPMixer,
    MoEMixer as MoEMixer,
    SwiGLUMixer as SwiGLUMixer,
    count_parameters as count_parameters,
    dyadic_active_depth as dyadic_active_depth,
    dyadic_grad_mask as dyadic_grad_mask,
    dyadic_schedule as dyadic_schedule,
    dyadic_start_steps as dyadic_start_steps,
    make_mixer as make_mixer,
    swiglu_hidden as swiglu_hidden,
)
from ._monotone import (
    BoxSampler as BoxSampler,
    convexity_gap as convexity_gap,
    corner_floor as corner_floor,
    corner_points as corner_points,
    fit_on_box as fit_on_box,
    monotonicity_gap as monotonicity_gap,
    squared_error_loss as squared_error_loss,
    sup_error as sup_error,
    supermodularity_gap as supermodularity_gap,
)
from ._transformer import (
    POSITIONS as POSITIONS,
    AbstractCausalLM as AbstractCausalLM,
    Transformer as Transformer,
    TransformerBlock as TransformerBlock,
)
