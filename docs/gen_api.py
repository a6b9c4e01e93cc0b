"""Generate docs/api.md from the docstrings:  python3 docs/gen_api.py  (tests/test_docs.py checks it is current)."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

MODULES = ["streamsafe", "streamsafe.testing", "streamsafe.bench"]
HEADER = "# API reference\n\nGenerated from the docstrings by `python3 docs/gen_api.py`; do not edit by hand.\n"


# Module-level aliases some signatures use (the classes re-export the enums under these names).
_ALIASES = {"'_Encoding'": "'ImageEncoding'", "'_Quality'": "'QualityLevel'", "'_Mode'": "'Mode'"}


def _sig(obj: object) -> str:
    try:
        text = str(inspect.signature(obj))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return ""
    for alias, name in _ALIASES.items():
        text = text.replace(alias, name)
    return text


def _doc(obj: object) -> str:
    doc = inspect.getdoc(obj) or ""
    return doc.strip()


def render() -> str:
    import importlib

    out = [HEADER]
    for name in MODULES:
        mod = importlib.import_module(name)
        out.append(f"\n## `{name}`\n\n{_doc(mod)}\n")
        for attr in sorted(getattr(mod, "__all__", [])):
            if attr.startswith("__"):
                continue
            obj = getattr(mod, attr)
            if inspect.isclass(obj):
                out.append(f"\n### class `{name}.{attr}{_sig(obj) if not issubclass(obj, BaseException) else ''}`\n\n{_doc(obj)}\n")
                for meth_name, meth in sorted(vars(obj).items()):
                    if getattr(meth, "__streamsafe_dispatch__", False):  # a guard's dispatcher: document the SDK's own
                        from streamsafe import guarding

                        meth = guarding._originals.get(obj, {}).get(meth_name)
                        if meth is None:
                            continue
                    if meth_name.startswith("_") or not (inspect.isfunction(meth) or isinstance(meth, property)):
                        continue
                    doc = _doc(meth)
                    if not doc:
                        continue
                    if isinstance(meth, property):
                        out.append(f"- `{meth_name}` (property): {doc.splitlines()[0]}\n")
                    else:
                        out.append(f"- `{meth_name}{_sig(meth)}`: {doc.splitlines()[0]}\n")
            elif inspect.isfunction(obj):
                out.append(f"\n### `{name}.{attr}{_sig(obj)}`\n\n{_doc(obj)}\n")
            elif not inspect.ismodule(obj):
                out.append(f"\n### `{name}.{attr}`\n\n{type(obj).__name__} constant.\n")
    return "".join(out)


if __name__ == "__main__":
    target = Path(__file__).parent / "api.md"
    target.write_text(render())
    print(f"wrote {target}", file=sys.stderr)
