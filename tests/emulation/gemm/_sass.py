"""SASS reading for the kernel tests: disassembly by Triton's nvdisasm, and the check that no instruction of a
loop writes a register that a still-pending ``HGMMA`` reads as its A operand (``wgmma`` reads register operands
asynchronously, until the ``WARPGROUP.DEPBAR`` that retires its group)."""

from __future__ import annotations

import os
import re
import subprocess
import tempfile


def triton_tool(name: str) -> str | None:
    """The path of a CUDA binary tool Triton ships (``nvdisasm``, ``cuobjdump``), or None where it is not there."""
    import triton

    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)
    return tool if os.path.exists(tool) else None


def disassemble(cubin: bytes) -> list[str] | None:
    """The instructions of a cubin (comments and addresses removed), or None without Triton's nvdisasm."""
    tool = triton_tool("nvdisasm")
    if tool is None:
        return None
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([tool, "-c", f.name], capture_output=True, text=True, check=True).stdout
    lines = (re.sub(r"\s*/\*[0-9a-f]*\*/\s*", " ", line).strip() for line in out.splitlines())
    return [line for line in lines if line]


def _register(token: str) -> int | None:
    m = re.match(r"R(\d+)$", token.strip())
    return int(m.group(1)) if m else None


def _written(line: str) -> set[int]:
    """Registers an instruction writes (its first operand; vector loads write 2 or 4)."""
    parts = line.split()
    if parts and parts[0].startswith("@"):  # predicate
        parts = parts[1:]
    if len(parts) < 2:
        return set()
    op, first = parts[0], parts[1].rstrip(",;")
    r = _register(first)
    if r is None or op.startswith(("ST", "BRA", "HGMMA", "WARPGROUP", "BAR", "SYNCS", "RED", "ATOM")):
        return set()
    width = 4 if (".128" in op or op.startswith("LDSM.16.M88.4")) else 2 if (".64" in op or "WIDE" in op) else 1
    return set(range(r, r + width))


def loops(sass: list[str]) -> list[list[str]]:
    """The bodies of the backward branches' loops that hold an ``HGMMA``."""
    labels = {line[:-1]: i for i, line in enumerate(sass) if re.fullmatch(r"\.L_x_\d+:", line)}
    bodies = []
    for i, line in enumerate(sass):
        m = re.search(r"BRA `\((\.L_x_\d+)\)", line)
        if m and labels.get(m.group(1), i) < i:
            body = sass[labels[m.group(1)]:i + 1]
            if any("HGMMA" in x for x in body):
                bodies.append(body)
    return bodies


def register_a_hazards(body: list[str], passes: int = 3) -> list[str]:
    """Instructions of a loop body (run ``passes`` times in a row, pending groups carried over the back edge)
    that write a register a pending ``HGMMA`` reads as its A operand (4 registers from the one named)."""
    pending: list[set[int]] = []
    group: set[int] = set()
    found = []
    for _ in range(passes):
        for line in body:
            op = line.split()[1] if line.startswith("@") else line.split()[0]
            if op.startswith("WARPGROUP.ARRIVE"):
                group = set()
            elif op.startswith("HGMMA"):
                operands = [x.strip(" ,;") for x in line.split(None, 1)[1].split(",")]
                a = _register(operands[1])
                if a is not None:
                    group |= set(range(a, a + 4))
                if "gsb0" in line:
                    pending.append(group)
                    group = set()
            elif op.startswith("WARPGROUP.DEPBAR"):
                keep = int(line.rsplit("0x", 1)[1].strip(" ;"), 16)
                pending = pending[len(pending) - keep:] if keep else []
            elif any(_written(line) & g for g in pending):
                found.append(line)
    return found
