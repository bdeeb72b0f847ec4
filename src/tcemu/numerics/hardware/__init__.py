"""Hardware side of ``tcemu.numerics``: Tensor Core runners, the probe, the validation driver, the replay set.

- :mod:`.cases`: the instructions issued (mma.sync m16n8k{4,8,16,32}, wgmma m64n8k{8,16,32}) and their formats.
- :mod:`.runner`: compile-once CUDA library (inline PTX), ctypes calls on raw bits, SASS check, device info.
- :mod:`.probe_vectors`, :mod:`.hypothesis`, :mod:`.probe`: crafted vector families, an exact hypothesis space,
  and the inference of every parameter from the hardware's answers (``tcemu probe``).
- :mod:`.families`, :mod:`.validate`: random input families and the pipelined GPU/CPU validation
  (``tcemu validate``).
- :mod:`.replay`: the stored H200 samples (``data/h200_replay.npz``) checked against the model on any CPU.

Only :mod:`.runner` (and what calls it) needs a GPU; everything else runs on the CPU.
"""
