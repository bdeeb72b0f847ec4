"""Run the native library's cases (``_native_cases``) in a process where only the native library provides the
``tcemu::`` ops: ``python _native_worker.py LIBRARY CASES.pt RESULTS.pt`` (tcemu is never imported)."""

import sys

import torch

torch.set_num_threads(1)  # as the test process (tests/conftest.py)
torch.ops.load_library(sys.argv[1])

from _native_cases import run_all  # noqa: E402

results = run_all(torch.load(sys.argv[2]))
assert "tcemu" not in sys.modules, "the native worker imported tcemu"
torch.save({"results": results, "info": torch.ops.tcemu.native_info()}, sys.argv[3])
