"""One launch each of BF16x6's default kernel (``128x64x64w8s3m1po``: A split beforehand, Triton kernel) at
8192^3 and on the PET-S edge shape 604,800 x 256 x 1024, for Nsight Compute (session 11, H200).

Run on the GPU machine::

    PYTHONPATH=src ncu --set full --clock-control none -k regex:_emu_mm_kernel -c 2 -o $OUT/ncu_bf16x6_po \\
        python3 benchmarks/ncu_bf16x6_po.py
    ncu --import $OUT/ncu_bf16x6_po.ncu-rep --page details > details.txt   # and --page raw --csv

Recorded: ``benchmarks/results/ncu_po_bf16x6_h200_details.txt``, ``ncu_po_bf16x6_h200_raw.csv.gz``.
"""
import sys

import torch

sys.path.insert(0, "src")
from tcemu.emulation.gemm import KernelConfig, emu_mm, split_t  # noqa: E402

for (M, K, N) in [(8192, 8192, 8192), (604800, 256, 1024)]:
    a = torch.randn(M, K, device="cuda")
    b = torch.randn(K, N, device="cuda")
    pieces = split_t(b, "bf16x6")
    out = emu_mm(a, pieces, "bf16x6", config=KernelConfig.parse("128x64x64w8s3m1po"))
    torch.cuda.synchronize()
    print(M, K, N, float(out.abs().mean()), flush=True)
