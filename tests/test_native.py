"""The C extension (streamsafe._native): the same reads and driver calls as the ctypes path.

No GPU here: capsules come from numpy, and the driver's entry points are stand-ins (ctypes callbacks
that log their arguments), bound for one test and then the previous binding restored.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterator

import numpy as np
import pytest
from _fake_driver import Driver
from hypothesis import given, settings
from hypothesis import strategies as st

from streamsafe import _accel, _dlpack

native = pytest.importorskip("streamsafe._native", reason="the C extension is not built (pip install -e . with a C compiler)")

ON_CI = os.environ.get("CI") == "true"


def test_the_extension_is_built_where_a_compiler_is() -> None:
    """On CI with a C compiler and Python's headers, the install must have built the extension (a broken
    build would otherwise only show as a slower hot path)."""
    include = sysconfig.get_paths()["include"]
    if not ON_CI or not (shutil.which("cc") or shutil.which("gcc")) or not os.path.exists(os.path.join(include, "Python.h")):
        pytest.skip("only CI with a C compiler and Python's headers promises the build")
    assert _accel.native() is native


def _read_with(module: object, capsule: object) -> object:
    """``read_capsule`` and ``capsule_data_key`` of ``capsule`` through ``module`` (the C extension, or
    ``None``: the ctypes path), whatever the process chose."""
    saved = _dlpack._NATIVE
    _dlpack._NATIVE = module
    try:
        return _dlpack.read_capsule(capsule), _dlpack.capsule_data_key(capsule)
    finally:
        _dlpack._NATIVE = saved


DTYPES = [np.uint8, np.int16, np.int32, np.uint32, np.float16, np.float32, np.float64, np.bool_, np.complex64]


@settings(max_examples=150, deadline=None)
@given(
    shape=st.lists(st.integers(1, 5), min_size=0, max_size=4),
    dtype=st.sampled_from(DTYPES),
    step=st.integers(1, 3),
    offset=st.integers(0, 2),
    versioned=st.booleans(),
)
def test_read_capsule_agrees_with_the_ctypes_path(shape: list[int], dtype: object, step: int, offset: int, versioned: bool) -> None:
    base = np.zeros([d * step + offset for d in shape] or [], dtype=dtype)
    view = base[tuple(slice(offset, None, step) for _ in shape)] if shape else base
    capsule = view.__dlpack__(max_version=(1, 0)) if versioned else view.__dlpack__()
    got, want = _read_with(native, capsule), _read_with(None, capsule)
    assert got == want
    tensor = got[0]
    assert tensor is not None and type(tensor) is _dlpack.CapsuleTensor
    assert tensor.shape == tuple(view.shape)
    assert tensor.ptr == view.__array_interface__["data"][0]
    assert tensor.device_type == _dlpack.DLPACK_CPU


def test_reads_of_other_objects_and_consumed_capsules_are_none() -> None:
    a = np.arange(6, dtype=np.float32)
    capsule = a.__dlpack__()
    np.from_dlpack(_Producer(capsule))  # consumes it: renamed "used_dltensor"
    other = ctypes.pythonapi.PyCapsule_New
    other.restype, other.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    foreign = other(ctypes.addressof(ctypes.c_int(1)), b"not_dltensor", None)
    for obj in (capsule, foreign, a, None, 3, "dltensor"):
        assert native.read_capsule(obj) is None
        assert native.capsule_data(obj) is None
        assert _read_with(None, obj) == (None, None)


class _Producer:
    """A DLPack producer that hands out one given capsule."""

    def __init__(self, capsule: object) -> None:
        self._capsule = capsule

    def __dlpack__(self, **_: object) -> object:
        return self._capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)


# -- driver calls, with stand-in entry points ------------------------------------------------------

@pytest.fixture
def driver() -> Iterator[Driver]:
    fake = Driver()
    saved = native.bound()
    native.bind(*fake.addresses())
    try:
        yield fake
    finally:
        native.bind(*saved)


def test_single_calls_pass_their_arguments_and_results(driver: Driver) -> None:
    assert native.event_record(0xE1, 0x51) == 0
    assert native.stream_wait_event(0x52, 0xE1, 0) == 0
    assert native.graph_launch(0x6A, 1) == 0
    assert native.ctx_current() == 0x5000
    assert native.launch_copy(0xF0, 12, 256, 0x1000, 0x2000, 4096, 2) == 0
    assert native.launch_copy(0xF2, 7, 128, 0x1000, 0x2000, 4096, 3, 0x5000, 0x6000, 8192) == 0
    assert driver.log == [
        ("record", 0xE1, 0x51),
        ("wait", 0x52, 0xE1, 0),
        ("graph", 0x6A, 1),
        ("ctx",),
        ("launch", 0xF0, (12, 1, 1), (256, 1, 1), 0, 2, (0x1000, 0x2000, 4096), None),
        ("launch", 0xF2, (7, 2, 1), (128, 1, 1), 0, 3, (0x1000, 0x2000, 4096, 0x5000, 0x6000, 8192), None),
    ]
    driver.fail.update(record=400, wait=700, graph=1, ctx=201, launch=719)
    assert native.event_record(1, 2) == 400
    assert native.stream_wait_event(1, 2, 0) == 700
    assert native.graph_launch(1, 2) == 1
    assert native.ctx_current() is None
    assert native.launch_copy(1, 1, 1, 0, 0, 0, 0) == 719
    assert native.launch_copy(1, 1, 1, 0, 0, 0, 0, 0, 0, 0) == 719
    with pytest.raises(TypeError, match="takes 7 or 10 arguments"):
        native.launch_copy(1, 1, 1, 0, 0, 0, 0, 0)


def test_handles_take_the_full_64_bits(driver: Driver) -> None:
    big = 0xFFFF_FFFF_FFFF_FFF0
    native.event_record(big, 2**63)
    assert driver.log == [("record", big, 2**63)]


def test_run_fences_issues_each_step_in_order_and_stops_at_the_first_failure(driver: Driver) -> None:
    assert native.run_fences((0, 0xE1, 0x51, 1, 0x52, 0xE1, 1, 0x53, 0xE1)) is None
    assert driver.log == [("record", 0xE1, 0x51), ("wait", 0x52, 0xE1, 0), ("wait", 0x53, 0xE1, 0)]
    driver.log.clear()
    driver.fail["wait"] = 400
    assert native.run_fences((0, 0xE1, 0x51, 1, 0x52, 0xE1, 0, 0xE2, 0x52)) == (1, 400)
    assert driver.log == [("record", 0xE1, 0x51), ("wait", 0x52, 0xE1, 0)]  # nothing after the failed step
    assert native.run_fences(()) is None


@pytest.mark.parametrize(
    ("steps", "error", "words"),
    [
        ([0, 1, 2], TypeError, "tuple of ints"),
        ((0, 1), TypeError, "three per step"),
        ((2, 1, 2), ValueError, "op 2"),
        ((0, "e", 2), TypeError, "must be an int, not str"),
    ],
)
def test_run_fences_refuses_a_malformed_program_before_any_step(driver: Driver, steps: object, error: type, words: str) -> None:
    with pytest.raises(error, match=words):
        native.run_fences(steps)
    assert driver.log == []
    with pytest.raises(ValueError, match="step 1 has op 7"):
        native.run_fences((0, 0xE1, 0x51, 7, 1, 2))  # a good first step is not issued either
    assert driver.log == []


def test_calls_before_bind_raise_and_say_how_to_fix() -> None:
    saved = native.bound()
    native.bind(0, 0, 0, 0, 0)
    try:
        for call, args in [(native.event_record, (1, 2)), (native.run_fences, ((0, 1, 2),)), (native.ctx_current, ())]:
            with pytest.raises(RuntimeError, match="call bind"):
                call(*args)
    finally:
        native.bind(*saved)
    with pytest.raises(TypeError, match="takes 2 arguments"):
        native.event_record(1)


def test_a_build_of_other_sources_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stale build (an ABI other than this package's: its calls take other arguments) is refused, and
    doctor's line says why and how to rebuild; this build's ABI is the package's."""
    import importlib
    import types

    assert native.ABI == _accel.ABI
    for stale in (types.ModuleType("streamsafe._native"), types.SimpleNamespace(ABI=_accel.ABI + 1)):
        monkeypatch.setattr(_accel, "_NATIVE", False)
        monkeypatch.setattr(importlib, "import_module", lambda name, stale=stale: stale)
        assert _accel.native() is None
        got = getattr(stale, "ABI", 1)
        assert _accel.native_status() == (
            f"not used: its build is of other sources (ABI {got}, this package's {_accel.ABI}); the same calls go "
            "through ctypes. Rebuild it (pip install -e .) to use it"
        )


