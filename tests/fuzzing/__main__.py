"""``PYTHONPATH=. python -m tests.fuzzing``: the fuzzer's command line (:func:`tests.fuzzing.cli.main`)."""

import sys

from .cli import main

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
