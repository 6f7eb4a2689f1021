#!/usr/bin/env python3
"""Writes serving_benchmarks_aic.csv from AIConfigurator's measured end-to-end points.

Source: ai-dynamo/aiconfigurator at commit 095f58a51c4ca8e61b66ec108d86f223f8d559ce (Apache-2.0,
profiler/data/aiconfigurator/LICENSE), aic-core/src/aiconfigurator_core/systems/silicon_sample.csv:
TensorRT-LLM, vLLM and SGLang each served at fixed input and output lengths by a closed loop of
`silicon_concurrency` clients, mean TTFT and TPOT measured. Kept: aggregated (one-pool) runs of the
models and GPUs fathom ships, in formats with native kernels (NVFP4 on Hopper is left out), whose
clients are the batch of one worker (batch_size x attention DP; runs over several workers do not
say how many), a measurement recorded twice (the same engine release, layout, lengths, clients
and figures) once. Layouts in fathom's counting (models/deployment.h): tp = the instance's GPUs
(attention TP x attention DP), attn_dp, ep = MoE EP.

Rows from 2026-04 record their degrees multiplied by the run's TP: tp_size 64, or attention DP 64,
with moe_tp 8 x moe_ep 8, for a TP8 EP8 run on one 8-GPU node (`..._tp8_ep8_940`; the same SGLang
measurement, to the last digit, is recorded from 2026-03-25 as tp_size 8, moe_tp 1, moe_ep 8). So
a run named for its layout takes its GPUs and EP from its name, and another whose GPUs exceed its
8-GPU node, moe_tp x moe_ep making them up, takes them divided by moe_tp; attention DP then spans
the run's GPUs where the row has any.

    python3 models/calibration/aiconfigurator_silicon.py silicon_sample.csv > \
        models/calibration/serving_benchmarks_aic.csv
"""
import csv
import re
import sys

ENGINES = {"trtllm": "TensorRT-LLM", "vllm": "vLLM", "sglang": "SGLang"}
GPUS = {"h100_sxm": "h100-sxm", "h200_sxm": "h200", "b200_sxm": "b200", "b300_sxm": "b300",
        "gb200": "gb200", "gb300": "gb300"}
MODELS = {"deepseek-ai/DeepSeek-R1": "deepseek-r1", "deepseek-ai/DeepSeek-V3": "deepseek-r1",
          "Qwen/Qwen3-32B": "qwen3-32b", "Qwen/Qwen3-235B-A22B-FP8": "qwen3-235b-a22b",
          "openai/gpt-oss-120b": "gpt-oss-120b", "meta-llama/Llama-3.1-70B": "llama3.1-70b",
          "meta-llama/Llama-3.1-8B-Instruct": "llama3.1-8b",
          "nvidia/Llama-3.1-8B-Instruct-FP8": "llama3.1-8b"}
HOPPER = {"h100_sxm", "h200_sxm"}
NODE_OF_8 = {"h100_sxm", "h200_sxm", "b200_sxm", "b300_sxm"}


def fmt(row, q):
    if q in ("fp8", "fp8_block"):
        return "fp8"
    if q == "nvfp4":
        return None if row["system"] in HOPPER else "fp4"
    return "bf16" if q in ("bf16", "") else None


def weights(row):
    """(experts' or every GEMM's weights, dense layers' where they differ) as --weights values."""
    if row["model_path"] == "openai/gpt-oss-120b":
        return "mxfp4", "bf16"  # the checkpoint's own formats, whatever the row's label
    dense = fmt(row, row["gemm_quant_mode"] or row["precision"])
    moe = fmt(row, row["moe_quant_mode"]) if row["moe_quant_mode"] else dense
    return moe, ("" if dense == moe else dense)


def main(path):
    out = csv.writer(sys.stdout, lineterminator="\n")
    out.writerow(["source", "engine", "version", "hardware", "model", "weights", "dense_weights", "isl", "osl",
                  "concurrency", "tp", "pp", "attn_dp", "ep", "ttft_ms", "tpot_ms"])
    seen = set()
    for row in csv.DictReader(open(path, newline="")):
        m = re.search(r"silicon_concurrency=(\d+)", row["silicon_data_source"])
        w = weights(row)
        if (row["mode"] != "agg" or not m or row["backend"] not in ENGINES
                or row["system"] not in GPUS or row["model_path"] not in MODELS or None in w):
            continue
        deg = lambda f: max(1, int(row[f] or 1))  # "" and "0" both mean none
        adp = deg("attention_dp_size")
        if int(m.group(1)) != int(row["batch_size"]) * adp:
            continue  # clients spread over several workers: the layout does not say how many
        gpus, ep, moe_tp = deg("tp_size") * adp, deg("moe_ep_size"), deg("moe_tp_size")
        named = re.search(r"_tp(\d+)(?:_0)?_ep(\d+)(?:_0)?_\d+$", row["id"])
        labelled = gpus
        if named:
            gpus, ep = int(named.group(1)), int(named.group(2))
        elif row["system"] in NODE_OF_8 and gpus > 8 and moe_tp > 1 and moe_tp * ep == gpus:
            gpus //= moe_tp
        if gpus != labelled and adp > 1:
            adp = gpus
        point = [GPUS[row["system"]], MODELS[row["model_path"]], *w, row["isl"], row["osl"],
                 m.group(1), gpus, deg("pp_size"), adp, ep,
                 "%.4f" % float(row["silicon_ttft_ms"]), "%.4f" % float(row["silicon_tpot_ms"])]
        key = (row["backend"], row["backend_version"], *point)
        if key in seen:
            continue
        seen.add(key)
        out.writerow([row["id"], ENGINES[row["backend"]], row["backend_version"], *point])


if __name__ == "__main__":
    main(sys.argv[1])
