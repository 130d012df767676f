"""Neural-network building blocks: channel mixers (MLP, SwiGLU, MoE, continued fractions), attention, norms, time embeddings, the token transformer."""

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
