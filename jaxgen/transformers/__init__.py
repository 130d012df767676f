"""Small language models on `jaxgen.nn.Transformer`: next-token loss, training through
`jaxgen.core.fit`, held-out bits per token / perplexity, sampling, sequence scoring and
generative perplexity.
"""

from ._lm import (
    AUX_LOSS_WEIGHT as AUX_LOSS_WEIGHT,
    LMEvaluation as LMEvaluation,
    evaluate_lm as evaluate_lm,
    generative_perplexity as generative_perplexity,
    lm_loss as lm_loss,
    lm_optimizer as lm_optimizer,
    sample_lm as sample_lm,
    score_sequences as score_sequences,
    sequence_log_prob as sequence_log_prob,
    token_nll as token_nll,
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
from ._qes_data import BackdoorVocab as BackdoorVocab
from ._qes_data import clean_test_set as clean_test_set
from ._qes_data import make_task as make_task
from ._qes_data import poison as poison
from ._qes_data import triggered_test_set as triggered_test_set
from ._qes_eval import attack_success_rate as attack_success_rate
from ._qes_eval import clean_accuracy as clean_accuracy
from ._qes_eval import greedy_decode as greedy_decode
from ._qes_eval import lm_tokens as lm_tokens
from ._qes_eval import routing_auroc as routing_auroc
