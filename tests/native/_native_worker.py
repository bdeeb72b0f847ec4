"""Run the native library's cases (``_native_cases``) in a process where only the native library provides the
``tcemu::`` ops: ``python _native_worker.py LIBRARY CASES.pt RESULTS.pt [DEVICE [TF32]]`` (tcemu is never
imported). ``TF32``: ``1`` allows TF32 in cuBLAS globally (the emulated products must not use it)."""

import sys

import torch

torch.set_num_threads(1)  # as the test process (tests/conftest.py)
torch.ops.load_library(sys.argv[1])

from _native_cases import run_all  # noqa: E402

device = sys.argv[4] if len(sys.argv) > 4 else "cpu"
if len(sys.argv) > 5 and sys.argv[5] == "1":
    torch.backends.cuda.matmul.fp32_precision = "tf32"
results = run_all(torch.load(sys.argv[2]), device)
assert "tcemu" not in sys.modules, "the native worker imported tcemu"
torch.save({"results": results, "info": torch.ops.tcemu.native_info()}, sys.argv[3])
