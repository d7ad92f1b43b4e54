"""The DIVERSED weight head: w_t = sigmoid(u . [h_draft ; h_target] + c), one dot product a token."""

from __future__ import annotations

import torch
from torch import Tensor, nn


class WeightHead(nn.Module):
    """One linear layer on the concatenated last hidden states; starts at w = 0.5 everywhere."""

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
