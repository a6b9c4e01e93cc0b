"""What one device-side fence (and the reads a replay makes) costs the host through each binding:
cuda-bindings, ctypes on libcuda, torch. On a GPU: python3 benchmarks/fence_bindings.py"""
import ctypes, time
import torch
from cuda.bindings import driver as d
torch.cuda.set_device(0); torch.zeros(1, device="cuda"); torch.cuda.synchronize()
s1 = torch.cuda.Stream(); s2 = torch.cuda.Stream()
h1, h2 = s1.cuda_stream, s2.cuda_stream
N = 20000
def bench(label, fn):
    for _ in range(2000): fn()
    xs = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(N): fn()
        xs.append((time.perf_counter() - t) / N * 1e6)
    torch.cuda.synchronize()
    print(f"{label:55s} {min(xs):6.2f} us")
# cuda-bindings
err, ev = d.cuEventCreate(d.CUevent_flags.CU_EVENT_DISABLE_TIMING)
cs1, cs2 = d.CUstream(h1), d.CUstream(h2)
rec, wait = d.cuEventRecord, d.cuStreamWaitEvent
S = d.CUresult.CUDA_SUCCESS
def cb():
    if rec(ev, cs1)[0] != S: raise RuntimeError
    if wait(cs2, ev, 0)[0] != S: raise RuntimeError
bench("cuda-bindings record+wait", cb)
leg = d.CUstream(d.CU_STREAM_LEGACY)
def cb_leg():
    if rec(ev, leg)[0] != S: raise RuntimeError
    if wait(cs2, ev, 0)[0] != S: raise RuntimeError
bench("cuda-bindings record(legacy)+wait", cb_leg)
gc = d.cuCtxGetCurrent
bench("cuda-bindings cuCtxGetCurrent", lambda: gc())
def cb_int():
    if rec(int(ev), h1)[0] != S: raise RuntimeError
    if wait(h2, int(ev), 0)[0] != S: raise RuntimeError
try:
    bench("cuda-bindings record+wait with int args", cb_int)
except Exception as e:
    print("int args refused:", e)
# ctypes on libcuda
lib = ctypes.CDLL("libcuda.so.1")
crec = lib.cuEventRecord; crec.argtypes = [ctypes.c_void_p, ctypes.c_void_p]; crec.restype = ctypes.c_int
cwait = lib.cuStreamWaitEvent; cwait.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint]; cwait.restype = ctypes.c_int
evi = int(ev)
def ct():
    if crec(evi, h1): raise RuntimeError
    if cwait(h2, evi, 0): raise RuntimeError
bench("ctypes libcuda record+wait", ct)
crec2 = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)(("cuEventRecord", lib))
cwait2 = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint)(("cuStreamWaitEvent", lib))
def ct2():
    if crec2(evi, h1): raise RuntimeError
    if cwait2(h2, evi, 0): raise RuntimeError
bench("ctypes CFUNCTYPE record+wait", ct2)
cgc = lib.cuCtxGetCurrent; cgc.argtypes=[ctypes.c_void_p]; cgc.restype=ctypes.c_int
box = ctypes.c_void_p()
ref = ctypes.byref(box)
bench("ctypes cuCtxGetCurrent", lambda: cgc(ref))
# torch
tev = torch.cuda.Event()
def tt():
    tev.record(s1); s2.wait_event(tev)
bench("torch Event.record + Stream.wait_event", tt)
raw = torch._C._cuda_getCurrentRawStream
bench("torch._C._cuda_getCurrentRawStream(0)", lambda: raw(0))
x = torch.zeros(3, 16, 16, device="cuda")
bench("tensor.get_device()", x.get_device)
bench("tensor.shape", lambda: x.shape)
bench("torch.cuda.current_stream(0)", lambda: torch.cuda.current_stream(0))
bench("torch.from_dlpack(producer tensor)", lambda: torch.from_dlpack(x))

# -- threads: a fence per frame on each of 8 threads, the GIL released around each driver call or kept ------
import threading  # noqa: E402

from streamsafe.backend._held import held_calls  # noqa: E402

held = held_calls()


def threaded(label: str, make_fence, threads: int = 8, n: int = 5000) -> None:
    streams = [(torch.cuda.Stream(), torch.cuda.Stream()) for _ in range(threads)]
    events = [d.cuEventCreate(d.CUevent_flags.CU_EVENT_DISABLE_TIMING)[1] for _ in range(threads)]
    barrier = threading.Barrier(threads + 1)

    def work(i: int) -> None:
        torch.cuda.set_device(0)
        fence = make_fence(events[i], *streams[i])
        barrier.wait()
        for _ in range(n):
            fence()
            x = sum(range(30))  # some Python between fences, as a pipeline has  # noqa: F841

    ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in ts:
        t.join()
    dt = time.perf_counter() - t0
    torch.cuda.synchronize()
    print(f"{label:55s} {dt / (threads * n) * 1e6:6.2f} us per fence, {threads} threads")


def bindings_fence(ev, a, b):
    ca, cb_ = d.CUstream(a.cuda_stream), d.CUstream(b.cuda_stream)
    return lambda: (rec(ev, ca), wait(cb_, ev, 0))


def held_fence(ev, a, b):
    e, ha, hb = int(ev), a.cuda_stream, b.cuda_stream
    return lambda: (held.cuEventRecord(e, ha), held.cuStreamWaitEvent(hb, e, 0))


def torch_fence(ev, a, b):
    tev = torch.cuda.Event()
    return lambda: (tev.record(a), b.wait_event(tev))


if held is not None:
    bench("held (PYFUNCTYPE via cuGetProcAddress) record+wait", held_fence(ev, s1, s2))
for name, make in (("cuda-bindings", bindings_fence), ("held", held_fence), ("torch", torch_fence)):
    if name == "held" and held is None:
        print("held calls not found")
        continue
    threaded(f"{name} record+wait", make)
