"""Running under ``torchrun`` or ``accelerate launch``: one rank per GPU, each with both models."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Launch:
    """This process's place in a launch. Ranks share nothing but a final barrier."""

    rank: int
    world_size: int
    device: str | None  # where this rank loads models; None keeps the configured device

    @classmethod
    def from_env(cls, device: str) -> Launch:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world == 1:
            return cls(0, 1, None)
        rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
        use_cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
        import torch.distributed as dist

        if not dist.is_initialized():
            dist.init_process_group("nccl" if use_cuda else "gloo")
        return cls(rank, world, f"cuda:{local}" if use_cuda else "cpu")

    def finish(self) -> None:
        """Wait for every rank, so rank 0 reports on complete results."""
        if self.world_size > 1:
            import torch.distributed as dist

            dist.barrier()
            dist.destroy_process_group()
