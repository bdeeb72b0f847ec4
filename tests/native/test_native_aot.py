"""The native library's GEMM kernels compiled ahead of time (``tcemu.native._aot``): the build's cubins for sm_80
and sm_90a and their launch contract (CPU), what ``native_info`` reports, and on CUDA the bits of tcemu's Python
Triton path and FP32 faithfulness against FP64 (``gpu``)."""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tcemu
from tcemu.emulation.gemm import configs
from tcemu.emulation.gemm.launch import _constexprs
from tcemu.emulation.methods import get_method
from tcemu.native import _aot
from tcemu.native._build import AOT_DIR
from tcemu.testing import assert_fp32_faithful

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import _aot_cases  # noqa: E402
import _native_cases  # noqa: E402
from test_native_ops import _differences  # noqa: E402

VARIANTS = {"split": ["-"], "gemm": [f"bias{b}.align{a}" for b in (0, 1) for a in (0, 1)],
            "fixup": ["bias0.pieces0", "bias1.pieces0", "bias0.pieces1"]}
NAMES = {"split": "_split_t_kernel", "gemm": "_emu_mm_kernel", "fixup": "_range_fixup_kernel"}


def _index(library: Path) -> tuple[dict, bytes]:
    aot = library.parent / AOT_DIR
    return json.loads((aot / _aot.INDEX).read_text()), (aot / _aot.BLOB).read_bytes()


def _cubin_arch(cubin: bytes) -> int:
    """The SM version in a CUDA ELF's flags (ELF ABI version 7: the low byte; 8 and later: the next one)."""
    assert cubin[:4] == b"\x7fELF" and struct.unpack_from("<H", cubin, 18)[0] == 190  # EM_CUDA
    flags = struct.unpack_from("<I", cubin, 48)[0]
    return flags & 0xFF if cubin[8] < 8 else (flags >> 8) & 0xFF


def test_the_build_compiles_every_kernel_for_sm80_and_sm90a(native_library):
    index, blob = _index(native_library)
    assert index["kernels"], index["status"]  # Triton is installed here: the build must have compiled them
    import triton

    assert index["triton"] == triton.__version__
    want = {f"sm{arch}/{m}/{kind}/{v}" for arch in (80, 90) for m in _aot.METHODS for kind, vs in VARIANTS.items()
            for v in vs}
    assert {k["key"] for k in index["kernels"]} == want
    offset = 0
    for k in index["kernels"]:
        cubin = blob[offset:offset + k["cubin_bytes"]]
        offset += (k["cubin_bytes"] + 15) // 16 * 16
        flags = struct.unpack_from("<I", cubin, 48)[0]
        assert _cubin_arch(cubin) == k["arch"], (k["key"], "ELF ABI", cubin[8], hex(flags))
        assert k["name"] == NAMES[k["kind"]]
        # the launch contract: each argument a PTX parameter of its width, then Triton's scratch pointers
        assert len(k["params"]) == len(k["args"]) + len(k["extra"]), k["key"]
        for (_, ty), p in zip(k["args"], k["params"]):
            assert p == ("ptr" if ty.startswith("*") else {"i32": "u32", "i64": "u64"}[ty]), (k["key"], ty, p)
        assert all(p == "ptr" for p in k["params"][len(k["args"]):])
        assert not (k["cooperative"] or k["pdl"]) and k["num_ctas"] == 1
        # (a kernel without a dot, such as the split, may need no shared memory: Triton 3.6 reports 0 for it)
        assert (0 if k["kind"] == "split" else 1) <= k["shared"] <= (227 if k["arch"] == 90 else 163) * 1024, \
            (k["key"], k["shared"])
        if k["arch"] == 80 and "align1" not in k["variant"]:  # the general kernels run on every sm_8x (99 KiB)
            assert k["shared"] <= 99 * 1024, (k["key"], k["shared"])
        if k["kind"] == "gemm":
            t = _aot.GEMM_TILES[k["arch"], k["method"]]
            assert k["tiles"] == [t.bm, t.bn, t.bk] and k["num_warps"] == t.warps
    assert offset == len(blob)


def _cuobjdump() -> Path | None:
    try:
        import triton
    except ImportError:
        return None
    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    return tool if tool.is_file() else None


