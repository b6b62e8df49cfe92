#!/usr/bin/env python3
"""A small CUDA training script as people write them: pin_memory loader, non_blocking copies, AdamW.

``make gpu-check`` profiles it unmodified (``pipeprof profile --steps N -- python train_script.py``).
Synthetic image-shaped tensors, two DataLoader workers with pin_memory, batches copied with
``.to("cuda", non_blocking=True)``, a small conv net, mixed precision off, loss read with ``.item()``
every 20 steps (the one synchronising call real loops make for logging).
"""
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--samples", type=int, default=8192)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--num-workers", type=int, default=2)
    args = p.parse_args()
    device = torch.device("cuda")
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(args.samples, 3, 32, 32, generator=g),
                         torch.randint(0, 10, (args.samples,), generator=g))
    train_loader = DataLoader(data, batch_size=args.batch_size, shuffle=True, num_workers=args.num_workers,
                              pin_memory=True, drop_last=True)
    model = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(64, 10)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    step = 0
    for epoch in range(args.epochs):
        model.train()
        for images, labels in train_loader:
            images = images.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(images), labels)
            loss.backward()
            optimizer.step()
            step += 1
            if step % 20 == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
