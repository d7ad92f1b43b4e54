"""A judge's head: standardised hidden states, one logistic unit (AutoJudge's StandardScaler +
LogisticRegression, garipovroma/autojudge src/train_head_gsm8k.py), output p(important).

Which states it reads (``features``): ``target``, the target's last hidden state at the drafted
token (the verify forward's state with the token as input, AutoJudge's "DT"), or ``draft+target``,
the draft's last hidden state where it predicted the token, then the target's ("DD-DT"; the
authors ran the draft one step further to read its state on the token, which this harness's
drafter never computes for the last drafted token, so the head reads the state it has).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from bench.atomic import write_atomic
from bench.errors import BenchError

FEATURES = ("target", "draft+target")
JUDGE_FILE, CARD_FILE = "judge.safetensors", "card.json"


def check_features(features: str) -> str:
    if features not in FEATURES:
        raise BenchError(f"features must be one of {', '.join(FEATURES)}, got {features!r}")
    return features


def feature_vector(features: str, h_draft: Tensor | None, h_target: Tensor) -> Tensor:
    """[..., F]: what a judge head reads, in float32."""
    if features == "target":
        return h_target.float()
    if h_draft is None:
        raise BenchError("a draft+target judge reads the draft model's hidden states; this drafter has none")
    return torch.cat([h_draft.float(), h_target.float()], dim=-1)


class JudgeHead(nn.Module):
    """p(important) = sigmoid(((x - mean) / scale) . w + b) per drafted token, read on the scale of
    ``ranks``, the sorted scores of the validation questions' tokens, when the head holds them: its
    output is then the share of those scores below p, in [0, n / (n + 1)], so tau is a quantile
    level (AutoJudge's sweep) and spans the head's real range however narrow its p's are. A head
    with no ranks (one a test or plug-in builds by hand) outputs p itself."""

    at_token: ClassVar[bool] = True  # reads the target's state with the drafted token as input

    def __init__(self, features: str, draft_hidden: int, target_hidden: int) -> None:
        super().__init__()
        self.features = check_features(features)
        self.draft_hidden, self.target_hidden = draft_hidden, target_hidden
        width = target_hidden + (draft_hidden if features == "draft+target" else 0)
        self.register_buffer("mean", torch.zeros(width))
        self.register_buffer("scale", torch.ones(width))
        self.register_buffer("weight", torch.zeros(width))
        self.register_buffer("bias", torch.zeros(()))
        self.register_buffer("ranks", torch.zeros(0))

    def forward(self, h_draft: Tensor | None, h_target: Tensor) -> Tensor:
        x = feature_vector(self.features, h_draft, h_target)
        p = torch.sigmoid(((x - self.mean) / self.scale) @ self.weight + self.bias)
        if not len(self.ranks):
            return p
        return torch.searchsorted(self.ranks, p.contiguous()).to(p.dtype) / (len(self.ranks) + 1)

    def save(self, folder: Path, card: dict[str, Any]) -> None:
        from safetensors.torch import save_file

        folder.mkdir(parents=True, exist_ok=True)
        tensors = {k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}
        write_atomic(folder / JUDGE_FILE, lambda tmp: save_file(tensors, str(tmp)))
        card = {
            **card,
            "head": "judge",
            "features": self.features,
            "draft_hidden": self.draft_hidden,
            "target_hidden": self.target_hidden,
        }
        text = json.dumps(card, indent=2, sort_keys=True)
        write_atomic(folder / CARD_FILE, lambda tmp: tmp.write_text(text))

    @classmethod
    def load(cls, folder: Path, card: dict[str, Any]) -> JudgeHead:
        from safetensors.torch import load_file

        head = cls(card["features"], card["draft_hidden"], card["target_hidden"])
        state = load_file(str(folder / JUDGE_FILE))
        head.ranks = torch.zeros_like(state.get("ranks", head.ranks))
        head.load_state_dict(state)
        return head
