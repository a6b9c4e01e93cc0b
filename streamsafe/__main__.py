import sys

from .tools.cli import entry

sys.exit(entry())
