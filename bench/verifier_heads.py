"""The verifier heads: what a verifier reads from the hidden states at each drafted token (the draft
heads that propose tokens are bench.eagle's).

DIVERSED's weight head: w_t = sigmoid(u . [h_draft ; h_target] + c), one dot product a token.

A judge's head: standardised hidden states, one logistic unit (AutoJudge's StandardScaler +
LogisticRegression, garipovroma/autojudge src/train_head_gsm8k.py), output p(important). Which
states it reads (``features``): ``target``, the target's last hidden state at the drafted token
(the verify forward's state with the token as input, AutoJudge's "DT"), or ``draft+target``, the
draft's last hidden state where it predicted the token, then the target's ("DD-DT"; the authors ran
the draft one step further to read its state on the token, which this harness's drafter never
computes for the last drafted token, so the head reads the state it has).

Training them is the learned recipes' work (docs/spec.md §4); loading them (``load_head``) is here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from bench.atomic import write_atomic
from bench.errors import BenchError


class WeightHead(nn.Module):
    """One linear layer on the concatenated last hidden states; starts at w = 0.5 everywhere."""

    at_token: ClassVar[bool] = False  # reads the states that predict each drafted token

    def __init__(self, draft_hidden: int, target_hidden: int) -> None:
        super().__init__()
        self.draft_hidden = draft_hidden
        self.target_hidden = target_hidden
        self.linear = nn.Linear(draft_hidden + target_hidden, 1)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)
        # Whose drafts it was trained on (``trained_on`` its card; a drafter spec): a decoder holds
        # it to those (bench.build). None: a head built by hand or fresh, which claims none.
        self.drafter: str | None = None

    def logit(self, h_draft: Tensor, h_target: Tensor) -> Tensor:
        """The pre-sigmoid score [..., N]; training works with it for numerical stability."""
        h = torch.cat([h_draft, h_target], dim=-1).to(self.linear.weight.dtype)
        return self.linear(h).squeeze(-1)

    def forward(self, h_draft: Tensor, h_target: Tensor) -> Tensor:
        """Target weight w_t in (0, 1) per position, [..., N]."""
        return torch.sigmoid(self.logit(h_draft, h_target)).float()


HEAD_FILE, CARD_FILE = "head.safetensors", "card.json"


FEATURES = ("target", "draft+target")
JUDGE_FILE = "judge.safetensors"


def check_features(features: str) -> str:
    """``features`` if a judge head can read it: a judge verifier checks its parameter here, before
    any head is loaded or trained."""
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
    mean: Tensor  # the buffers (saved with the head): the scaler's, the logistic unit's, the ranks
    scale: Tensor
    weight: Tensor
    bias: Tensor
    ranks: Tensor

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
        self.drafter: str | None = None  # whose drafts it was trained on, as WeightHead's

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
        head.drafter = trained_on(card)
        return head


# The heads a decoder runs with; the chain round reads ``at_token`` to know which states they read.
VerifierHead = WeightHead | JudgeHead


def trained_on(card: dict[str, Any]) -> str:
    """The drafter (a spec) whose drafts a head was trained on: a weight head's rollouts read its
    q and hidden states, a judge's labels were mined from its proposals. Heads from before cards
    recorded it were all trained on the draft model's."""
    return str(card.get("drafter") or card.get("recipe", {}).get("drafter", "model"))


def read_card(path: str) -> dict[str, Any] | None:
    """The card of the head at ``path``, or None where there is none (``init``, a missing
    folder: ``load_head`` says what to do)."""
    card_file = verifier_head_folder(path) / CARD_FILE
    return json.loads(card_file.read_text()) if card_file.is_file() else None


def save_head(head: WeightHead, folder: Path, card: dict[str, Any]) -> None:
    """Weights as safetensors plus a JSON card saying what the head was trained for."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().cpu().contiguous() for k, v in head.state_dict().items()}
    write_atomic(folder / HEAD_FILE, lambda tmp: save_file(tensors, str(tmp)))
    card = {**card, "draft_hidden": head.draft_hidden, "target_hidden": head.target_hidden}
    text = json.dumps(card, indent=2, sort_keys=True)
    write_atomic(folder / CARD_FILE, lambda tmp: tmp.write_text(text))


PACKAGED = "bench:"


def verifier_head_folder(path: str) -> Path:
    """A folder path, or ``bench:RELATIVE`` for a head shipped inside the package (the reference
    pair's), so that the demo's grid works from any directory."""
    if path.startswith(PACKAGED):
        from importlib import resources

        return Path(str(resources.files("bench") / path[len(PACKAGED) :]))
    return Path(path)


def load_head(path: str, pair_name: str, hidden_sizes: tuple[int, int]) -> tuple[VerifierHead, dict[str, Any]]:
    """A trained head for this pair (DIVERSED's weight head, or a judge's when its card says so),
    or ``init`` for a fresh weight head (w = 0.5 everywhere). ``hidden_sizes``: the widths of the
    draft state (the draft model's, or an EAGLE head's) and the target's it must read."""
    if path == "init":
        return WeightHead(*hidden_sizes), {"pair": pair_name, "trained": False}
    from safetensors.torch import load_file

    folder = verifier_head_folder(path)
    if folder.is_file():
        raise BenchError(
            f"--head {folder} is a file; give the folder that holds {HEAD_FILE} and {CARD_FILE} "
            f"(here: --head {folder.parent})"
        )
    card_file = folder / CARD_FILE
    if card_file.is_file() and json.loads(card_file.read_text()).get("head") == "judge":
        card = _checked_card(folder, pair_name, hidden_sizes)
        return JudgeHead.load(folder, card), card
    if not (folder / HEAD_FILE).is_file() or not card_file.is_file():
        raise BenchError(
            f"no head at {folder} (expected {HEAD_FILE} and {CARD_FILE}); train one with "
            f"`diversed-bench train --task TASK --pair {pair_name} --output-dir {folder}`"
        )
    card = _checked_card(folder, pair_name, hidden_sizes)
    head = WeightHead(*hidden_sizes)
    head.load_state_dict(load_file(str(folder / HEAD_FILE)))
    head.drafter = trained_on(card)
    return head, card


def _checked_card(folder: Path, pair_name: str, hidden_sizes: tuple[int, int]) -> dict[str, Any]:
    card = json.loads((folder / CARD_FILE).read_text())
    if card.get("pair") != pair_name or (card.get("draft_hidden"), card.get("target_hidden")) != hidden_sizes:
        raise BenchError(
            f"head {folder} was trained for pair {card.get('pair')} "
            f"(hidden {card.get('draft_hidden')}+{card.get('target_hidden')}), not {pair_name} "
            f"({hidden_sizes[0]}+{hidden_sizes[1]}); train one for this pair"
        )
    return card


def required_head(
    path: str, pair_name: str, hidden_sizes: tuple[int, int], device: torch.device
) -> VerifierHead:
    """The head at ``path`` (a folder, or ``init``) for a pair's hidden sizes, on its device."""
    return load_head(path, pair_name, hidden_sizes)[0].to(device)
