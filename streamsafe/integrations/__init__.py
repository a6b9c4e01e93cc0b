"""streamsafe with other frameworks; each integration is its own module and its own extra.

* :mod:`streamsafe.integrations.ray`: one guarded decode -> effect pipeline per Ray worker
  (``pip install 'streamsafe[ray]'``).

Importing this package imports no integration (and ``import streamsafe`` imports neither).
"""
