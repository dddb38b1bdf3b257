"""turbo_physai: declared, checked, reversible runtime optimizations for PyTorch perception models.

Importing this package never imports torch; only the operators in ``turbo_physai.ops`` need it.
"""

__version__ = "0.1.0"
