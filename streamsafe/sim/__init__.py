"""The model: CUDA's ordering rules in pure Python, with real (NumPy) data.

* :mod:`~streamsafe.sim.backend`: :class:`SimBackend` (streams, events, host syncs, a caching
  allocator, vector clocks), built on :mod:`~streamsafe.sim.engine` (issuing and running operations,
  race checks), :mod:`~streamsafe.sim.ops` (:class:`Op`, :class:`SimEvent`) and
  :mod:`~streamsafe.sim.memory` (:class:`SimBuffer`, :class:`SimArray`, :class:`SimCapsule`);
* :mod:`~streamsafe.sim.schedule`: which ready operation runs next (in order, random, adversarial);
* :mod:`~streamsafe.sim.clocks` and :mod:`~streamsafe.sim.races`: happens-before and race reports;
* :mod:`~streamsafe.sim.mirror`: the model fed by hooks from real GPU calls (sanitize mode), which also
  hears of torch's ops (:mod:`~streamsafe.sim.torch_observer`) and of the program's own host
  synchronisations and event calls (:mod:`~streamsafe.sim.sync_hooks`, wrapped by
  :mod:`~streamsafe.sim.patching` while sanitize mode is on).

Nothing here needs a GPU, and the CUDA backend imports nothing of it. Importing it registers the
model as the backend used where no GPU is present (:func:`streamsafe.backend.register_fallback`) and
the mirror as sanitize mode's observer for ``STREAMSAFE_SANITIZE=1``.
"""

from ..backend import register_fallback
from . import mirror as mirror
from .backend import Op, SimArray, SimBackend, SimBuffer, SimCapsule, SimEvent
from .clocks import HOST, VectorClock, is_ordered_after
from .races import Access, Race
from .sanitize import sanitize
from .schedule import AdversarialScheduler, ChoiceScheduler, InOrderScheduler, RandomScheduler

register_fallback(SimBackend)

__all__ = [
    "HOST",
    "Access",
    "AdversarialScheduler",
    "ChoiceScheduler",
    "InOrderScheduler",
    "Op",
    "Race",
    "RandomScheduler",
    "SimArray",
    "SimBackend",
    "SimBuffer",
    "SimCapsule",
    "SimEvent",
    "VectorClock",
    "is_ordered_after",
    "sanitize",
]
