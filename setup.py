"""The optional C extension (``streamsafe._native``); everything else is in ``pyproject.toml``.

Without a C compiler the install still succeeds, and streamsafe makes the same driver calls
through ``ctypes`` instead (``streamsafe doctor`` says which it uses).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("streamsafe._native", ["streamsafe/_native.c", "streamsafe/_replay.c"], depends=["streamsafe/_replay.h"], optional=True)])
