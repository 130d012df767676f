"""Small language models on `jaxgen.nn.Transformer`: next-token loss, training through
`jaxgen.core.fit`, held-out bits per token / perplexity, sampling, sequence scoring and
generative perplexity.
"""

from ._lm import (
    AUX_LOSS_WEIGHT as AUX_LOSS_WEIGHT,
)
from ._lm import (
    LMEvaluation as LMEvaluation,
)
from ._lm import (
    evaluate_lm as evaluate_lm,
)
from ._lm import (
    generative_perplexity as generative_perplexity,
)
from ._lm import (
    lm_loss as lm_loss,
)
from ._lm import (
    lm_optimizer as lm_optimizer,
)
from ._lm import (
    sample_lm as sample_lm,
)
from ._lm import (
    score_sequences as score_sequences,
)
from ._lm import (
    sequence_log_prob as sequence_log_prob,
)
from ._lm import (
    token_nll as token_nll,
)
from ._lm import (
    train_lm as train_lm,
)
from ._qes import LoRALinear as LoRALinear
from ._qes import MoLoRALinear as MoLoRALinear
from ._qes import QESConfig as QESConfig
from ._qes import TokenRouter as TokenRouter
from ._qes import route_loss as route_loss
from ._qes import shutdown_mask as shutdown_mask
from ._qes import switch_load_loss as switch_load_loss
from ._qes import trim_suspects as trim_suspects
