# ruff: noqa: B007
"""Independent GPU race check of streamsafe with torch producers/consumers.

Per frame: a torch producer (default stream or a side stream) writes a fresh input
(garbage fill, random sleep, then the real data) that is deleted right after run(), so the
caching allocator recycles it for the next frame; random sleeps on every stream and random
emulated-SDK latencies; consumers of many kinds (immediate, deferred until just before the
next run, other streams, views, CuPy). The host only syncs every few dozen frames, when every
consumed copy is compared with a reference computed on a separate, fully synchronised
effect instance (itself cross-checked against the NumPy math on CPU).

Run (from the repository root, on a GPU):
    BUDGET_S=210 FRAMES=2700 CONTROL_FRAMES=1350 PYTHONPATH=. python3 scripts/race_check.py
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
import traceback

import numpy as np

T0 = time.time()
BUDGET_S = float(os.environ.get("BUDGET_S", "200"))
FRAMES = int(os.environ.get("FRAMES", "1200"))
CONTROL_FRAMES = int(os.environ.get("CONTROL_FRAMES", "600"))
MAX_US = float(os.environ.get("MAX_US", "300"))
ONLY = os.environ.get("ONLY", "")  # e.g. "sr" or "sr:eager"
SDK_KINDS = [s for s in os.environ.get("SDK_KINDS", "nonblocking,blocking,legacy").split(",") if s]
OUTDIR = os.environ.get("OUT") or "/tmp/race_check_out"
os.makedirs(OUTDIR, exist_ok=True)
CYC = 1980.0  # SM cycles per microsecond (H200 under load)

import torch  # noqa: E402
import cupy  # noqa: E402

import streamsafe as ss  # noqa: E402
from streamsafe.testing import TrueHDR, VideoFrameGeneration, VideoSuperRes  # noqa: E402
from streamsafe.testing import _kernels as K  # noqa: E402

DEV = torch.device("cuda", 0)
H, W = 72, 128
OH, OW = 144, 256
NB = 6
log_lines: list[str] = []


def log(*a: object) -> None:
    s = " ".join(str(x) for x in a)
    print(s, flush=True)
    log_lines.append(s)


def left() -> float:
    return BUDGET_S - (time.time() - T0)


def sleep_us(us: float) -> None:
    """torch.cuda._sleep on torch's current stream."""
    if us >= 1:
        torch.cuda._sleep(int(us * CYC))


def _rnd_us(rng: random.Random, hi: float = MAX_US) -> float:
    # mostly small, sometimes long: heavy tail to hit both orders
    r = rng.random()
    if r < 0.3:
        return 0.0
    if r < 0.7:
        return rng.uniform(0, hi / 4)
    return rng.uniform(0, hi)


rnd_us = _rnd_us


# ---------------------------------------------------------------- inputs and references
nprng = np.random.default_rng(1234)
BASES_NP = [nprng.random((3, H, W), dtype=np.float32) for _ in range(NB)]
BASES = [torch.from_numpy(b).to(DEV) for b in BASES_NP]
torch.cuda.synchronize()


def make_effect(kind: str, mode: str, backend: object | None) -> object:
    kw = dict(launch_mode=mode, backend=backend)
    if kind == "sr":
        e = VideoSuperRes(**kw)
        e.output_width, e.output_height = OW, OH
    elif kind == "vfg":
        e = VideoFrameGeneration(automatic_shot_change_detection_enabled=False, **kw)
        e.input_width, e.input_height = W, H
        e.frame_multiplier = 4  # t = 1/4: blend(a, b) != blend(b, a), so a swapped pair is caught too
    else:
        e = TrueHDR(**kw)
    e.load()
    return e


def keys_for(kind: str) -> list[tuple[int, ...]]:
    if kind == "vfg":
        return [(a, b) for a in range(NB) for b in range(NB)]
    return [(a,) for a in range(NB)]


REFS: dict[str, dict[tuple[int, ...], object]] = {}  # cupy arrays


