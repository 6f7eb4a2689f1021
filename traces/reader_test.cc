#include "traces/reader.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>

#include "base/fault_injection_env.h"
#include "base/files.h"
#include "traces/stats.h"
#include "traces/transforms.h"
#include "traces/writer.h"

namespace fathom::traces {
namespace {

std::string DataPath(const std::string& rel) { return DataDir() + "/traces/data/" + rel; }

std::unique_ptr<TraceReader> Open(const std::string& path, ReadOptions o = {}) {
  auto r = OpenTrace(path, o);
  INFO(r.status().message());
  REQUIRE(r.ok());
  return std::move(r).value();
}

TraceStats StatsOf(TraceReader& reader) {
  StatsAccumulator acc;
  Request r;
  while (true) {
    auto more = reader.Next(&r);
    INFO(more.status().message());
    REQUIRE(more.ok());
    if (!*more) break;
    acc.Add(r);
  }
  return acc.Finish();
}

std::string TempFile(const std::string& name, const std::string& content) {
  const std::string path = (std::filesystem::temp_directory_path() / name).string();
  REQUIRE(WriteFileAtomic(path, content).ok());
  return path;
}

}  // namespace

TEST_CASE("Stats: the MLPerf DeepSeek-R1 set at the 20,000 cap", "[traces]") {
  ReadOptions o;
  o.max_output = 20000;
  auto reader = Open(DefaultTracePath(), o);
  CHECK(reader->format() == TraceFormat::kLengthsCsv);
  const TraceStats s = StatsOf(*reader);
  CHECK(s.requests == 4388);
  CHECK(s.input.mean == Approx(803.79).margin(0.01));
  CHECK(s.output.mean == Approx(3886.2274).margin(0.0001));
  CHECK(s.output.max == 20000);
  CHECK(reader->counters().capped > 0);
  CHECK_FALSE(s.timed);
}

TEST_CASE("Stats: Azure 2023 conversation and code traces", "[traces]") {
  auto conv = Open(DataPath("azure_llm_2023/AzureLLMInferenceTrace_conv.csv"));
  CHECK(conv->format() == TraceFormat::kAzure);
  const TraceStats s = StatsOf(*conv);
  CHECK(s.requests == 19366);
  CHECK(s.timed);
  CHECK(s.duration_s == Approx(3600).epsilon(0.05));  // about one hour
  CHECK(s.rate_per_s == Approx(s.requests / s.duration_s));
  auto code = Open(DataPath("azure_llm_2023/AzureLLMInferenceTrace_code.csv"));
  CHECK(StatsOf(*code).requests == 8819);
}

TEST_CASE("Stats: Mooncake conversation trace repeats 36.6% of its prefix blocks", "[traces]") {
  auto reader = Open(DataPath("mooncake_fast25/conversation_trace.jsonl"));
  CHECK(reader->format() == TraceFormat::kMooncake);
  const TraceStats s = StatsOf(*reader);
  CHECK(s.requests == 12031);
  CHECK(s.prefix_blocks == 288500);
  CHECK(s.prefix_reuse_ratio == Approx(105710.0 / 288500));
  CHECK(std::round(s.prefix_reuse_ratio * 1000) == 366);
}

TEST_CASE("Readers: a bad value names the file, line, column and value", "[traces]") {
  const std::string path = TempFile("fathom_bad_azure.csv",
                                    "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                    "2023-11-16 18:15:46.6805900,374,44\n"
                                    "2023-11-16 18:15:50.9951690,396,abc\n"
                                    "2023-11-16 18:15:51.0000000,12,7\n");
  auto reader = Open(path);
  Request r;
  REQUIRE(*reader->Next(&r));
  auto bad = reader->Next(&r);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message() ==
        path + ":3: column GeneratedTokens: \"abc\" is not a non-negative integer");

  ReadOptions skip;
  skip.skip_bad_lines = true;
  auto tolerant = Open(path, skip);
  CHECK(StatsOf(*tolerant).requests == 2);
  CHECK(tolerant->counters().skipped_bad == 1);
  CHECK(tolerant->counters().first_error.find(":3:") != std::string::npos);
  std::filesystem::remove(path);
}