def test_each_cubin_takes_the_parameters_and_threads_the_launcher_passes(native_library, tmp_path):
    """The cubins' own parameter tables (``cuobjdump -elf``: ordinal, offset, size per parameter) and thread
    counts against the contract the C++ launcher follows: every argument 8 bytes (pointer, int64) or 4 (int32) in
    order, then Triton's scratch pointers, and 32 threads per warp."""
    tool = _cuobjdump()
    if tool is None:
        pytest.skip("Triton's cuobjdump is not installed")
    index, blob = _index(native_library)
    offset = 0
    for k in index["kernels"]:
        cubin = tmp_path / "k.cubin"
        cubin.write_bytes(blob[offset:offset + k["cubin_bytes"]])
        offset += (k["cubin_bytes"] + 15) // 16 * 16
        elf = subprocess.run([str(tool), "-elf", str(cubin)], capture_output=True, text=True, timeout=60).stdout
        table = sorted((int(o, 16), int(at, 16), int(sz, 16)) for o, at, sz in re.findall(
            r"Ordinal\s*:\s*(0x[0-9a-f]+)\s+Offset\s*:\s*(0x[0-9a-f]+)\s+Size\s*:\s*(0x[0-9a-f]+)", elf))
        sizes = [4 if ty == "i32" else 8 for _, ty in k["args"]] + [8] * len(k["extra"])
        assert [o for o, _, _ in table] == list(range(len(sizes))), k["key"]
        assert [sz for _, _, sz in table] == sizes, k["key"]
        threads = re.search(r"EIATTR_REQNTID\s+Format:\s*\w+\s+Value:\s*(0x[0-9a-f]+)", elf)
        assert threads and int(threads.group(1), 16) == 32 * k["num_warps"], k["key"]


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1", reason="the interpreter's configuration differs")
@pytest.mark.parametrize("method", _aot.METHODS)
def test_the_gemm_kernels_keep_the_python_paths_k_tile_and_mode(method):
    """The bits depend on the K-tile and the correction-level mode, not on the tiles of C, warps or stages: every
    configuration the Python path picks for the method (each bucket's first) has the ahead-of-time kernels' K-tile
    and mode, and every autotuning candidate their K-tile."""
    spec = get_method(method)
    for arch in _aot.ARCHS:
        t = _aot.GEMM_TILES[arch, method]
        for bucket, candidates in configs._CANDIDATES[method].items():
            for i, cfg in enumerate(candidates):
                c = _constexprs(spec, cfg, 4096, False)
                assert c["BK"] == t.bk, (arch, bucket, str(cfg))
                assert i > 0 or c["MODE"] == t.mode, (arch, bucket, str(cfg))
        for M, N, K in ((64, 64, 64), (2048, 512, 512), (8192, 8192, 8192), (2048, 256, 4096), (4096, 768, 256)):
            c = _constexprs(spec, configs.pick_config(spec, M, N, K), K, False)
            assert (c["BK"], c["MODE"]) == (t.bk, t.mode)


