"""Neural-network building blocks: channel mixers (MLP, SwiGLU, MoE, continued fractions),
attention, norms, time embeddings, the token transformer; constrained ReLU networks (ICNN, ReLU+)
and their exact constructions.
"""

from ._continued_fraction import (
    capped_reciprocal as capped_reciprocal,
)
from ._continued_fraction import (
    cf_bottom_up as cf_bottom_up,
)
from ._continued_fraction import (
    cf_log_positive as cf_log_positive,
)
from ._continued_fraction import (
    cf_signed_logexp as cf_signed_logexp,
)
from ._continued_fraction import (
    cf_value as cf_value,
)
from ._continued_fraction import (
    continuants as continuants,
)
from ._continued_fraction import (
    recip_logexp as recip_logexp,
)
from ._icnn import (
    ICNN as ICNN,
)
from ._icnn import (
    NonNegProjectionState as NonNegProjectionState,
)
from ._icnn import (
    ReLUNet as ReLUNet,
)
from ._icnn import (
    ReLUPlusNet as ReLUPlusNet,
)
from ._icnn import (
    center_biases as center_biases,
)
from ._icnn import (
    check_constraints as check_constraints,
)
from ._icnn import (
    nonneg_projection as nonneg_projection,
)
from ._icnn import (
    project_nonneg as project_nonneg,
)
from ._icnn_exact import (
    SEPARATION_FAMILIES as SEPARATION_FAMILIES,
)
from ._icnn_exact import (
    icnn_max_affine_exact as icnn_max_affine_exact,
)
from ._icnn_exact import (
    icnn_max_exact as icnn_max_exact,
)
from ._icnn_exact import (
    icnn_separation_exact as icnn_separation_exact,
)
from ._icnn_exact import (
    lattice_points as lattice_points,
)
from ._icnn_exact import (
    max_affine as max_affine,
)
from ._icnn_exact import (
    max_n as max_n,
)
from ._icnn_exact import (
    relu_max_tree as relu_max_tree,
)
from ._icnn_exact import (
    separation_fk as separation_fk,
)
from ._layers import (
    MultiHeadAttention as MultiHeadAttention,
)
from ._layers import (
    RMSNorm as RMSNorm,
)
from ._layers import (
    TimeEmbedding as TimeEmbedding,
)
from ._layers import (
    apply_rotary as apply_rotary,
)
from ._layers import (
    init_normal as init_normal,
)
from ._layers import (
    sinusoidal_embedding as sinusoidal_embedding,
)
from ._mixers import (
    DIVISIONS as DIVISIONS,
)
from ._mixers import (
    MIXERS as MIXERS,
)
from ._mixers import (
    AbstractChannelMixer as AbstractChannelMixer,
)
from ._mixers import (
    CffnMixer as CffnMixer,
)
from ._mixers import (
    GatedCFMixer as GatedCFMixer,
)
from ._mixers import (
    MLPMixer as MLPMixer,
)
from ._mixers import (
    MoEMixer as MoEMixer,
)
from ._mixers import (
    SwiGLUMixer as SwiGLUMixer,
)
from ._mixers import (
    count_parameters as count_parameters,
)
from ._mixers import (
    dyadic_active_depth as dyadic_active_depth,
)
from ._mixers import (
    dyadic_grad_mask as dyadic_grad_mask,
)
from ._mixers import (
    dyadic_schedule as dyadic_schedule,
)
from ._mixers import (
    dyadic_start_steps as dyadic_start_steps,
)
from ._mixers import (
    make_mixer as make_mixer,
)
from ._mixers import (
    swiglu_hidden as swiglu_hidden,
)
from ._monotone import (
    BoxSampler as BoxSampler,
)
from ._monotone import (
    convexity_gap as convexity_gap,
)
from ._monotone import (
    corner_floor as corner_floor,
)
from ._monotone import (
    corner_points as corner_points,
)
from ._monotone import (
    fit_on_box as fit_on_box,
)
from ._monotone import (
    monotonicity_gap as monotonicity_gap,
)
from ._monotone import (
    squared_error_loss as squared_error_loss,
)
from ._monotone import (
    sup_error as sup_error,
)
from ._monotone import (
    supermodularity_gap as supermodularity_gap,
)
from ._transformer import (
    POSITIONS as POSITIONS,
)
from ._transformer import (
    Transformer as Transformer,
)
from ._transformer import (
    TransformerBlock as TransformerBlock,
)
