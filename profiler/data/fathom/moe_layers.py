# Whole MoE layers on one GPU in PyTorch, balanced routing, timed under a CUDA graph: permute the
# tokens by expert, gate/up grouped GEMM (torch._grouped_mm, CUTLASS), SiLU x up, down grouped
# GEMM, weighted scatter-add back (finalize). Rows in AIConfigurator's moe_perf layout so
# `fathom profile import` reads them. A second file times the two grouped GEMMs alone.
# Run on a GPU with PyTorch 2.8 or later: OUT=dir python3 moe_layers.py (MOE_DTYPE=fp8 for
# row-scaled FP8; MOE_ONLY=<model> and MOE_TOKENS=a,b,.. for a short run; MOE_PREFIX names files).
import csv, os, sys, time, torch

OUT = os.environ.get("OUT", ".")
dev = torch.cuda.get_device_name()
ver = torch.__version__.split("+")[0]
torch.manual_seed(0)
H_ = ["framework", "version", "device", "op_name", "kernel_source", "moe_dtype", "num_tokens",
      "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size",
      "distribution", "latency"]
# name, hidden, intermediate per expert, experts, top-k, layouts (tp, ep) of one GPU's share
SHAPES = [("deepseek-r1", 7168, 2048, 256, 8, [(1, 1), (1, 8)]),
          ("qwen3-235b-a22b", 4096, 1536, 128, 8, [(1, 1), (1, 8)]),
          ("qwen3-30b-a3b", 2048, 768, 128, 8, [(1, 1)]),
          ("gpt-oss-120b", 2880, 2880, 128, 4, [(1, 1)]),
          ("gpt-oss-20b", 2880, 2880, 32, 4, [(1, 1)]),
          ("mixtral-8x7b", 4096, 14336, 8, 2, [(1, 1), (2, 1)])]
if os.environ.get("MOE_ONLY"):
    SHAPES = [s for s in SHAPES if s[0] == os.environ["MOE_ONLY"]]
TOKENS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]
REPS = 20
if os.environ.get("MOE_TOKENS"):
    TOKENS = [int(t) for t in os.environ["MOE_TOKENS"].split(",")]
    REPS = 5
SOURCE = "torch_grouped_mm"
FP8 = os.environ.get("MOE_DTYPE") == "fp8"  # row-wise scaled FP8 (E4M3) weights and activations


def quant(a):
    # Dynamic per-row FP8 quantisation, as an engine does before an FP8 GEMM.
    scale = a.abs().amax(dim=1).float().clamp(min=1e-6) / 448.0
    return (a.float() / scale[:, None]).to(torch.float8_e4m3fn), scale


def gmm8(a, w, offs):
    q, sa = a if isinstance(a, tuple) else quant(a)
    return torch._scaled_grouped_mm(q, w[0], sa, w[1], offs=offs, out_dtype=torch.bfloat16)


def gmm(a, b, offs, bounds):
    # torch._grouped_mm where this torch has it for the GPU, else one matmul per expert.
    global SOURCE
    if FP8:
        SOURCE = "torch_scaled_grouped_mm"
        return gmm8(a, b, offs)
    if SOURCE == "torch_grouped_mm":
        try:
            return torch._grouped_mm(a, b, offs=offs)
        except Exception as err:
            print(f"torch._grouped_mm unusable ({err}); one matmul per expert instead"[:300])
            SOURCE = "torch_mm_loop"
    out = a.new_empty(a.shape[0], b.shape[2])
    for e, (lo, hi) in enumerate(bounds):
        if hi > lo:
            torch.mm(a[lo:hi], b[e], out=out[lo:hi])
    return out


def timed(fn):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    for _ in range(3):
        g.replay()
    times = []
    for _ in range(REPS):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); g.replay(); b.record(); b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


layer_rows, gemm_rows = [], []
t0 = time.time()
for name, hidden, inter, experts, topk, layouts in SHAPES:
    for tp, ep in layouts:
        local, i_local = experts // ep, inter // tp
        # Weights laid out as the kernel wants its B operand (K-major): [E, N, K] transposed.
        w13 = (torch.randn(local, 2 * i_local, hidden, device="cuda", dtype=torch.bfloat16) * 0.02).transpose(1, 2)
        w2 = (torch.randn(local, hidden, i_local, device="cuda", dtype=torch.bfloat16) * 0.02).transpose(1, 2)
        if FP8:  # weights E4M3 with a scale per output channel
            w13 = (w13.to(torch.float8_e4m3fn), torch.full((local, 2 * i_local), 0.02, device="cuda"))
            w2 = (w2.to(torch.float8_e4m3fn), torch.full((local, hidden), 0.02, device="cuda"))
        for tokens in TOKENS:
            try:
                x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16)
                # Balanced: token t takes experts (t*k + j) mod E, expert g on GPU g mod ep (so
                # every GPU gets its share of each token's experts); this GPU is GPU 0.
                t_idx = torch.arange(tokens, device="cuda").repeat_interleave(topk)
                e_idx = (t_idx * topk + torch.arange(topk, device="cuda").repeat(tokens)) % experts
                keep = e_idx % ep == 0
                t_idx, e_idx = t_idx[keep], e_idx[keep] // ep
                order = torch.argsort(e_idx, stable=True)
                t_sorted = t_idx[order].contiguous()
                counts = torch.bincount(e_idx, minlength=local)
                offs = torch.cumsum(counts, 0).to(torch.int32)
                ends = offs.tolist()
                bounds = list(zip([0] + ends[:-1], ends))
                gate_w = torch.rand(t_sorted.numel(), 1, device="cuda", dtype=torch.bfloat16)
                out = torch.zeros(tokens, hidden, device="cuda", dtype=torch.bfloat16)
                xp = quant(x[t_sorted]) if FP8 else x[t_sorted]

                def gemms():
                    h = gmm(xp, w13, offs, bounds)
                    return gmm(h[:, :i_local].contiguous(), w2, offs, bounds)

                def layer():
                    a = x.index_select(0, t_sorted)
                    h = gmm(a, w13, offs, bounds)
                    h = torch.nn.functional.silu(h[:, :i_local]) * h[:, i_local:]
                    y = gmm(h, w2, offs, bounds) * gate_w
                    out.zero_()
                    out.index_add_(0, t_sorted, y)

                if t_sorted.numel() == 0:
                    continue
                lat = timed(layer)
                glat = timed(gemms)
                base = ["torch", ver, dev, "moe", SOURCE, "fp8" if FP8 else "bfloat16", tokens, hidden,
                        inter, topk, experts, tp, ep, "balanced"]
                layer_rows.append(base + [f"{lat:.6g}"])
                gemm_rows.append(base + [f"{glat:.6g}"])
                print(f"{name} tp{tp} ep{ep} T={tokens}: layer {lat*1e3:.1f} us, gemms {glat*1e3:.1f} us",
                      flush=True)
            except Exception as err:  # one shape's failure must not lose the rest
                print(f"{name} tp{tp} ep{ep} T={tokens}: FAILED {type(err).__name__}: {err}"[:300], flush=True)
        del w13, w2
        torch.cuda.empty_cache()
PREFIX = os.environ.get("MOE_PREFIX", "moe-torch")
for path, rows in ((f"{OUT}/{PREFIX}.csv", layer_rows), (f"{OUT}/{PREFIX}-gemms.csv", gemm_rows)):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(H_)
        w.writerows(rows)
print(f"moe bench: {len(layer_rows)} rows in {time.time() - t0:.0f} s", flush=True)
