"""tcemu: FP32 science on Tensor Cores without losing FP32 accuracy."""
__version__ = "0.1.0"
