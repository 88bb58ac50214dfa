"""An example entry for the training canary: your own model, optimizer, loss and data.

    preflight run --checks canary.training --set canary.training.entry=canary_entry:make_training
    (run from this directory, or put the module on PYTHONPATH: every rank imports it)

The contract: `function(device, batch_size)` returns `(model, optimizer, loss_fn, batches)`.
- model: a torch.nn.Module; the canary wraps it in DistributedDataParallel on `device`;
- optimizer: built over model.parameters();
- loss_fn(outputs, targets) -> a scalar tensor;
- batches: an iterable of (inputs, targets); inputs a tensor or a tuple of tensors (model(*inputs)).
  Use the DataLoader your training uses, so that the canary's data-wait figure describes it. The
  canary moves each batch to `device` and starts the iterable again when it runs out.
- batch_size: None for your usual batch size; a number when the canary asks for another
  (canary.training.batch_per_rank, or the search for the largest batch that fits).

This one is a small convolutional classifier on random images, read through a DataLoader with
two worker processes, as an image-classification job would.
"""

from __future__ import annotations

from typing import Any


def make_training(device: Any, batch_size: int | None) -> tuple[Any, Any, Any, Any]:
    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset

    batch = batch_size or 32
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(32, 10),
    ).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(0)
    images = torch.randn(batch * 8, 3, 32, 32, generator=generator)
    labels = torch.randint(0, 10, (batch * 8,), generator=generator)
    loader = DataLoader(TensorDataset(images, labels), batch_size=batch, shuffle=True, num_workers=2,
                        pin_memory=device.type == "cuda", persistent_workers=True, drop_last=True)
    return model, optimizer, nn.CrossEntropyLoss(), loader
