"""Match-length (Kontoyiannis) entropy-rate estimators and model-free training-data filters.

`match_lengths` (suffix array, host numpy) and its brute-force reference, the estimators
`entropy_rate` (mean and inverse forms, increasing or sliding window, bits per symbol), per-
document scores, text-diversity metrics and the H_K / log-probability / random filters used
against model collapse; `markov_entropy_rate` and `sample_markov` give ground truth.
"""

from ._filters import (
    FilterResult as FilterResult,
    diversity_metrics as diversity_metrics,
    filter_by_entropy as filter_by_entropy,
    filter_by_logprob as filter_by_logprob,
    filter_random as filter_random,
    score_documents as score_documents,
)
from ._kontoyiannis import (
    FORMS as FORMS,
    entropy_rate as entropy_rate,
    markov_entropy_rate as markov_entropy_rate,
    match_lengths as match_lengths,
    match_lengths_bruteforce as match_lengths_bruteforce,
    sample_markov as sample_markov,
    to_symbols as to_symbols,
)
