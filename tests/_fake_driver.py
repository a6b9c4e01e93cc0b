"""Stand-in driver entry points for the C extension's calls (``streamsafe._native.bind``): each logs its call."""

from __future__ import annotations

import ctypes

_RECORD = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
_WAIT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint)
_CTX = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p))
_GRAPH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
_U = ctypes.c_uint
_LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, _U, _U, _U, _U, _U, _U, _U, ctypes.c_void_p,
                           ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)


class Driver:
    """Stand-in entry points: each logs its call; ``fail`` maps a call name to the CUresult it returns."""

    def __init__(self) -> None:
        self.log: list[tuple[object, ...]] = []
        self.fail: dict[str, int] = {}
        self.ctx = 0x5000

        def result(name: str) -> int:
            return self.fail.get(name, 0)

        def ctx(out: object) -> int:
            out[0] = self.ctx  # type: ignore[index]
            self.log.append(("ctx",))
            return result("ctx")

        def launch(f: int, gx: int, gy: int, gz: int, bx: int, by: int, bz: int, shared: int, stream: int, params: object,
                   extra: object) -> int:
            # the copy kernels take three 64-bit arguments per pair, one pair per grid row
            values = tuple(ctypes.c_uint64.from_address(params[i]).value for i in range(3 * gy))  # type: ignore[index]
            self.log.append(("launch", f, (gx, gy, gz), (bx, by, bz), shared, stream, values, extra))
            return result("launch")

        self.entry_points = (
            _RECORD(lambda e, s: self.log.append(("record", e, s)) or result("record")),
            _WAIT(lambda s, e, f: self.log.append(("wait", s, e, f)) or result("wait")),
            _CTX(ctx),
            _GRAPH(lambda g, s: self.log.append(("graph", g, s)) or result("graph")),
            _LAUNCH(launch),
        )

    def addresses(self) -> tuple[int, ...]:
        return tuple(ctypes.cast(f, ctypes.c_void_p).value or 0 for f in self.entry_points)
