"""The emulated SDK's input copy (``streamsafe.testing._engines._CopyLauncher``) through ``ctypes``.

No GPU here: the driver's ``cuLaunchKernel`` is a stand-in (a ctypes callback that logs its
arguments) called through the prototype ``streamsafe.backend._held`` gives the real one.
"""

from __future__ import annotations

import contextlib
import ctypes
import types

_U = ctypes.c_uint
_LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, _U, _U, _U, _U, _U, _U, _U, ctypes.c_void_p,
                           ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)


class _Launches:
    """A stand-in ``cuLaunchKernel``: logs each launch; ``fail`` is the CUresult it returns."""

    def __init__(self) -> None:
        self.log: list[tuple[object, ...]] = []
        self.fail = 0

        def launch(f: int, gx: int, gy: int, gz: int, bx: int, by: int, bz: int, shared: int, stream: int, params: object,
                   extra: object) -> int:
            # the copy kernels take three 64-bit arguments per pair, one pair per grid row
            values = tuple(ctypes.c_uint64.from_address(params[i]).value for i in range(3 * gy))  # type: ignore[index]
            self.log.append(("launch", f, (gx, gy, gz), (bx, by, bz), shared, stream, values, extra))
            return self.fail

        self.entry_point = _LAUNCH(launch)

    def address(self) -> int:
        return ctypes.cast(self.entry_point, ctypes.c_void_p).value or 0


def test_the_emulators_copy_launcher_makes_one_launch_for_one_or_two_inputs() -> None:
    """On a stand-in entry point: one launch a pair of inputs (a grid row each), the copy kernel of its
    arity, the grid's width by the larger size, the first failure returned."""
    from streamsafe.backend._held import _PROTOTYPES
    from streamsafe.testing._engines import _CopyLauncher

    driver = _Launches()
    kernels = {"streamsafe_copy": 0xF1, "streamsafe_copy2": 0xF2}
    cupy = types.SimpleNamespace(cuda=types.SimpleNamespace(Device=lambda device: contextlib.nullcontext()),
                                 RawKernel=lambda source, name: types.SimpleNamespace(kernel=types.SimpleNamespace(ptr=kernels[name])))
    launch = _PROTOTYPES["cuLaunchKernel"](driver.address())
    launcher = _CopyLauncher(cupy, 0, launch)
    assert launcher([0x1000, 0x2000, 4096], 5) == 0
    assert launcher([0x1000, 0x2000, 4096, 0x3000, 0x4000, 1 << 20], 6) == 0
    assert launcher([1, 2, 3] * 3, 7) == 0
    assert driver.log == [
        ("launch", 0xF1, (1, 1, 1), (256, 1, 1), 0, 5, (0x1000, 0x2000, 4096), None),
        ("launch", 0xF2, (256, 2, 1), (256, 1, 1), 0, 6, (0x1000, 0x2000, 4096, 0x3000, 0x4000, 1 << 20), None),
        ("launch", 0xF2, (1, 2, 1), (256, 1, 1), 0, 7, (1, 2, 3, 1, 2, 3), None),
        ("launch", 0xF1, (1, 1, 1), (256, 1, 1), 0, 7, (1, 2, 3), None),
    ]
    driver.fail = 719
    assert launcher([1, 2, 3] * 3, 7) == 719 and len(driver.log) == 5  # (stops at the first failing launch)
