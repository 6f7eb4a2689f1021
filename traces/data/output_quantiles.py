#!/usr/bin/env python3
"""Output-length quantiles of an MLPerf LLM data set, read from published LoadGen logs.

A Server or Interactive run's end-to-end latency of a sample is its first-token latency plus one
time per output token for each token after the first, so with the run's mean TTFT and mean TPOT
the latency percentiles give the output-length percentiles: n_p = 1 + (latency_p - TTFT) / TPOT.
Used only on runs whose TPOT hardly varies (p99 / p50 below MAX_SPREAD), each run's figures
divided by its own mean output (published tokens / samples a second), the median over runs is the
data set's shape. On DeepSeek-R1, whose per-sample lengths ship with fathom, this recovers the
true p50-p99 within 2-5% of the mean.

The logs give p50, p90, p95, p97, p99, p99.9 and the maximum. Between p50 and the maximum the
points are filled in log-linearly (every 0.05 up to p90), so that linear interpolation between
table points follows the convex tail; below the median the logs say nothing but the minimum (one
token) and the mean, so p25 is the one point that makes the table's mean 1.

usage: output_quantiles.py RESULTS_REPO BENCHMARK MAX_SPREAD   (RESULTS_REPO: a clone of
mlcommons/inference_results_v5.1; BENCHMARK e.g. llama2-70b-99)
"""
import json
import math
import re
import statistics
import subprocess
import sys

PCTS = ["50.00", "90.00", "95.00", "97.00", "99.00", "99.90"]
PROBS = [0.5, 0.9, 0.95, 0.97, 0.99, 0.999, 1.0]


def runs(repo, benchmark, max_spread):
    files = subprocess.run(["git", "-C", repo, "ls-tree", "-r", "--name-only", "HEAD", "closed/"],
                           capture_output=True, text=True, check=True).stdout.split("\n")
    for f in files:
        parts = f.split("/")
        if len(parts) < 6 or parts[4] != benchmark or parts[5] not in ("Server", "Interactive"):
            continue
        if not f.endswith("performance/run_1/mlperf_log_summary.txt"):
            continue
        text = subprocess.run(["git", "-C", repo, "show", "HEAD:" + f], capture_output=True,
                              text=True, check=True).stdout
        if "Result is : VALID" not in text:
            continue

        def get(label):
            return float(re.search(label + r"\s*:\s*([0-9.]+)", text).group(1))

        tpot = get(r"Mean Time to Output Token \(ns\)")
        ttft = get(r"Mean First Token latency \(ns\)")
        spread = (get(r"99.00 percentile time to output token \(ns\)") /
                  get(r"50.00 percentile time to output token \(ns\)"))
        if spread > max_spread:
            continue
        mean = get("Completed tokens per second") / get("Completed samples per second")
        lat = [get(p + r" percentile latency \(ns\)") for p in PCTS] + [get(r"Max latency \(ns\)")]
        yield mean, [(1 + (l - ttft) / tpot) / mean for l in lat]


def main():
    repo, benchmark, max_spread = sys.argv[1], sys.argv[2], float(sys.argv[3])
    found = list(runs(repo, benchmark, max_spread))
    upper = [statistics.median(q[i] for _, q in found) for i in range(len(PROBS))]
    mean_tokens = statistics.median(m for m, _ in found)
    points = []
    for (p0, q0), (p1, q1) in zip(zip(PROBS, upper), zip(PROBS[1:], upper[1:])):
        steps = max(1, round((p1 - p0) / 0.05)) if p1 <= 0.9 else 1
        for k in range(steps):
            u = k / steps
            points.append((p0 + (p1 - p0) * u, math.exp(math.log(q0) + math.log(q1 / q0) * u)))
    points.append((PROBS[-1], upper[-1]))
    area = sum((p1 - p0) * (q0 + q1) / 2 for (p0, q0), (p1, q1) in zip(points, points[1:]))
    lo = 1 / mean_tokens
    # Linear through (0, lo), (0.25, x), (0.5, p50): the lower half's area is (lo + 2x + p50) / 8.
    p25 = ((1 - area) * 8 - lo - upper[0]) / 2
    if not lo <= p25 <= upper[0]:
        sys.exit(f"{benchmark}: no p25 in [{lo:.3f}, {upper[0]:.3f}] gives the mean ({p25:.3f})")
    table = [(0.0, lo), (0.25, p25)] + points
    print(json.dumps({"runs": len(found), "mean_tokens": round(mean_tokens, 1),
                      "output_quantiles": [[round(p, 3), round(q, 4)] for p, q in table]}))


if __name__ == "__main__":
    main()