TEST_CASE("Readers: rules on values and order are enforced per line", "[traces]") {
  struct Case {
    const char* content;
    const char* message;
  };
  const Case cases[] = {
      {"input_length,output_length\n5,0\n", ":2: column output_length: \"0\" must be >= 1"},
      {"input_length,output_length\n9223372036854775807,3\n",
       ":2: column input_length: \"9223372036854775807\" must be <= 1073741824"},
      {"{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1073741825}\n",
       ":1: column output_length: \"1073741825\" must be <= 1073741824"},
      {"input_length,output_length,timestamp\n5,3,2.0\n5,3,1.0\n",
       ":3: column timestamp: \"1.0\" is earlier than the previous request"},
      {"input_length,output_length\n5\n", ":2: 1 columns, expected at least 2"},
      {"{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 3}\n{\"timestamp\": 1, "
       "\"input_length\": 5\n",
       ":2: malformed JSON line"},
      {"{\"timestamp\": 0, \"input_length\": 5}\n", ":1: field output_length: missing"},
      {"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-13-01 00:00:00,5,5\n",
       ":2: column TIMESTAMP: \"2023-13-01 00:00:00\" is not a timestamp"},
      {"prompt,answer\n1,2\n", ":1: header needs input_length and output_length"},
      {"input_length,output_length\n5,3\n5,3,7\n", ":3: 3 columns, more than the 2 of the header"},
      {"5,3\n5,3,7\n", ":2: 3 columns, more than the 2 of the first row"},
      {"input_length,output_length,timestamp\n5,3,1764288000\n",
       ":2: column timestamp: \"1764288000\" is more than a year into the trace (arrivals count "
       "from its start, in seconds)"},
      {"{\"timestamp\": 1764288000000, \"input_length\": 5, \"output_length\": 3}\n",
       ":1: column timestamp: \"1764288000000\" is more than a year into the trace"},
      {"{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 3, \"hash_ids\": \"1 2\"}\n",
       ":1: malformed JSON line: \"hash_ids\" must be an array of non-negative integers"},
  };
  for (const Case& c : cases) {
    INFO(c.content);
    const std::string path = TempFile("fathom_rule.txt", c.content);
    auto reader = OpenTrace(path, {});
    Status s = reader.status();
    if (reader.ok()) {
      Request r;
      while (true) {
        auto more = (*reader)->Next(&r);
        if (!more.ok()) {
          s = more.status();
          break;
        }
        if (!*more) break;
      }
    }
    REQUIRE_FALSE(s.ok());
    CHECK(s.message().find(path + c.message) == 0);
    std::filesystem::remove(path);
  }
}

TEST_CASE("Readers: BurstGPT counts failed responses and applies model and log-type filters",
          "[traces]") {
  const std::string path = std::string(FATHOM_TEST_DATA_DIR) + "/burstgpt_sample.csv";
  auto all = Open(path);
  CHECK(all->format() == TraceFormat::kBurstGpt);
  CHECK(StatsOf(*all).requests == 4);
  CHECK(all->counters().failed_responses == 2);
  ReadOptions o;
  o.model_filter = "ChatGPT";
  o.log_type_filter = "Conversation log";
  auto chat = Open(path, o);
  const TraceStats s = StatsOf(*chat);
  CHECK(s.requests == 2);
  CHECK(chat->counters().filtered == 3);
  CHECK(chat->counters().failed_responses == 1);
  CHECK(s.duration_s == Approx(245));
}

TEST_CASE("Readers: Azure 2024 timestamps with a UTC offset, and a headerless lengths CSV",
          "[traces]") {
  const std::string azure = TempFile("fathom_az24.csv",
                                     "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                     "2024-05-10 23:59:59.500000+00:00,100,10\n"
                                     "2024-05-11 00:00:01.000000+00:00,200,20\n");
  auto r = Open(azure);
  Request req;
  REQUIRE(*r->Next(&req));
  CHECK(*req.arrival_s == 0.0);
  REQUIRE(*r->Next(&req));
  CHECK(*req.arrival_s == Approx(1.5));
  const std::string plain = TempFile("fathom_plain.csv", "10,20\n30,40\n");
  auto p = Open(plain);
  CHECK(StatsOf(*p).requests == 2);
  std::filesystem::remove(azure);
  std::filesystem::remove(plain);
}