def test_native_info_reports_the_kernels(native_library):
    import triton

    code = "import sys, torch; torch.ops.load_library(sys.argv[1]); print(torch.ops.tcemu.native_info())"
    done = subprocess.run([sys.executable, "-c", code, str(native_library)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    info = done.stdout
    assert f"64 kernels compiled by Triton {triton.__version__} for sm_80, sm_90a" in info, info
    assert "methods bf16x3 bf16x6 bf16x9 tf32x3" in info and "reference on CUDA" not in info


def test_without_triton_the_source_holds_no_kernel_and_says_why(tmp_path):
    code = ("import sys; sys.modules['triton'] = None\n"
            "from pathlib import Path\nfrom tcemu.native._aot import generate\nprint(generate(Path(sys.argv[1])))")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120,
                          env=os.environ | {"PYTHONPATH": str(HERE.parents[1] / "src")})
    assert done.returncode == 0, done.stderr[-2000:]
    source = Path(done.stdout.strip()).read_text()
    assert "kKernelCount = 0;" in source and "Triton was not importable" in source
    assert json.loads((tmp_path / _aot.INDEX).read_text())["kernels"] == []


def test_generate_is_incremental(native_library):
    """An up-to-date build compiles nothing: the generated source is not written again."""
    source = native_library.parent / AOT_DIR / _aot.SOURCE
    before = source.stat().st_mtime_ns
    assert _aot.generate(source.parent) == source
    assert source.stat().st_mtime_ns == before


def test_the_small_shape_thresholds_are_tcemus(native_library, tmp_path):
    """The row thresholds the library's CUDA products use (the shipped measured tables, else the FLOP rule) are
    those of tcemu's Python Triton backend, measured (N, K), nearby and far ones, on a GPU with a table and one
    without."""
    from tcemu.emulation.gemm.decision import ROLES, row_threshold, shipped_tables

    tables = shipped_tables()
    assert tables, "tcemu ships no measured table: nothing to compare but the FLOP rule"
    queries = []
    for device, table in [*tables.items(), ("a GPU without a table", next(iter(tables.values())))]:
        sizes = sorted({n for (_, _, n, k) in table.curves} | {k for (_, _, n, k) in table.curves})
        extra = [1, 7, 100, 3000, 65536] + [int(x * f) for x in sizes for f in (0.6, 1.3, 1.9, 2.1)]
        for method in _aot.METHODS:
            for role in ROLES:
                for N in sizes + extra[:5]:
                    for K in sizes[::2] + extra[::7]:
                        queries.append((device, method, role, max(N, 1), max(K, 1)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TCEMU_SMALL_SHAPE")}
    torch.save(queries, tmp_path / "q.pt")
    code = ("import sys, torch; torch.ops.load_library(sys.argv[1]); q = torch.load(sys.argv[2]); "
            "torch.save([torch.ops.tcemu.native_row_threshold(*x) for x in q], sys.argv[3])")
    done = subprocess.run([sys.executable, "-c", code, str(native_library), str(tmp_path / "q.pt"),
                           str(tmp_path / "r.pt")], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    native = torch.load(tmp_path / "r.pt")
    want = [row_threshold(tables.values(), *q, 0.05, 6e9)[0] for q in queries]
    wrong = [(q, n, w) for q, n, w in zip(queries, native, want) if n != w]
    assert not wrong, wrong[:10]
    assert len(set(want)) > 20  # measured, transferred and FLOP-rule thresholds, not one value


def _native_cuda(library: Path, cases: dict, tmp_path: Path, fallback: bool) -> dict:
    torch.save(cases, tmp_path / "cases.pt")
    env = os.environ | {"TCEMU_SMALL_SHAPE_FALLBACK": "1" if fallback else "0"}
    done = subprocess.run([sys.executable, str(HERE / "_native_worker.py"), str(library), str(tmp_path / "cases.pt"),
                           str(tmp_path / "results.pt"), "cuda", "0"], capture_output=True, text=True, timeout=600,
                          env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return torch.load(tmp_path / "results.pt")


@pytest.mark.gpu
@pytest.mark.parametrize("fallback", [False, True], ids=["kernels", "small-shape-rule"])
def test_cuda_kernels_have_the_bits_of_the_python_triton_path(native_library, tmp_path, fallback):
    """Backend "triton" on CUDA, only the native library loaded: the ahead-of-time kernels give the bits of tcemu's
    Python Triton path (forward, backward, double backward; odd sizes, strided, batched, broadcast, Inf/NaN and
    top-of-range rows; large products, which the Python path runs with its Gluon kernels on Hopper), with the
    small-shape fallback off (every product by the kernels) and on (the GPU's measured table or the FLOP rule
    sending small products to SGEMM on both sides); the kernels' plain products FP32-faithful against FP64."""
    cases = _aot_cases.cases(large=True)
    native = _native_cuda(native_library, cases, tmp_path, fallback)
    assert "64 kernels compiled by Triton" in native["info"] and "reference on CUDA" not in native["info"], \
        native["info"]
    with tcemu.config(small_shape_fallback=fallback):
        want = _native_cases.run_all(cases, "cuda")
    compared, wrong = _differences(native["results"], want)
    assert not wrong, wrong
    assert compared > 150
    if not fallback:  # (with the small-shape rule these products are cuBLAS SGEMM's on both sides, whose partial
        # sums can overflow in top-of-range rows: FP32 matmul's own NaN where FP64 has an Inf)
        for name, (a, b, method) in _aot_cases.products().items():
            assert_fp32_faithful(native["results"][name][0], a, b, method)