def test_the_switch_turns_it_off_and_doctor_says_so() -> None:
    code = "from streamsafe import _accel; print(_accel.native() is None, _accel.native_status())"
    env = {**os.environ, "STREAMSAFE_NATIVE": "0"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "True switched off (STREAMSAFE_NATIVE=0)"
    for value in ("1", "", "maybe"):  # on; set to nothing (the default); a value it does not read (a warning, the default)
        env["STREAMSAFE_NATIVE"] = value
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert done.stdout.strip() == "False in use"
        assert ("STREAMSAFE_NATIVE='maybe' is not a switch" in done.stderr) == (value == "maybe")


@pytest.mark.parametrize("major", [0, 2])
def test_a_versioned_capsule_of_an_unknown_major_version_is_not_read(major: int) -> None:
    """DLPack: a consumer must not read a DLManagedTensorVersioned whose major version it does not know."""
    a = np.arange(6, dtype=np.float32)
    capsule = a.__dlpack__(max_version=(1, 0))
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    version = ctypes.c_uint32.from_address(get(capsule, b"dltensor_versioned"))
    assert version.value == 1 and native.read_capsule(capsule) is not None
    version.value = major
    try:
        assert native.read_capsule(capsule) is None and native.capsule_data(capsule) is None
        assert _read_with(None, capsule) == (None, None)
    finally:
        version.value = 1  # (numpy's deleter frees it as version 1)


def test_the_frame_section_timers_add_up_on_the_model(tmp_path: pytest.TempPathFactory) -> None:
    """``benchmarks/frame_sections.py`` with the extension built with ``-DSTREAMSAFE_FRAME_PROFILE``: every
    section of the C replay is timed once a frame, and the normal build has no timers at all."""
    cc = shutil.which("gcc") or shutil.which("cc")
    include = sysconfig.get_paths()["include"]
    if cc is None or not os.path.exists(os.path.join(include, "Python.h")):
        pytest.skip("needs a C compiler and Python's headers")
    assert not hasattr(native, "frame_profile")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    pkg = os.path.join(str(tmp_path), "streamsafe")
    shutil.copytree(os.path.join(root, "streamsafe"), pkg, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    so = os.path.join(pkg, "_native" + sysconfig.get_config_var("EXT_SUFFIX"))
    subprocess.run([cc, "-O1", "-shared", "-fPIC", "-DSTREAMSAFE_FRAME_PROFILE", f"-I{include}", os.path.join(pkg, "_native.c"),
                    os.path.join(pkg, "_replay.c"), "-o", so], check=True)
    out = subprocess.run([sys.executable, os.path.join(root, "benchmarks", "frame_sections.py"), "--sim", "--blocks", "2", "--json", str(tmp_path / "sections.json")],
                         env={**os.environ, "PYTHONPATH": str(tmp_path)}, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.splitlines() if line.startswith("  replay: ")]
    assert len(lines) == 15 and all(line.endswith("(1.0 a step)") for line in lines), out.stdout
