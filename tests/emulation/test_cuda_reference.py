"""The library on a CUDA device (GPU machine): reference backend, auto backend, module swap, precision flags."""

import pytest
import torch

import tcemu
from tcemu.emulation.reference import cuda_fp32_precision
from tcemu.testing import make_inputs, normwise_bound, relative_errors

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("name", ["fp32", "tf32x3", "bf16x3", "bf16x6", "bf16x9"])
@pytest.mark.parametrize("backend", ["torch", "auto"])
def test_matmul_on_cuda_within_the_error_model(name, backend):
    a, b = make_inputs(192, 1024, 160, "normal", seed=4, device="cuda")
    c = tcemu.matmul(a, b, name, backend=backend)
    assert c.is_cuda
    err, _ = relative_errors(c.cpu(), a.double().cpu() @ b.double().cpu())
    assert err <= normwise_bound(name, 1024)


def test_tf32_on_cuda_is_the_cublas_tf32_baseline():
    a, b = make_inputs(256, 1024, 256, "normal", seed=5, device="cuda")
    err, _ = relative_errors(tcemu.matmul(a, b, "tf32").cpu(), a.double().cpu() @ b.double().cpu())
    assert 1e-4 < err < 1e-3


def test_fp32_method_ignores_a_global_tf32_setting_and_restores_it():
    matmul = torch.backends.cuda.matmul
    old = matmul.fp32_precision
    matmul.fp32_precision = "tf32"
    try:
        a, b = make_inputs(256, 2048, 256, "normal", seed=6, device="cuda")
        err, _ = relative_errors(tcemu.matmul(a, b, "fp32").cpu(), a.double().cpu() @ b.double().cpu())
        assert err < 1e-5, "fp32 must not run as TF32"
        assert matmul.fp32_precision == "tf32"
        with cuda_fp32_precision("ieee"):
            assert matmul.fp32_precision == "ieee"
        assert matmul.fp32_precision == "tf32"
    finally:
        matmul.fp32_precision = old


def test_swapped_model_on_cuda_with_gradients():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.SiLU(), torch.nn.Linear(512, 1)).cuda()
    x = torch.randn(4096, 256, device="cuda", requires_grad=True)
    ref_model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.SiLU(), torch.nn.Linear(512, 1)).double().cuda()
    ref_model.load_state_dict(model.state_dict())
    x64 = x.detach().double().requires_grad_()
    e64 = ref_model(x64).sum()
    (f64,) = torch.autograd.grad(e64, x64)
    tcemu.emulate_(model, "tf32x3")
    e = model(x).sum()
    (f,) = torch.autograd.grad(e, x)
    assert relative_errors(f.cpu(), f64.cpu())[0] < 1e-5
