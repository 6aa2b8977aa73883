"""Fulcrum from Python: fulcrum.torch makes a PyTorch script a Fulcrum worker.

The native library (libfulcrum.so, the worker's C API) is found next to this
package, or where $FULCRUM_LIB points.
"""

from fulcrum._native import FulcrumError, GenerationEnded, api_version

__all__ = ["FulcrumError", "GenerationEnded", "api_version"]
__version__ = "0.1.0"
