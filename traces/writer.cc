#include "traces/writer.h"

namespace fathom::traces {

Result<int64_t> WriteTrace(TraceReader& reader, const std::string& path, TraceFormat format,
                           Env* env) {
  if (format != TraceFormat::kLengthsCsv && format != TraceFormat::kJsonl) {
    return Status::InvalidArgument("--to = " + std::string(Name(format)) +
                                   ": fathom writes csv or jsonl");
  }
  FATHOM_ASSIGN_OR_RETURN(std::unique_ptr<OutputFile> out, OutputFile::Create(path, env));
  Request r;
  int64_t n = 0;
  bool timed = false;
  while (true) {
    FATHOM_ASSIGN_OR_RETURN(bool more, reader.Next(&r));
    if (!more) break;
    if (n == 0) {
      timed = r.arrival_s.has_value();
      if (format == TraceFormat::kLengthsCsv) {
        out->Append(timed ? "input_length,output_length,timestamp\n"
                          : "input_length,output_length\n");
      }
    } else if (timed != r.arrival_s.has_value()) {
      return Status::InvalidArgument("request " + std::to_string(r.id) +
                                     ": some requests have arrival times and some do not");
    }
    if (format == TraceFormat::kLengthsCsv) {
      if (timed) {
        out->Printf("%lld,%lld,%.6f\n", static_cast<long long>(r.input_tokens),
                    static_cast<long long>(r.output_tokens), *r.arrival_s);
      } else {
        out->Printf("%lld,%lld\n", static_cast<long long>(r.input_tokens),
                    static_cast<long long>(r.output_tokens));
      }
    } else {
      out->Append("{");
      if (timed) out->Printf("\"arrival_s\": %.6f, ", *r.arrival_s);
      out->Printf("\"input_tokens\": %lld, \"output_tokens\": %lld",
                  static_cast<long long>(r.input_tokens), static_cast<long long>(r.output_tokens));
      if (!r.prefix_blocks.empty()) {
        out->Append(", \"prefix_blocks\": [");
        for (size_t i = 0; i < r.prefix_blocks.size(); ++i) {
          out->Printf(i == 0 ? "%llu" : ", %llu",
                      static_cast<unsigned long long>(r.prefix_blocks[i]));
        }
        out->Append("]");
      }
      out->Append("}\n");
    }
    ++n;
  }
  FATHOM_RETURN_IF_ERROR(out->Commit());
  return n;
}

}  // namespace fathom::traces
