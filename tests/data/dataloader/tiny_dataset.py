"""A dataset factory of the shape dataloader.dataset expects ("tiny_dataset:make"), for tests.

Each sample is decoded and augmented in Python (a random crop and flip of a generated image),
standing in for a team's own decoding cost.
"""

from __future__ import annotations


class TinyImages:
    def __init__(self, count: int, size: int) -> None:
        self.count = count
        self.size = size

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int):
        import torch

        generator = torch.Generator().manual_seed(index)
        image = torch.randint(0, 256, (3, self.size + 4, self.size + 4), dtype=torch.uint8, generator=generator)
        top, left = (int(v) for v in torch.randint(0, 5, (2,), generator=generator))
        crop = image[:, top:top + self.size, left:left + self.size].float().div_(255)
        if index % 2:
            crop = crop.flip(-1)
        return crop, index % 10


def make(count: int = 256, size: int = 32) -> TinyImages:
    return TinyImages(count, size)


def broken(count: int = 1):
    raise RuntimeError("the dataset index file is missing")


NOT_CALLABLE = 3
