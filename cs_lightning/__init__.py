"""cs_lightning: Cerebras semantics inside PyTorch Lightning.

Importing this package registers the ``"csx"`` accelerator and strategy with
Lightning, so ``Trainer(strategy="csx")`` works after ``import cs_lightning``.
"""

__version__ = "0.1.0"
