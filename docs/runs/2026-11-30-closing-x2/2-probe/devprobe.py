import torch, jax, jax.numpy as jnp
import streamsafe as ss
from streamsafe.testing import VideoSuperRes
print("start", torch.cuda.current_device())
x = torch.rand(3, 8, 8, device="cuda:1")
with torch.cuda.device(1):
    v = jax.dlpack.from_dlpack(x, copy=False)
    y = jnp.array(v, copy=True).block_until_ready()
print("after a plain jax import of a cuda:1 tensor inside torch.cuda.device(1):", torch.cuda.current_device())
torch.cuda.set_device(0)
sr = VideoSuperRes(backend=ss.CudaBackend(), device=1); sr.output_width = sr.output_height = 64; sr.load()
c = ss.StreamContract(sr, torch.cuda.Stream(device=1))
with torch.cuda.device(1):
    out = c.run(torch.rand(3, 32, 32, device="cuda:1"))
    print("after run, inside:", torch.cuda.current_device())
    ad = ss.JaxDLPackAdapter(out.image)
    v = jax.dlpack.from_dlpack(ad, copy=False)
    print("after adapter import, inside:", torch.cuda.current_device())
print("after the with block:", torch.cuda.current_device())
