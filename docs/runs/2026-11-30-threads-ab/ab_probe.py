"""A/B probe (not committed): c.run(x) per frame under event, replays counted, and a profile."""
import cProfile, pstats, sys, time, io
sys.path.insert(0, "benchmarks")
import torch
import streamsafe as ss
from streamsafe import steady
import contract_overhead as co

torch.cuda.set_device(0)
side = torch.cuda.Stream()
x = torch.zeros(3, 16, 16, device="cuda")
out_buf = torch.zeros(3, 32, 32, device="cuda")
tag = sys.argv[1]
for strategy in ("event", "auto"):
    fx = co.NullSuperRes(out_buf)
    with torch.cuda.stream(side):
        c = ss.StreamContract(fx, side, strategy=strategy)
        for _ in range(500):
            c.run(x).torch(copy=False)
        torch.cuda.synchronize()
        r0 = steady.replays
        best = 1e9
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(2000):
                c.run(x).torch(copy=False)
            best = min(best, (time.perf_counter() - t0) / 2000 * 1e6)
            torch.cuda.synchronize()
        replays = steady.replays - r0
        print(f"{tag} {strategy}: run+torch(copy=False) best {best:.2f} us/frame, replays {replays} of 10000, file {ss.__file__}")
        if strategy == "event":
            pr = cProfile.Profile()
            pr.enable()
            for _ in range(3000):
                c.run(x).torch(copy=False)
            pr.disable()
            torch.cuda.synchronize()
            s = io.StringIO()
            pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(14)
            print("\n".join(l[:150] for l in s.getvalue().splitlines()[6:26]))
