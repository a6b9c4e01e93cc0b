"""The tools: the ``streamsafe`` command line (:mod:`~streamsafe.tools.cli`), its ``doctor``,
``hazards`` (the hazard matrix) and ``run`` (guard an unmodified program) commands. The bench
harness is :mod:`streamsafe.bench`."""
