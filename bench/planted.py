"""tools/make_ctr_data as a module (it is a script without a .py name): the
planted click model's generator, for the benches that reason about it."""
import importlib.machinery
import importlib.util
import os

_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "make_ctr_data")
_loader = importlib.machinery.SourceFileLoader("make_ctr_data", _PATH)
generator = importlib.util.module_from_spec(importlib.util.spec_from_loader("make_ctr_data", _loader))
_loader.exec_module(generator)
