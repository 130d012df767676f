"""Quarantined Expert Shutdown (QES): routed LoRA experts, backdoor tasks, training, evaluation."""

from ._data import (
    PRETRAIN_TASKS as PRETRAIN_TASKS,
    PRETRAIN_VOCAB_SIZE as PRETRAIN_VOCAB_SIZE,
    BackdoorVocab as BackdoorVocab,
    clean_test_set as clean_test_set,
    make_pretrain_tasks as make_pretrain_tasks,
    make_task as make_task,
    poison as poison,
    triggered_test_set as triggered_test_set,
)
from ._eval import (
    attack_success_rate as attack_success_rate,
    clean_accuracy as clean_accuracy,
    greedy_decode as greedy_decode,
    lm_tokens as lm_tokens,
    routing_auroc as routing_auroc,
)
from ._experts import (
    LoRALinear as LoRALinear,
    MoLoRALinear as MoLoRALinear,
    QESConfig as QESConfig,
    TokenRouter as TokenRouter,
    route_loss as route_loss,
    shutdown_mask as shutdown_mask,
    switch_load_loss as switch_load_loss,
    trim_suspects as trim_suspects,
)
from ._model import (
    QESTransformer as QESTransformer,
    attach_lora as attach_lora,
    attach_qes as attach_qes,
    restore as restore,
    shutdown as shutdown,
    trainable_filter as trainable_filter,
)
from ._train import (
    ABLResult as ABLResult,
    FinePruneResult as FinePruneResult,
    adapter_optimizer as adapter_optimizer,
    adapter_task_loss as adapter_task_loss,
    backdoor_batches as backdoor_batches,
    fit_abl as fit_abl,
    fit_fine_prune as fit_fine_prune,
    fit_finetune as fit_finetune,
    fit_qes as fit_qes,
    qes_loss as qes_loss,
    sample_losses as sample_losses,
    suspect_recall as suspect_recall,
)