def compute_refs(kind: str) -> None:
    """References on a separate effect, fully synchronised (SDK stream = legacy, non_blocking=False,
    device syncs around every step); cross-checked against NumPy on the CPU."""
    e = make_effect(kind, "eager", None)
    refs = {}
    maxdiff = 0.0
    for key in keys_for(kind):
        torch.cuda.synchronize()
        ins = [BASES[i].clone() for i in key]
        torch.cuda.synchronize()
        if kind == "vfg":
            o = e.run(ins[0], ins[1], frame_index=1)
        else:
            o = e.run(ins[0])
        torch.cuda.synchronize()
        cupy.cuda.runtime.deviceSynchronize()
        r = cupy.from_dlpack(o.image).copy()
        cupy.cuda.runtime.deviceSynchronize()
        refs[key] = r
        got = cupy.asnumpy(r)
        if kind == "sr":
            want = K.to_rgb8(np, K.resize_bilinear(np, BASES_NP[key[0]], OH, OW)).astype(np.float32) / np.float32(255)
            maxdiff = max(maxdiff, float(np.abs(got - want).max()))
        elif kind == "vfg":
            want = K.to_rgb8(np, K.blend(np, BASES_NP[key[0]], BASES_NP[key[1]], 0.25, False)).astype(np.float32) / np.float32(255)
            maxdiff = max(maxdiff, float(np.abs(got - want).max()))
        else:
            want = K.tone_map_hdr(np, BASES_NP[key[0]], contrast=100, saturation=100, middle_gray=50, luminance=650)
            g = K.unpack_rgb10a2(np, got)
            w = K.unpack_rgb10a2(np, want)
            maxdiff = max(maxdiff, float(np.abs(g - w).max()))
        del ins
    e.close()
    # distinctness: every pair of references must differ a lot, else corruption can hide
    mind = min(
        float(cupy.abs(refs[a].astype(cupy.float64) - refs[b].astype(cupy.float64)).max())
        for a in refs for b in refs if a < b
    )
    REFS[kind] = refs
    log(f"refs {kind}: {len(refs)} keys, max |gpu_ref - numpy_ref| = {maxdiff:.6g} (float units), "
        f"min max-diff between distinct refs = {mind:.6g}")


# ---------------------------------------------------------------- the pipeline under test
CONSUMERS = ["dl_clone_cur", "dl_clone_C1", "torch_cur", "torch_C2", "view_C1", "view_C1_read_C3", "cupy_cs", "cupy_current"]


class Streams:
    def __init__(self, sdk_kind: str) -> None:
        self.sdk_kind = sdk_kind
        if sdk_kind == "nonblocking":
            self.S = torch.cuda.Stream()
        elif sdk_kind == "blocking":  # a blocking stream (CuPy's kind), seen by torch as an ExternalStream
            self._cs_block = cupy.cuda.Stream(non_blocking=False)
            self.S = torch.cuda.ExternalStream(self._cs_block.ptr)
        else:  # the legacy default stream
            self.S = torch.cuda.default_stream()
        self.P = torch.cuda.Stream()
        self.C1 = torch.cuda.Stream()
        self.C2 = torch.cuda.Stream()
        self.C3 = torch.cuda.Stream()
        self.cs = cupy.cuda.Stream(non_blocking=True)
        self.cs_t = torch.cuda.ExternalStream(self.cs.ptr)


def consume(out: object, cname: str, raw: bool, st: Streams, rng: random.Random) -> object:
    """Import/copy the output as a user would; random sleeps on the consumer stream. Returns the copy."""
    img = out.image

    def rnd_us(r: random.Random) -> float:  # consumers: up to twice as long
        return _rnd_us(r, 2 * MAX_US)

    if cname == "dl_clone_cur" or (raw and cname == "torch_cur"):
        v = torch.from_dlpack(img)
        sleep_us(rnd_us(rng))
        return v.clone()
    if cname in ("dl_clone_C1",) or (raw and cname == "view_C1"):
        with torch.cuda.stream(st.C1):
            v = torch.from_dlpack(img)
            sleep_us(rnd_us(rng))
            return v.clone()
    if cname == "torch_cur":
        sleep_us(rnd_us(rng))
        return out.torch()
    if cname == "torch_C2":
        with torch.cuda.stream(st.C2):
            sleep_us(rnd_us(rng))
            if raw:
                return torch.from_dlpack(img).clone()
        return out.torch(stream=st.C2)
    if cname == "view_C1":
        with torch.cuda.stream(st.C1):
            v = out.torch(copy=False)
            sleep_us(rnd_us(rng))
            return v.clone()
    if cname == "view_C1_read_C3":
        with torch.cuda.stream(st.C1):
            v = torch.from_dlpack(img)
        if not raw:
            out.record_stream(st.C3)
        with torch.cuda.stream(st.C3):
            sleep_us(rnd_us(rng))
            return v.clone()
    if cname == "cupy_cs":
        with torch.cuda.stream(st.cs_t):
            sleep_us(rnd_us(rng))
            if raw:
                return torch.from_dlpack(img).clone()
        return out.cupy(stream=st.cs)
    if cname == "cupy_current":
        with torch.cuda.stream(st.cs_t):
            sleep_us(rnd_us(rng))
        if raw:
            with torch.cuda.stream(st.cs_t):
                return torch.from_dlpack(img).clone()
        with st.cs:
            return cupy.from_dlpack(img).copy()
    raise AssertionError(cname)


