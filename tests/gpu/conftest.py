"""GPU-lane helpers: a slow writer and a reader on other streams, with real kernels."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def torch_cuda():  # type: ignore[no-untyped-def]
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    torch.cuda.init()
    return torch


@pytest.fixture(scope="session")
def cuda_backend():  # type: ignore[no-untyped-def]
    from streamsafe.backend.cuda import CudaBackend

    return CudaBackend()


CYCLES_PER_US = 1980  # H200 SM clock under load (measured on the lent H200)
