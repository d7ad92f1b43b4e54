"""Logit processing: only what the user sets, identical for both models."""

import pytest
import torch

from bench.decoding import SpeculativeDecoder
from bench.distributions import Sampling, process
from bench.errors import BenchError
from bench.verifiers import make_verifier

LOGITS = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0])


def test_temperature_and_greedy():
    torch.testing.assert_close(process(LOGITS, Sampling(0.5)), (LOGITS / 0.5).softmax(-1))
    torch.testing.assert_close(process(LOGITS, Sampling(0.0)), LOGITS.softmax(-1))


def test_top_k_keeps_the_k_largest():
    probs = process(LOGITS, Sampling(1.0, top_k=2))
    assert (probs > 0).tolist() == [True, True, False, False, False]
    torch.testing.assert_close(probs[:2], LOGITS[:2].softmax(-1))


def test_top_p_keeps_the_smallest_set_reaching_p():
    full = LOGITS.softmax(-1)  # [0.54, 0.20, 0.12, 0.07, 0.03]
    probs = process(LOGITS, Sampling(1.0, top_p=0.7))
    assert (probs > 0).tolist() == [True, True, False, False, False]
    torch.testing.assert_close(probs[:2], full[:2] / full[:2].sum())
    shuffled = LOGITS[[3, 0, 4, 2, 1]]
    torch.testing.assert_close(process(shuffled, Sampling(1.0, top_p=0.7)), probs[[3, 0, 4, 2, 1]])


@pytest.mark.parametrize("kwargs", [{"temperature": -1}, {"top_k": 0}, {"top_p": 1.5}])
def test_bad_sampling_settings(kwargs):
    with pytest.raises(BenchError):
        Sampling(**kwargs)


def test_model_generation_config_is_never_read(tiny_pair):
    """A hidden top_k = 1 in the model's config must not turn sampling into greedy decoding."""
    config = tiny_pair.target.generation_config
    saved = (config.top_k, config.top_p)
    config.top_k, config.top_p = 1, 0.01
    try:
        decoder = SpeculativeDecoder(
            tiny_pair.target, tiny_pair.draft, make_verifier("sd"), sampling=Sampling(1.0)
        )
        outputs = {
            tuple(decoder.generate([tiny_pair.tokenizer.bos_token_id, 40], 16, seed=s).token_ids)
            for s in range(6)
        }
    finally:
        config.top_k, config.top_p = saved
    assert len(outputs) > 1
