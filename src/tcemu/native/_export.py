"""``tcemu.native.export_script``: save a TorchScript model with its products rewritten to ``tcemu::`` calls."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tempfile
import zipfile
from pathlib import Path

import torch
from torch import nn

__all__ = ["export_script", "extra_files", "saved_code"]


def extra_files(path: str | os.PathLike) -> dict[str, str]:
    """The extra files of a saved TorchScript archive (metatomic keeps its metadata there), by name."""
    out = {}
    with zipfile.ZipFile(path) as archive:
        for name in archive.namelist():
            parts = name.split("/")
            if len(parts) == 3 and parts[1] == "extra":
                out[parts[2]] = archive.read(name).decode()
    return out


def saved_code(path: str | os.PathLike) -> str:
    """The TorchScript code of a saved archive (its ``code/`` files), joined."""
    with zipfile.ZipFile(path) as archive:
        return "\n".join(archive.read(n).decode() for n in archive.namelist()
                         if "/code/" in n and n.endswith(".py"))


def _saved_file(model: nn.Module | str | os.PathLike, workdir: str) -> Path:
    """A saved TorchScript file of ``model`` (the file itself when given a path)."""
    if isinstance(model, (str, os.PathLike)):
        return Path(model)
    path = Path(workdir) / "model.pt"
    if isinstance(model, torch.jit.ScriptModule):
        torch.jit.save(model, str(path))
    elif hasattr(model, "save") and type(model).__module__.startswith("metatomic"):
        model.save(str(path))  # a metatomic AtomisticModel: scripted and saved with its metadata
    elif isinstance(model, nn.Module):
        try:
            torch.jit.save(torch.jit.script(model), str(path))
        except Exception as exc:  # noqa: BLE001 - TorchScript's many error types
            raise TypeError(f"tcemu.native.export_script: {type(model).__name__} cannot be scripted "
                            f"({str(exc).splitlines()[0]}); pass a TorchScript module or a saved .pt") from None
    else:
        raise TypeError(f"tcemu.native.export_script takes a TorchScript module, an nn.Module or a path, got "
                        f"{type(model).__name__}")
    return path


def _extension_entry(library: str | os.PathLike, collect: str | os.PathLike | None) -> dict[str, str]:
    """The native library as metatomic lists an extension of a model (``load_model_extensions`` loads it): by its
    absolute path, or copied into the directory ``collect`` and listed relative to it (an engine given that
    directory as its extensions directory finds it there, on any machine)."""
    path = Path(library).resolve()
    listed = str(path)
    if collect is not None:
        relative = Path("tcemu") / path.name
        (Path(collect) / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, Path(collect) / relative)
        listed = str(relative)
    return {"name": path.name.removeprefix("lib").removesuffix(".so"),
            "sha256": hashlib.sha256(path.read_bytes()).hexdigest(), "path": listed}


def export_script(model, method: str, path: str | os.PathLike, *, backend: str = "torch",
                  grad_weight_method: str | None = None, native_library: str | os.PathLike | None = None,
                  collect_extensions: str | os.PathLike | None = None) -> dict[str, int]:
    """See :func:`tcemu.native.export_script`."""
    import tcemu  # noqa: PLC0415
    from tcemu.emulation.script import rewritten_ops  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as workdir:
        source = _saved_file(model, workdir)
        extras = extra_files(source)
        if "metatomic-version" in extras:
            import metatomic.torch  # noqa: F401, PLC0415 - the metatomic types the archive refers to
        loaded = torch.jit.load(str(source), map_location="cpu")
        tcemu.emulate_(loaded, method, grad_weight_method=grad_weight_method, backend=backend,
                       warn_unreachable=False)
        counts = rewritten_ops(loaded)
        if not counts:
            raise ValueError("tcemu.native.export_script: the model has no float32 product that tcemu rewrites "
                             "(nothing to emulate); tcemu.unreachable_layers(model) says what it runs instead")
        if native_library is not None:
            if "extensions" not in extras:
                raise ValueError("tcemu.native.export_script: native_library lists the library among a metatomic "
                                 "model's extensions; this model is not a metatomic export (load the library "
                                 "with torch.ops.load_library instead)")
            listed = [e for e in json.loads(extras["extensions"]) if e.get("name") != "tcemu_native"]
            extras["extensions"] = json.dumps([*listed, _extension_entry(native_library, collect_extensions)])
        elif collect_extensions is not None:
            raise ValueError("tcemu.native.export_script: collect_extensions needs native_library (the library to "
                             "copy there)")
        buffer = io.BytesIO()
        torch.jit.save(loaded, buffer, _extra_files=extras)
    Path(path).write_bytes(buffer.getvalue())
    code = saved_code(path)
    missing = [op for op in counts if f"ops.{op.replace('::', '.')}(" not in code]
    if missing:  # the saved code is printed from the rewritten graphs; this would be a tcemu bug
        raise RuntimeError(f"tcemu.native.export_script: the saved code of {path} does not call {missing}")
    return counts
