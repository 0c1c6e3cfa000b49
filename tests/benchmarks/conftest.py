"""Benchmarks time full-size models: give torch every core (the shared test setup pins one thread)."""

import os

import torch

torch.set_num_threads(os.cpu_count() or 1)
