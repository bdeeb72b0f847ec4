"""Does Triton's automatic warp specialisation run on this Hopper GPU? (the GEMM issue's lead, measured)

Triton 3.6 has a Hopper warp-specialisation pass (``tl.range(..., warp_specialize=True)`` with TMA
tensor-descriptor loads, ``num_warps=4``): in an offline sm_90 compile it turns a TF32x3 K loop into a
producer warp group and two consumer warp groups (12 warps, ``setmaxnreg``), the structure that would let
one consumer's Tensor Core waits overlap the other's MMAs. This script runs, each in its own process with a
time limit (a hung kernel cannot stop the others):

* ``fp16``: a textbook FP16 TMA GEMM, with and without ``warp_specialize``;
* ``tf32x3``: the TF32x3 loop of ``tcemu``'s kernel (mode 1, A split beforehand) on TMA loads, with and
  without ``warp_specialize``, compared bit for bit with ``tcemu.emulation.gemm.emu_mm``.

    python benchmarks/hopper_ws_probe.py            # all four cases, one line each

On the H200 (Triton 3.6.0, driver 580.159.04), session 4: both cases without warp specialisation ran (the
TF32x3 one with emu_mm's bits); with it, the FP16 GEMM hung past 60 s and the TF32x3 loop raised an illegal
memory access (docs/kernels.md, section 5).
"""

from __future__ import annotations

import subprocess
import sys

import torch
import triton
import triton.language as tl


@triton.jit
def _fp16_gemm(a_d, b_d, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, WS: tl.constexpr):
    pid = tl.program_id(0)
    num_n = tl.cdiv(N, BN)
    rm = (pid // num_n) * BM
    rn = (pid % num_n) * BN
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for kt in tl.range(0, tl.cdiv(K, BK), warp_specialize=WS):
        acc = tl.dot(a_d.load([rm, kt * BK]), b_d.load([rn, kt * BK]).T, acc)
    offs_m = rm + tl.arange(0, BM)
    offs_n = rn + tl.arange(0, BN)
    tl.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], acc, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@triton.jit
def _tf32x3_loop(a0_d, a1_d, b0_d, b1_d, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                 WS: tl.constexpr):
    """tcemu's mode-1 TF32x3 tile (one program per tile, no grouping): L0 per K-tile from zero, added
    outside the Tensor Core; L1 on a running accumulator, added once, scaled by 2^-11."""
    pid = tl.program_id(0)
    num_n = tl.cdiv(N, BN)
    rm = (pid // num_n) * BM
    rn = (pid % num_n) * BN
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    c1 = tl.zeros((BM, BN), dtype=tl.float32)
    for kt in tl.range(0, tl.cdiv(K, BK), warp_specialize=WS):
        a0 = a0_d.load([rm, kt * BK])
        a1 = a1_d.load([rm, kt * BK])
        b0 = b0_d.load([rn, kt * BK]).T
        b1 = b1_d.load([rn, kt * BK]).T
        c1 = tl.dot(a0, b1, tl.dot(a1, b0, c1, input_precision="tf32"), input_precision="tf32")
        acc += tl.dot(a0, b0, input_precision="tf32", max_num_imprecise_acc=1)
    acc += tl.where(tl.abs(c1) < float("inf"), c1, 0.0) * (2.0 ** -11)
    offs_m = rm + tl.arange(0, BM)
    offs_n = rn + tl.arange(0, BN)
    tl.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], acc, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def run_case(case: str, ws: bool) -> str:
    from triton.tools.tensor_descriptor import TensorDescriptor

    M, N, K = 1024, 1024, 512
    nw = 4 if ws else 8
    if case == "fp16":
        a = torch.randn(M, K, device="cuda", dtype=torch.float16)
        b = torch.randn(N, K, device="cuda", dtype=torch.float16)
        c = torch.empty(M, N, device="cuda")
        _fp16_gemm[(triton.cdiv(M, 128) * triton.cdiv(N, 128),)](
            TensorDescriptor.from_tensor(a, [128, 64]), TensorDescriptor.from_tensor(b, [128, 64]), c, M, N, K,
            BM=128, BN=128, BK=64, WS=ws, num_warps=nw, num_stages=3)
        torch.cuda.synchronize()
        return f"max |C - A B^T| {(c - a.float() @ b.float().T).abs().max().item():.3g}"
    from tcemu.emulation.gemm import KernelConfig, emu_mm, split_t

    a = torch.randn(M, K, device="cuda")
    b = torch.randn(K, N, device="cuda")
    bt = split_t(b, "tf32x3")  # (N, K) pieces
    at = split_t(a.T.contiguous(), "tf32x3")  # (M, K) pieces of A, as the presplit kernel uses
    want = emu_mm(a, bt, "tf32x3", config=KernelConfig.parse("128x128x32w8s2m1p"))
    c = torch.empty(M, N, device="cuda")
    d = [TensorDescriptor.from_tensor(t, [128, 32]) for t in (*at, *bt)]
    _tf32x3_loop[(triton.cdiv(M, 128) * triton.cdiv(N, 128),)](*d, c, M, N, K, BM=128, BN=128, BK=32, WS=ws,
                                                               num_warps=nw, num_stages=2)
    torch.cuda.synchronize()
    return f"same bits as emu_mm: {torch.equal(c, want)}"


def main() -> None:
    if len(sys.argv) == 3:  # child process: one case
        print(run_case(sys.argv[1], sys.argv[2] == "1"), flush=True)
        return
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
    for case in ("fp16", "tf32x3"):
        for ws in (False, True):
            try:
                r = subprocess.run([sys.executable, __file__, case, str(int(ws))], capture_output=True, text=True,
                                   timeout=60, check=False)
                lines = (r.stdout.strip() or r.stderr.strip() or "no output").splitlines()
                out = lines[-1] if r.returncode == 0 else f"exit {r.returncode}: {lines[-1][:200]}"
            except subprocess.TimeoutExpired:
                out = "hung: no result in 60 s"
            print(f"{case:7s} warp_specialize={ws!s:5s} {out}", flush=True)


if __name__ == "__main__":
    main()
