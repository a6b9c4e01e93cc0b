"""``streamsafe doctor``: what this machine offers streamsafe. Works with no GPU.

Reads versions from package metadata (importing no framework that is not already
needed), says whether the module of each registered SDK profile imports (importing
those that are installed), probes the driver, and, where a GPU and a framework are
present, reads the kind of each framework's default and new streams from the driver.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import sys
import textwrap
from typing import Any

from .._env import SWITCHES, setting_problems
from .._version import __version__
from ..backend import cuda_available
from ..errors import EnvironmentSettingError

__all__ = ["collect", "format_report"]

_PACKAGES = (
    "cuda-python",
    "cuda-bindings",
    "cuda-core",
    "numpy",
    "torch",
    "cupy-cuda13x",
    "cupy-cuda12x",
    "jax",
    "jaxlib",
    "nvvfx",
    "pynvvideocodec",
    "av",
    "nvtx",
    "tqdm",
    "pytest",
    "hypothesis",
)


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _stream_defaults() -> list[dict[str, str]]:
    """Kinds of the frameworks' streams, read from the driver. Needs a GPU."""
    from ..backend.cuda import CudaBackend
    from ..backend.naming import as_stream

    backend = CudaBackend()
    rows: list[dict[str, str]] = [{"stream": "handle 0 / 1 (DLPack legacy)", "kind": str(as_stream(0, backend=backend).kind)}]
    probes: list[tuple[str, Any]] = []
    if importlib.util.find_spec("torch") is not None:
        try:
            import torch

            if torch.cuda.is_available():
                probes += [
                    ("torch.cuda.current_stream()", torch.cuda.current_stream),
                    ("torch.cuda.default_stream()", torch.cuda.default_stream),
                    ("torch.cuda.Stream()", torch.cuda.Stream),
                ]
        except Exception as e:  # pragma: no cover - broken installs
            rows.append({"stream": "torch", "kind": f"error: {e}"})
    if importlib.util.find_spec("cupy") is not None:
        try:
            import cupy

            probes += [
                ("cupy.cuda.get_current_stream()", cupy.cuda.get_current_stream),
                ("cupy.cuda.Stream()", cupy.cuda.Stream),
                ("cupy.cuda.Stream(non_blocking=True)", lambda: cupy.cuda.Stream(non_blocking=True)),
            ]
        except Exception as e:  # pragma: no cover
            rows.append({"stream": "cupy", "kind": f"error: {e}"})
    for label, make in probes:
        try:
            rows.append({"stream": label, "kind": str(as_stream(make(), backend=backend).kind)})
        except Exception as e:
            rows.append({"stream": label, "kind": f"error: {type(e).__name__}: {e}"})
    return rows


def _profiles(gpu: bool) -> list[dict[str, Any]]:
    """For each registered SDK profile with a :attr:`~streamsafe.profile.Profile.module`, in the registry's order:
    whether that module imports here (and whether it is the profile's emulation), and, where it imports and is not
    emulated, what the profile's :attr:`~streamsafe.profile.Profile.probe` says (``gpu``: whether a CUDA device is
    present); each module imported and probed once."""
    from ..profile import profiles

    states: dict[str, dict[str, Any]] = {}
    rows = []
    for profile in profiles():
        if profile.module:
            if profile.module not in states:
                state = states[profile.module] = _module_state(profile.module, profile.emulation)
                if profile.probe is not None and state["importable"] and not state["emulated"]:
                    try:
                        state["probe"] = profile.probe(gpu)
                    except Exception as e:  # noqa: BLE001  (a profile's probe must not stop the report)
                        state["probe"] = {"line": f"its check failed: {type(e).__name__}: {e}"}
            rows.append({"profile": profile.name, "module": profile.module, **states[profile.module]})
    return rows


def _module_state(name: str, emulation: str | None) -> dict[str, Any]:
    """Whether the module ``name`` imports (importing it where it is installed), and whether it is its emulation
    (``emulation``: ``"module:object"``, as a profile names it)."""
    fake = _emulation(emulation)
    found: dict[str, Any] = {"importable": False}
    module = sys.modules.get(name)
    if module is None:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):  # (a dotted name whose parent does not import)
            spec = None
        if spec is None:
            install = getattr(fake, "install_call", None)
            found["why"] = "not installed" + (f" (its emulation: {install})" if install else "")
            return found
        try:
            module = importlib.import_module(name)
        except Exception as e:  # noqa: BLE001  (installed but broken: a missing driver library, say)
            found["why"] = f"installed, but its import fails: {type(e).__name__}: {e}"
            return found
    found["importable"] = True
    found["version"] = getattr(module, "__version__", None)
    found["emulated"] = bool(fake is not None and fake.is_fake(module))
    return found


