"""The DIVERSED weight head: w_t = sigmoid(u . [h_draft ; h_target] + c), one dot product a token."""

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

    def logit(self, h_draft: Tensor, h_target: Tensor) -> Tensor:
        """The pre-sigmoid score [..., N]; training works with it for numerical stability."""
        h = torch.cat([h_draft, h_target], dim=-1).to(self.linear.weight.dtype)
        return self.linear(h).squeeze(-1)

    def forward(self, h_draft: Tensor, h_target: Tensor) -> Tensor:
        """Target weight w_t in (0, 1) per position, [..., N]."""
        return torch.sigmoid(self.logit(h_draft, h_target)).float()


HEAD_FILE, CARD_FILE = "head.safetensors", "card.json"


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


def head_folder(path: str) -> Path:
    """A folder path, or ``bench:RELATIVE`` for a head shipped inside the package (the reference
    pair's), so that the demo's grid works from any directory."""
    if path.startswith(PACKAGED):
        from importlib import resources

        return Path(str(resources.files("bench") / path[len(PACKAGED) :]))
    return Path(path)


def load_head(path: str, pair_name: str, hidden_sizes: tuple[int, int]) -> tuple[nn.Module, dict[str, Any]]:
    """A trained head for this pair (DIVERSED's weight head, or a judge's when its card says so),
    or ``init`` for a fresh weight head (w = 0.5 everywhere)."""
    if path == "init":
        return WeightHead(*hidden_sizes), {"pair": pair_name, "trained": False}
    from safetensors.torch import load_file

    folder = head_folder(path)
    if folder.is_file():
        raise BenchError(
            f"--head {folder} is a file; give the folder that holds {HEAD_FILE} and {CARD_FILE} "
            f"(here: --head {folder.parent})"
        )
    card_file = folder / CARD_FILE
    if card_file.is_file() and json.loads(card_file.read_text()).get("head") == "judge":
        from bench.learned.heads import JudgeHead

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
    path: str | None, method: str, pair_name: str, hidden_sizes: tuple[int, int], device: torch.device
) -> nn.Module:
    """The head a head-reading method runs with; never a silent default when none is given."""
    if path is None:
        raise BenchError(f"{method}: needs --head PATH (or --head init for an untrained w = 0.5 head)")
    return load_head(path, pair_name, hidden_sizes)[0].to(device)