def verify(pending: list, refs: dict, res: dict, kind: str) -> None:
    torch.cuda.synchronize()
    cupy.cuda.runtime.deviceSynchronize()
    diffs = []
    for y, key, cname, deferred in pending:
        a = cupy.from_dlpack(y) if isinstance(y, torch.Tensor) else y
        r = refs[key]
        if kind == "hdr":
            diffs.append((a != r).sum().astype(cupy.float32))
        else:
            diffs.append(cupy.abs(a - r).max())
    vals = cupy.stack(diffs).get().tolist() if diffs else []
    tol = 0 if kind == "hdr" else 0.5 / 255
    for (y, key, cname, deferred), d in zip(pending, vals):
        bad = d > tol
        res["frames"] += 1
        res["corrupt"] += int(bad)
        name = cname + ("+deferred" if deferred else "")
        bc = res["by_consumer"].setdefault(name, [0, 0])
        bc[0] += 1
        bc[1] += int(bad)
    pending.clear()


def run_config(kind: str, mode: str, strategy: str, producer: str, frames: int, seed: int, backend_name: str, sdk_kind: str) -> dict:
    rng = random.Random(seed)
    res = {"kind": kind, "mode": mode, "strategy": strategy, "producer": producer, "backend": backend_name, "sdk": sdk_kind,
           "frames": 0, "corrupt": 0, "errors": 0, "by_consumer": {}, "input_ptr_reused": 0, "tb": None}
    refs = REFS[kind]
    st = Streams(sdk_kind)
    backend = ss.CudaBackend() if backend_name == "CudaBackend()" else None
    e = make_effect(kind, mode, backend)
    raw = strategy == "raw"
    block = strategy == "auto_block"
    c = None
    blk = None
    try:
        if raw:
            pass
        elif block:
            blk = ss.stream_contract(e, st.S, input_stream=st.P if producer == "declared" else None)
            c = blk.__enter__()
        else:
            extra = {"allow_none": True} if strategy == "none" else {}
            c = ss.StreamContract(e, st.S, strategy=strategy,
                                  input_stream=st.P if producer == "declared" else None, **extra)
        if c is not None and "plan" not in res:
            try:
                res["plan"] = str(c.plan)
            except Exception as ex:  # noqa: BLE001
                res["plan"] = f"<plan failed: {ex!r}>"

        pstream = torch.cuda.default_stream() if producer == "default" else st.P
        # where run() is called: the producer's stream current ("default"/"side"), or S ("declared")
        run_stream = {"default": torch.cuda.default_stream(), "side": st.P, "declared": st.S}[producer]

        def produce(k: int) -> torch.Tensor:
            with torch.cuda.stream(pstream):
                sleep_us(rnd_us(rng))
                x = torch.empty((3, H, W), device=DEV)
                x.fill_(-7.0)  # what a reader that comes too early sees (besides the recycled block's old frame)
                sleep_us(rnd_us(rng))
                x.copy_(BASES[k])
                x.mul_(1.0)
            return x

        def call(*ins: torch.Tensor) -> object:
            if raw:
                if kind == "vfg":
                    return e.run(ins[0], ins[1], frame_index=1, non_blocking=True, stream_ptr=st.S.cuda_stream)
                return e.run(ins[0], non_blocking=True, stream_ptr=st.S.cuda_stream)
            runner = e if block else c
            if kind == "vfg":
                if rng.random() < 0.5:
                    return runner.run(ins[0], ins[1], frame_index=1)
                return runner.run_at_timestep(ins[0], ins[1], 0.25)
            return runner.run(ins[0])

        def set_latency() -> None:
            if mode == "eager":
                e.latency_us = {"transfer": rnd_us(rng), "inference": rnd_us(rng), "conversion": rnd_us(rng)}
            else:  # a few values only: graphs are captured per latency set (at most 17 kept)
                e.latency_us = {"transfer": rng.choice((0.0, 100.0)), "inference": rng.choice((0.0, 150.0)),
                                "conversion": rng.choice((0.0, 100.0, 300.0))}

        pending: list = []
        deferred = None  # (out, key, cname)
        prev = None
        prev_k = None
        last_ptr = None
        batch = rng.randint(8, 48)
        if kind == "vfg":
            prev_k = rng.randrange(NB)
            prev = produce(prev_k)
        for i in range(frames):
            k = rng.randrange(NB)
            set_latency()
            x = produce(k)
            ptr = x.data_ptr()
            res["input_ptr_reused"] += int(ptr == last_ptr)
            last_ptr = ptr
            with torch.cuda.stream(run_stream):
                if deferred is not None:  # a consumer that reads the last output late: just before the next run
                    dout, dkey, dname = deferred
                    pending.append((consume(dout, dname, raw, st, rng), dkey, dname, True))
                    del dout
                    deferred = None
                if kind == "vfg":
                    key = (prev_k, k)
                    out = call(prev, x)
                else:
                    key = (k,)
                    out = call(x)
                cname = rng.choice(CONSUMERS)
                if rng.random() < 0.25:
                    deferred = (out, key, cname)
                else:
                    pending.append((consume(out, cname, raw, st, rng), key, cname, False))
                del out
            # the user drops the input: the caching allocator may hand its block to the next frame
            if kind == "vfg":
                del prev
                prev, prev_k = x, k
            del x
            if len(pending) >= batch and deferred is None:
                verify(pending, refs, res, kind)
                batch = rng.randint(8, 48)
            if left() < 25:
                res["stopped_early"] = True
                break
        if deferred is not None:
            dout, dkey, dname = deferred
            with torch.cuda.stream(run_stream):
                pending.append((consume(dout, dname, raw, st, rng), dkey, dname, True))
            del dout
            deferred = None
        verify(pending, refs, res, kind)
        prev = None
        if c is not None and not block:
            res["stats"] = repr(getattr(c, "stats", None))[:600]
    except Exception:  # noqa: BLE001
        res["errors"] += 1
        res["tb"] = traceback.format_exc()
        log(res["tb"])
    finally:
        try:
            if blk is not None:
                blk.__exit__(None, None, None)
            if c is not None and not block:
                c.close()
            else:
                e.close()
        except Exception:  # noqa: BLE001
            res["errors"] += 1
            res["tb"] = (res["tb"] or "") + "\n[close] " + traceback.format_exc()
            log("[close]", traceback.format_exc())
        res["graphs_captured"] = len(getattr(e, "_graphs", {}) or {})
        torch.cuda.synchronize()
    return res


