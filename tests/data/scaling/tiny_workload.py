"""A team's own model as scaling.workload = "tiny_workload:make" (put this directory on PYTHONPATH).

A small convolutional classifier with a cross-entropy loss, to exercise the (model, make_batch,
loss_fn) contract of preflight.workers.ddp_scaling.
"""

import torch
import torch.nn as nn

CLASSES = 10


def make(batch_size: int, device: torch.device):
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(8 * 16, CLASSES),
    )
    generator = torch.Generator().manual_seed(7)
    images = torch.randn(batch_size, 3, 16, 16, generator=generator).to(device)
    labels = torch.randint(0, CLASSES, (batch_size,), generator=generator).to(device)

    def make_batch():
        return images

    def loss_fn(logits):
        return nn.functional.cross_entropy(logits, labels)

    return model, make_batch, loss_fn