TEST_CASE("Writer: JSONL and CSV round trip, prefix blocks included", "[traces]") {
  auto mooncake = Open(DataPath("mooncake_fast25/conversation_trace.jsonl"));
  TransformOptions head;
  head.head = 200;
  auto first = Transform(std::move(mooncake), head);
  const std::string jsonl = (std::filesystem::temp_directory_path() / "fathom_rt.jsonl").string();
  auto written = WriteTrace(*first, jsonl, TraceFormat::kJsonl);
  REQUIRE(written.ok());
  CHECK(*written == 200);
  auto back = Open(jsonl);
  CHECK(back->format() == TraceFormat::kJsonl);
  auto original = Open(DataPath("mooncake_fast25/conversation_trace.jsonl"));
  Request a, b;
  for (int i = 0; i < 200; ++i) {
    REQUIRE(*back->Next(&a));
    REQUIRE(*original->Next(&b));
    CHECK(a.input_tokens == b.input_tokens);
    CHECK(a.output_tokens == b.output_tokens);
    CHECK(*a.arrival_s == Approx(*b.arrival_s));
    CHECK(a.prefix_blocks == b.prefix_blocks);
  }
  CHECK_FALSE(*back->Next(&a));
  std::filesystem::remove(jsonl);
}

TEST_CASE("Writer: a failed read leaves no output file", "[traces]") {
  const std::string bad = TempFile("fathom_bad_in.csv", "input_length,output_length\n1,2\nx,2\n");
  auto reader = Open(bad);
  const std::string out = (std::filesystem::temp_directory_path() / "fathom_never.csv").string();
  std::filesystem::remove(out);
  auto written = WriteTrace(*reader, out, TraceFormat::kLengthsCsv);
  CHECK_FALSE(written.ok());
  CHECK_FALSE(std::filesystem::exists(out));
  CHECK_FALSE(std::filesystem::exists(out + ".tmp"));
  std::filesystem::remove(bad);
}

TEST_CASE("Writer: a full disk or a failed rename is an error naming the file, with no output left",
          "[traces]") {
  const std::string out = (std::filesystem::temp_directory_path() / "fathom_full.jsonl").string();
  std::filesystem::remove(out);
  FaultInjectionEnv full;
  full.disk_full_after_bytes = 4096;
  auto reader = Open(DataPath("mooncake_fast25/conversation_trace.jsonl"));
  auto written = WriteTrace(*reader, out, TraceFormat::kJsonl, &full);
  REQUIRE_FALSE(written.ok());
  CHECK(written.status().message() == out + ".tmp: write failed: No space left on device");
  CHECK_FALSE(std::filesystem::exists(out));
  CHECK_FALSE(std::filesystem::exists(out + ".tmp"));
  FaultInjectionEnv no_rename;
  no_rename.fail_rename = true;
  reader = Open(DataPath("mooncake_fast25/conversation_trace.jsonl"));
  written = WriteTrace(*reader, out, TraceFormat::kJsonl, &no_rename);
  REQUIRE_FALSE(written.ok());
  CHECK(written.status().message().rfind(out + ": cannot move the finished file into place", 0) ==
        0);
  CHECK_FALSE(std::filesystem::exists(out));
  CHECK_FALSE(std::filesystem::exists(out + ".tmp"));
}

