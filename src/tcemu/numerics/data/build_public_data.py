"""Rebuild ``toolbox_hw.npz`` from the shared dataset (developer tool; needs ../shared/datasets).

Usage: ``python src/tcemu/numerics/data/build_public_data.py /path/to/datasets/tensor-core-public``

Packs the Khattak & Mikaitis toolbox hardware samples (BSD-2-Clause, see LICENSE-toolbox-data.txt)
into one compressed file: identical arrays (inputs shared between GPUs, L40S = Ada, the H100/H200
FP8 d files) are stored once; ``index`` (a JSON string) maps ``"<gpu>/<case>/<field>"`` to the key
of the stored array. Every case is checked to round-trip exactly.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np

FIELDS = ("a", "b", "c", "d", "c_as_fp16")


def build(src: Path, dst: Path) -> None:
    arrays: dict[str, np.ndarray] = {}
    by_hash: dict[str, str] = {}
    index: dict[str, object] = {}
    for path in sorted(src.glob("*.npz")):
        z = np.load(path)
        gpu = str(z["gpu"])
        for case in map(str, z["cases"]):
            fin, fout = case.split("_")
            entry = {"api": str(z[f"{case}_api"]), "c_applied": bool(z[f"{case}_c_applied"])}
            for field in FIELDS:
                name = f"{fin}_fp16_c_as_fp16" if field == "c_as_fp16" else f"{case}_{field}"
                if field == "c_as_fp16" and fout != "fp16":
                    continue
                arr = z[name]
                h = hashlib.sha256(arr.dtype.str.encode() + str(arr.shape).encode() + arr.tobytes()).hexdigest()
                if h not in by_hash:
                    by_hash[h] = f"x{len(by_hash)}"
                    arrays[by_hash[h]] = arr
                entry[field] = by_hash[h]
            index[f"{gpu}/{case}"] = entry
    meta = {"source": "github.com/north-numerical-computing/MATLAB-tensor-core @ b12b5a700957655375a1b0c1d0c26e76065da015, "
                      "model_validation/ (via tensor-core-public/*.npz)", "cases": index}
    np.savez_compressed(dst, index=np.array(json.dumps(meta)), **arrays)
    # round-trip check
    back = np.load(dst)
    meta2 = json.loads(str(back["index"]))
    for path in sorted(src.glob("*.npz")):
        z = np.load(path)
        gpu = str(z["gpu"])
        for case in map(str, z["cases"]):
            e = meta2["cases"][f"{gpu}/{case}"]
            for field in ("a", "b", "c", "d"):
                assert np.array_equal(back[e[field]], z[f"{case}_{field}"]) and back[e[field]].dtype == z[f"{case}_{field}"].dtype
    print(f"wrote {dst} ({dst.stat().st_size} bytes, {len(arrays)} arrays, {len(index)} cases)")


if __name__ == "__main__":
    src = Path(sys.argv[1] if len(sys.argv) > 1 else "../shared/datasets/tensor-core-public")
    build(src, Path(__file__).with_name("toolbox_hw.npz"))