def _emulation(where: str | None) -> Any:
    """The emulation object a profile names (``"module:object"``), or ``None`` (none, or it does not import)."""
    if not where:
        return None
    module, _, attr = where.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except Exception:  # noqa: BLE001  (doctor reports; a broken emulation is not its subject)
        return None


def _gpus() -> tuple[str | None, list[dict[str, Any]]]:
    from cuda.bindings import driver as d

    version = d.cuDriverGetVersion()[1]
    gpus = []
    for i in range(d.cuDeviceGetCount()[1]):
        dev = d.cuDeviceGet(i)[1]
        name = d.cuDeviceGetName(256, dev)[1].split(b"\0", 1)[0].decode()
        major = d.cuDeviceGetAttribute(d.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)[1]
        minor = d.cuDeviceGetAttribute(d.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)[1]
        gpus.append({"index": i, "name": name, "compute_capability": f"{major}.{minor}"})
    return f"{version // 1000}.{version % 1000 // 10}", gpus


_SWITCHES = tuple(SWITCHES)
"""The environment switches streamsafe reads, as doctor shows them."""


def collect() -> dict[str, Any]:
    """Everything doctor reports, as plain data. Does not block on GPU work."""
    from ..backend.cuda import CudaBackend

    report: dict[str, Any] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "streamsafe": __version__,
        "packages": {name: _version(name) for name in _PACKAGES},
        "nvvfx_importable": importlib.util.find_spec("nvvfx") is not None,  # (kept for scripts; "profiles" says it)
        "switches": {name: os.environ.get(name) for name in _SWITCHES},
        "switch_problems": setting_problems(),
    }
    reason = CudaBackend.probe()  # (the driver only: no CUDA context is made before the SDKs' checks)
    report["cuda"] = {"available": reason is None, "reason": reason}
    report["profiles"] = _profiles(reason is None)
    if cuda_available():
        driver, gpus = _gpus()
        from ..backend._held import held_calls

        try:
            held = held_calls()
            calls = ("cuda.bindings (GIL released around each call)" if held is None
                     else "the driver's entry points through ctypes, GIL kept")
        except EnvironmentSettingError as e:  # (said under switches too)
            calls = f"none: {e}"
        report["cuda"].update({"driver": driver, "gpus": gpus, "fence_calls": calls})
        report["stream_defaults"] = _stream_defaults()
        report["backend"] = "cuda"
    else:
        report["stream_defaults"] = []
        report["backend"] = "sim (no GPU: streamsafe runs on the simulated backend)"
    return report


def format_report(report: dict[str, Any]) -> str:
    """The report as aligned text."""
    lines = [
        f"streamsafe {report['streamsafe']}  (Python {report['python']}, {report['platform']})",
        f"backend: {report['backend']}",
        "",
        "packages:",
    ]
    for name, version in report["packages"].items():
        lines.append(f"  {name:<16} {version or '-'}")
    set_switches = {k: v for k, v in report["switches"].items() if v is not None}
    lines.append("  switches: " + (", ".join(f"{k}={v}" for k, v in set_switches.items()) or "none set (" + ", ".join(_SWITCHES) + ")"))
    for problem in report.get("switch_problems", []):
        lines += textwrap.wrap(f"! {problem}", 98, initial_indent="    ", subsequent_indent="      ")
    rows = report.get("profiles", [])
    if rows:
        lines += ["", "SDK profiles (streamsafe.profile: whether each registered profile's module imports here):"]
        width = max(len(row["profile"]) for row in rows)
        for row in rows:
            if row["importable"]:
                state = "yes" + (f" ({row['version']})" if row.get("version") else "") + (
                    ", streamsafe's emulation" if row.get("emulated") else "") + (
                    f"; {row['probe']['line']}" if row.get("probe") else "")
            else:
                state = "no: " + row.get("why", "?")
            lines.append(f"  {row['profile']:<{width}}  {row['module']}: {state}")
    cuda = report["cuda"]
    lines += ["", "CUDA:"]
    if cuda["available"]:
        lines.append(f"  driver {cuda['driver']}")
        for gpu in cuda["gpus"]:
            lines.append(f"  cuda:{gpu['index']}  {gpu['name']}  (compute capability {gpu['compute_capability']})")
        lines.append(f"  fence calls: {cuda['fence_calls']}  (STREAMSAFE_FENCE_CALLS=bindings: cuda.bindings' own)")
    else:
        lines += textwrap.wrap(f"not available: {cuda['reason']}", 98, initial_indent="  ", subsequent_indent="    ")
    if report["stream_defaults"]:
        lines += ["", "stream kinds (read with cuStreamGetFlags):"]
        for row in report["stream_defaults"]:
            lines.append(f"  {row['stream']:<40} {row['kind']}")
    return "\n".join(lines)