def main() -> int:
    log(f"torch {torch.__version__}, cupy {cupy.__version__}, streamsafe {ss.__version__}, "
        f"device {torch.cuda.get_device_name(0)}")
    # probe torch uint32 DLPack (for TrueHDR)
    try:
        t = torch.from_dlpack(cupy.zeros(4, dtype=cupy.uint32)).clone()
        u32_ok = t.dtype == torch.uint32 and cupy.from_dlpack(t).dtype == cupy.uint32
    except Exception as ex:  # noqa: BLE001
        u32_ok = False
        log("torch uint32 dlpack probe failed:", repr(ex))
    log("torch uint32 dlpack:", u32_ok)

    kinds = [("sr", "eager"), ("sr", "graph"), ("vfg", "eager"), ("hdr", "graph"), ("vfg", "graph"), ("hdr", "eager")]
    if not u32_ok:
        kinds = [k for k in kinds if k[0] != "hdr"]
    if ONLY:
        kinds = [k for k in kinds if f"{k[0]}:{k[1]}".startswith(ONLY) or k[0] == ONLY]
    strategies = ["none", "raw", "auto", "event", "async"]
    producers = ["side", "default", "declared"]
    results = []
    seed = 100
    for kind in sorted({k for k, _ in kinds}, key=lambda s: ["sr", "vfg", "hdr"].index(s)):
        try:
            compute_refs(kind)
        except Exception:  # noqa: BLE001
            log(f"refs {kind} failed:\n{traceback.format_exc()}")
    for kind, mode in kinds:
        if kind not in REFS:
            continue
        strats = strategies + (["auto_block"] if (kind, mode) == ("sr", "eager") else [])
        for strategy in strats:
            for producer, sdk_kind in [(p, s) for p in producers for s in SDK_KINDS]:
                if left() < 30:
                    log(f"budget: skipping {kind}/{mode}/{strategy}/{producer}/{sdk_kind}")
                    continue
                seed += 1
                n = CONTROL_FRAMES if strategy in ("none", "raw") else FRAMES
                n = max(60, n // (len(producers) * len(SDK_KINDS)))
                backend_name = "CudaBackend()" if (seed % 2) else "default"
                t1 = time.time()
                r = run_config(kind, mode, strategy, producer, n, seed, backend_name, sdk_kind)
                r["seconds"] = round(time.time() - t1, 2)
                results.append(r)
                log(f"{kind:3s} {mode:5s} {strategy:10s} producer={producer:8s} sdk={sdk_kind:11s} backend={backend_name:13s} "
                    f"corrupt {r['corrupt']:4d}/{r['frames']:4d} errors {r['errors']} "
                    f"reuse {r['input_ptr_reused']} graphs {r['graphs_captured']} {r['seconds']}s")
                with open(os.path.join(OUTDIR, "results.json"), "w") as f:
                    json.dump(results, f, indent=1)
    # summary
    log("\n=== summary: corrupt/frames (errors) per strategy, per effect+mode ===")
    table: dict = {}
    for r in results:
        key = (r["kind"], r["mode"], r["strategy"])
        t = table.setdefault(key, [0, 0, 0])
        t[0] += r["corrupt"]; t[1] += r["frames"]; t[2] += r["errors"]
    for (kind, mode, strategy), (cor, fr, er) in sorted(table.items()):
        log(f"  {kind:3s} {mode:5s} {strategy:10s} {cor:5d}/{fr:5d}  errors {er}")
    tot: dict = {}
    for r in results:
        t = tot.setdefault(r["strategy"], [0, 0, 0])
        t[0] += r["corrupt"]; t[1] += r["frames"]; t[2] += r["errors"]
    log("=== per strategy x SDK stream kind ===")
    sk: dict = {}
    for r in results:
        t = sk.setdefault((r["strategy"], r["sdk"]), [0, 0, 0])
        t[0] += r["corrupt"]; t[1] += r["frames"]; t[2] += r["errors"]
    for (s_, k_), (cor, fr, er) in sorted(sk.items()):
        log(f"  {s_:10s} sdk={k_:11s} {cor:5d}/{fr:5d}  errors {er}")
    log("=== per strategy (all effects) ===")
    for s, (cor, fr, er) in tot.items():
        log(f"  {s:10s} {cor:5d}/{fr:5d} corrupt, errors {er}")
    log("=== per consumer, controls (none+raw) vs guarded ===")
    pc: dict = {}
    for r in results:
        grp = "control" if r["strategy"] in ("none", "raw") else "guarded"
        for cn, (f_, b_) in r["by_consumer"].items():
            t = pc.setdefault((grp, cn), [0, 0])
            t[0] += f_; t[1] += b_
    for (grp, cn), (f_, b_) in sorted(pc.items()):
        log(f"  {grp:8s} {cn:26s} {b_:5d}/{f_:5d}")
    plans = {r["strategy"]: r.get("plan") for r in results if r.get("plan")}
    for s, p in plans.items():
        log(f"--- plan ({s}) ---\n{p}")
    log(f"total wall {time.time() - T0:.1f}s")
    with open(os.path.join(OUTDIR, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    with open(os.path.join(OUTDIR, "log.txt"), "w") as f:
        f.write("\n".join(log_lines) + "\n")
    guarded_bad = sum(v[0] + v[2] for s, v in tot.items() if s not in ("none", "raw"))
    control_bad = sum(v[0] for s, v in tot.items() if s in ("none", "raw"))
    log(f"VERDICT: guarded corrupt+errors = {guarded_bad}; control corrupt = {control_bad}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
