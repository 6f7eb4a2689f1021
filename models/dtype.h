// Numeric formats of weights, activations and KV cache, with their storage cost.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"

namespace fathom::models {

enum class DType { kFp32, kBf16, kFp16, kFp8, kNvfp4, kMxfp4 };

// Bytes per element including block-scale overhead: fp8 with 128x128 fp32 block scales,
// nvfp4 with one fp8 scale per 16 values, mxfp4 with one e8m0 scale per 32 values.
double BytesPerElement(DType t);

// Bytes per element of a KV cache: fp8 caches carry one per-tensor scale, not block scales.
double KvBytesPerElement(DType t);

// The tensor-core peak a GEMM in this format runs at: "bf16", "fp8" or "fp4".
std::string_view PeakClass(DType t);

std::string_view Name(DType t);

// Accepts fp32, bf16, fp16, fp8, fp4 (= nvfp4), nvfp4, mxfp4; `what` names the flag or field.
Result<DType> ParseDType(std::string_view text, std::string_view what);

}  // namespace fathom::models
