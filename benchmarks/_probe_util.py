"""Helpers shared by the GPU probe scripts of the warp-specialised GEMM kernel (sessions 11+)."""
import statistics
import subprocess

import torch


def bench(fn, n=30):
    """Median ms of n calls (CUDA events) after 3 warm-up calls."""
    for _ in range(3):
        fn()
    ts = []
    for _ in range(n):
        s, e = torch.cuda.Event(True), torch.cuda.Event(True)
        s.record(); fn(); e.record(); e.synchronize(); ts.append(s.elapsed_time(e))
    return statistics.median(ts)


def rotated_times(variants, rnd, fn):
    """Median ms of ``fn(v)`` for each variant, timed in an order rotated by round ``rnd`` (1-based), so that no
    variant always runs first; NaN (and the error printed) where one fails."""
    times = {}
    for v in variants[rnd - 1:] + variants[:rnd - 1]:
        try:
            times[v] = bench(lambda v=v: fn(v))
        except Exception as exc:  # noqa: BLE001
            times[v] = float("nan")
            print("ERR", v, exc, flush=True)
    return times


def f32(bits):
    """The float32 with these bits (an int that fits 32 bits)."""
    return torch.tensor([bits], dtype=torch.int64).to(torch.int32).view(torch.float32).item()


def same_bits(got, want):
    """Equal bits, NaN at the same places (NaN payloads aside)."""
    nan = torch.isnan(want)
    return bool(torch.equal(torch.isnan(got), nan) and torch.equal(got.view(torch.int32)[~nan],
                                                                     want.view(torch.int32)[~nan]))


#: values a TF32 split must treat specially, scattered into A by ``tf32_a_values``
TF32_KINDS = {"inf_nan": [float("inf"), float("-inf"), float("nan")],
              "nan_low_payload": [f32(0x7F800001), f32(0xFF800FFF), f32(0x7F801000)],
              "tiny": [f32(0x00000001), f32(0x80000FFF), f32(0x00000800)],
              "saturating": [f32(0x7F7FF000), f32(0xFF7FFFFF), f32(0x7F7FF800)],
              "boundary": [f32(0x00001000), f32(0x80001000), f32(0x7F7FEFFF), f32(0xFF7FEFFF), 0.0, -0.0]}


def tf32_a_values(kind, base, gen):
    """A copy of ``base`` (M, K) holding one kind of value: "normal" (unchanged), a TF32_KINDS kind at 40
    scattered places, "random_bits" (every bit pattern) or "mixed_scale" (exponents 2^-140 to 2^120)."""
    M, K = base.shape
    if kind == "normal":
        return base
    if kind == "random_bits":
        return torch.randint(-2**31, 2**31, (M, K), generator=gen, dtype=torch.int64).to(torch.int32).view(
            torch.float32)
    if kind == "mixed_scale":
        return base * torch.exp2(torch.randint(-140, 120, (M, K), generator=gen).float())
    a = base.clone()
    vals = TF32_KINDS[kind]
    rows, cols = torch.randint(0, M, (40,), generator=gen), torch.randint(0, K, (40,), generator=gen)
    for i, (r, c) in enumerate(zip(rows, cols)):
        a[r, c] = vals[i % len(vals)]
    return a


def print_environment():
    """One line: GPU, torch, Triton and the driver (the CSVs carry the first three)."""
    driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                            capture_output=True, text=True, check=False).stdout.strip()
    print(torch.cuda.get_device_name(), torch.__version__, __import__("triton").__version__, driver, flush=True)
