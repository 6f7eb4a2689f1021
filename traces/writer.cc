#include "traces/writer.h"

#include <cstdio>
#include <memory>

namespace fathom::traces {

Result<int64_t> WriteTrace(TraceReader& reader, const std::string& path, TraceFormat format) {
  if (format != TraceFormat::kLengthsCsv && format != TraceFormat::kJsonl) {
    return Status::InvalidArgument("--to = " + std::string(Name(format)) + ": fathom writes csv or jsonl");
  }
  const std::string tmp = path + ".tmp";
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> out(std::fopen(tmp.c_str(), "wb"), &std::fclose);
  if (!out) return Status::IoError(path + ": cannot open for writing");
  auto fail = [&](Status s) {
    out.reset();
    std::remove(tmp.c_str());
    return s;
  };
  Request r;
  int64_t n = 0;
  bool timed = false;
  while (true) {
    Result<bool> more = reader.Next(&r);
    if (!more.ok()) return fail(more.status());
    if (!*more) break;
    if (n == 0) {
      timed = r.arrival_s.has_value();
      if (format == TraceFormat::kLengthsCsv) {
        std::fputs(timed ? "input_length,output_length,timestamp\n" : "input_length,output_length\n", out.get());
      }
    } else if (timed != r.arrival_s.has_value()) {
      return fail(Status::InvalidArgument("request " + std::to_string(r.id) +
                                          ": some requests have arrival times and some do not"));
    }
    if (format == TraceFormat::kLengthsCsv) {
      if (timed) {
        std::fprintf(out.get(), "%lld,%lld,%.6f\n", static_cast<long long>(r.input_tokens),
                     static_cast<long long>(r.output_tokens), *r.arrival_s);
      } else {
        std::fprintf(out.get(), "%lld,%lld\n", static_cast<long long>(r.input_tokens),
                     static_cast<long long>(r.output_tokens));
      }
    } else {
      std::fputc('{', out.get());
      if (timed) std::fprintf(out.get(), "\"arrival_s\": %.6f, ", *r.arrival_s);
      std::fprintf(out.get(), "\"input_tokens\": %lld, \"output_tokens\": %lld",
                   static_cast<long long>(r.input_tokens), static_cast<long long>(r.output_tokens));
      if (!r.prefix_blocks.empty()) {
        std::fputs(", \"prefix_blocks\": [", out.get());
        for (size_t i = 0; i < r.prefix_blocks.size(); ++i) {
          std::fprintf(out.get(), i == 0 ? "%llu" : ", %llu", static_cast<unsigned long long>(r.prefix_blocks[i]));
        }
        std::fputc(']', out.get());
      }
      std::fputs("}\n", out.get());
    }
    ++n;
  }
  if (std::fflush(out.get()) != 0 || std::ferror(out.get())) return fail(Status::IoError(path + ": write failed"));
  out.reset();
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Status::IoError(path + ": cannot move the finished file into place");
  }
  return n;
}

}  // namespace fathom::traces