TEST_CASE("Transforms: filters, head, time scaling, Poisson re-timing", "[traces]") {
  TransformOptions o;
  o.max_input = 1000;
  o.min_output = 100;
  auto filtered = Transform(Open(DefaultTracePath()), o);
  Request r;
  int64_t n = 0;
  while (*filtered->Next(&r)) {
    CHECK(r.input_tokens <= 1000);
    CHECK(r.output_tokens >= 100);
    ++n;
  }
  CHECK(n + filtered->counters().filtered == 4388);

  TransformOptions scale;
  scale.time_scale = 0.5;
  auto azure = Transform(Open(DataPath("azure_llm_2023/AzureLLMInferenceTrace_conv.csv")), scale);
  const TraceStats s = StatsOf(*azure);
  CHECK(s.requests == 19366);
  CHECK(
      s.duration_s ==
      Approx(StatsOf(*Open(DataPath("azure_llm_2023/AzureLLMInferenceTrace_conv.csv"))).duration_s /
             2));

  TransformOptions retime;
  retime.rate = 5.0;
  retime.seed = 7;
  auto poisson = Transform(Open(DefaultTracePath()), retime);
  const TraceStats p = StatsOf(*poisson);
  CHECK(p.rate_per_s == Approx(5.0).epsilon(0.05));
  CHECK(p.burstiness_cv == Approx(1.0).epsilon(0.05));
}

TEST_CASE("Transforms: concatenation, mixing by time, equal-issue repeat, exact sampling",
          "[traces]") {
  const std::string a =
      TempFile("fathom_a.csv", "input_length,output_length,timestamp\n1,1,0\n2,2,10\n");
  const std::string b =
      TempFile("fathom_b.csv", "input_length,output_length,timestamp\n3,3,5\n4,4,6\n");
  std::vector<std::unique_ptr<TraceReader>> in;
  in.push_back(Open(a));
  in.push_back(Open(b));
  auto concat = Combine(std::move(in), CombineMode::kConcat);
  std::vector<double> times;
  Request r;
  while (*concat->Next(&r)) times.push_back(*r.arrival_s);
  CHECK(times == std::vector<double>{0, 10, 15, 16});

  in.clear();
  in.push_back(Open(a));
  in.push_back(Open(b));
  auto mix = Combine(std::move(in), CombineMode::kMix);
  std::vector<int64_t> inputs;
  while (*mix->Next(&r)) inputs.push_back(r.input_tokens);
  CHECK(inputs == std::vector<int64_t>{1, 3, 4, 2});

  CHECK(EqualIssueCount(4388, 4388) == 4388);
  CHECK(EqualIssueCount(4388, 25000) == 6 * 4388);
  auto dataset = ReadAll(*Open(a));
  auto repeated = Repeat(*dataset, 5);
  inputs.clear();
  while (*repeated->Next(&r)) inputs.push_back(r.input_tokens);
  CHECK(inputs == std::vector<int64_t>{1, 2, 1, 2, 1});

  auto sample = SampleWithoutReplacement(*Open(DefaultTracePath()), 100, 3);
  REQUIRE(sample.ok());
  CHECK(sample->size() == 100);
  auto again = SampleWithoutReplacement(*Open(DefaultTracePath()), 100, 3);
  for (size_t i = 0; i < 100; ++i) CHECK((*sample)[i].input_tokens == (*again)[i].input_tokens);
  std::filesystem::remove(a);
  std::filesystem::remove(b);
}

TEST_CASE("OpenTrace: a short read is an IoError naming the file, not a shorter trace",
          "[traces]") {
  std::string content = "input_length,output_length\n";
  for (int i = 0; i < 100; ++i) content += "10,20\n";
  const std::string path = TempFile("fathom_short_trace.csv", content);
  FaultInjectionEnv env;
  env.short_read_after_bytes = 100;
  auto reader = OpenTrace(path, {}, &env);
  REQUIRE(reader.ok());
  Request r;
  int64_t n = 0;
  Status s;
  while (true) {
    auto more = (*reader)->Next(&r);
    if (!more.ok()) {
      s = more.status();
      break;
    }
    if (!*more) break;
    ++n;
  }
  CHECK(n < 100);
  CHECK(s.code() == StatusCode::kIoError);
  CHECK(s.message() ==
        path + ": short read: got 100 of " + std::to_string(content.size()) + " bytes");
  CHECK(OpenTrace(path + ".none", {}).status().message() == path + ".none: cannot open trace");
  std::filesystem::remove(path);
}

}  // namespace fathom::traces
