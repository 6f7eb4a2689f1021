#include "models/dtype.h"

namespace fathom::models {

double BytesPerElement(DType t) {
  switch (t) {
    case DType::kFp32:
      return 4.0;
    case DType::kBf16:
    case DType::kFp16:
      return 2.0;
    case DType::kFp8:
      return 1.0 + 4.0 / (128.0 * 128.0);
    case DType::kNvfp4:
      return 0.5 + 1.0 / 16.0;
    case DType::kMxfp4:
      return 0.5 + 1.0 / 32.0;
  }
  FATHOM_CHECK(false);
  return 0.0;
}

double KvBytesPerElement(DType t) { return t == DType::kFp8 ? 1.0 : BytesPerElement(t); }

std::string_view PeakClass(DType t) {
  switch (t) {
    case DType::kFp32:
    case DType::kBf16:
    case DType::kFp16:
      return "bf16";
    case DType::kFp8:
      return "fp8";
    case DType::kNvfp4:
    case DType::kMxfp4:
      return "fp4";
  }
  FATHOM_CHECK(false);
  return "";
}

std::string_view Name(DType t) {
  switch (t) {
    case DType::kFp32:
      return "fp32";
    case DType::kBf16:
      return "bf16";
    case DType::kFp16:
      return "fp16";
    case DType::kFp8:
      return "fp8";
    case DType::kNvfp4:
      return "nvfp4";
    case DType::kMxfp4:
      return "mxfp4";
  }
  FATHOM_CHECK(false);
  return "";
}

Result<DType> ParseDType(std::string_view text, std::string_view what) {
  if (text == "fp32" || text == "float32") return DType::kFp32;
  if (text == "bf16" || text == "bfloat16") return DType::kBf16;
  if (text == "fp16" || text == "float16") return DType::kFp16;
  if (text == "fp8" || text == "fp8_e4m3" || text == "e4m3") return DType::kFp8;
  if (text == "fp4" || text == "nvfp4") return DType::kNvfp4;
  if (text == "mxfp4") return DType::kMxfp4;
  return Status::InvalidArgument(std::string(what) + " = \"" + std::string(text) +
                                 "\": unknown data type (one of fp32, bf16, fp16, fp8, fp4, "
                                 "nvfp4, mxfp4)");
}

}  // namespace fathom::models
