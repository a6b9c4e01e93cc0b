"""Short GPU probe: does the spin delay work, and where does the seed-samples test crash?"""
import faulthandler, time
faulthandler.enable(all_threads=True)
import numpy as np, torch, cupy
import streamsafe as ss
from streamsafe.testing._engines import CupyEngine, spin_cycles_per_us
be = ss.CudaBackend()
print("cycles/us", spin_cycles_per_us(0), flush=True)
eng = CupyEngine(be, 0)
s = torch.cuda.Stream(); S = ss.as_stream(s, backend=be)
a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
for us in (0, 300):
    a.record(s); eng.delay(S, us); b.record(s); torch.cuda.synchronize()
    print("cupy spin", us, "us ->", a.elapsed_time(b) * 1000, "us", flush=True)
    a.record(s)
    with torch.cuda.stream(s):
        torch.cuda._sleep(int(us * spin_cycles_per_us(0)))
    b.record(s); torch.cuda.synchronize()
    print("torch sleep", us, "us ->", a.elapsed_time(b) * 1000, "us", flush=True)
# H2 by hand: inference spin on S, conversion on legacy
from streamsafe.testing import VideoSuperRes
from streamsafe.testing import _kernels as K
sr = VideoSuperRes(backend=be, latency_us={"inference": 5000}); sr.output_width = sr.output_height = 128; sr.load()
bad = 0
for i in range(20):
    x = np.random.default_rng(i).random((3, 64, 64), dtype=np.float32)
    t = torch.from_numpy(x).cuda(); torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = sr.run(t, stream_ptr=s.cuda_stream, non_blocking=True)
    t1 = time.perf_counter()
    y = torch.from_dlpack(out.image).clone(); torch.cuda.synchronize()
    want = K.to_rgb8(np, K.resize_bilinear(np, x, 128, 128)).astype(np.float32) / 255
    bad += not np.allclose(y.cpu().numpy(), want, atol=1.5/255)
    if i < 5: print("run() host us", (t1 - t0) * 1e6, flush=True)
print("H2 by hand corrupt", bad, "/ 20", flush=True)
sr.close()
import jax, jax.numpy as jnp
sr = VideoSuperRes(backend=be); sr.output_width = sr.output_height = 128; sr.load()
frame = torch.rand(3, 64, 64, device="cuda")
side = torch.cuda.Stream()
for part in ("torch", "cupy", "jax"):
    print("seed part", part, flush=True)
    with torch.cuda.stream(side), ss.stream_contract(sr, side):
        for i in range(5):
            if part == "torch":
                r = sr.run(frame, stream_ptr=torch.cuda.current_stream().cuda_stream, non_blocking=False)
                o = torch.from_dlpack(r.image).clone()
            elif part == "cupy":
                r = sr.run(frame)
                with cupy.cuda.Stream(non_blocking=True):
                    c = cupy.from_dlpack(r.image).copy()
            else:
                r = sr.run(frame)
                ad = ss.JaxDLPackAdapter(r.image, device_id=0)
                print("  jax from_dlpack", flush=True)
                v = jax.dlpack.from_dlpack(ad, copy=False)
                print("  jnp.array", flush=True)
                o = jnp.array(v, copy=True); o.block_until_ready()
            print("  ok", i, flush=True)
print("probe done", flush=True)
