#include "tuner/online/journal.h"

#include <catch2/catch.hpp>
#include <filesystem>

#include "base/sqlite.h"

namespace fathom::tuner {
namespace {

Decision Made(Decision::Action action, BatchLimits limits, double observed) {
  Decision d;
  d.action = action;
  d.limits = limits;
  d.reason = std::string(Name(action)) + " because";
  d.current_margin = 0.1;
  d.best_margin = 0.4;
  d.observed_margin = observed;
  return d;
}

}  // namespace

TEST_CASE("the journal keeps every decision, its configurations and its observed effect") {
  const std::string path =
      (std::filesystem::temp_directory_path() / "fathom_journal_test.db").string();
  std::filesystem::remove(path);
  {
    auto journal = Journal::Open(path);
    REQUIRE(journal.ok());
    const BatchLimits a{256, 8192}, b{64, 2048};
    REQUIRE((*journal)
                ->RecordDecision(Made(Decision::Action::kHold, a, 0.5), a, std::nullopt, false)
                .ok());
    REQUIRE(
        (*journal)->RecordDecision(Made(Decision::Action::kApply, b, -0.2), a, 1.5, false).ok());
    REQUIRE((*journal)
                ->RecordDecision(Made(Decision::Action::kHold, b, 0.3), b, std::nullopt, false)
                .ok());
    REQUIRE((*journal)
                ->RecordDecision(Made(Decision::Action::kApply, a, 0.3), b, std::nullopt, true)
                .ok());
    JournalEntry died;
    died.event = "replica_died";
    died.reason = "replica 2 exited";
    died.before = b;
    REQUIRE((*journal)->Record(died).ok());
  }
  auto db = sqlite::Database::Open(path, sqlite::Database::Mode::kReadOnly, "journal");
  REQUIRE(db.ok());
  auto st = db->Prepare(
      "SELECT event, reason, before_config, after_config, predicted_best_margin, observed_margin, "
      "observed_margin_after, replace_s FROM journal ORDER BY id");
  REQUIRE(st.ok());
  std::vector<std::string> events;
  while (*st->Step()) {
    events.push_back(st->Text(0));
    if (events.size() ==
        2) {  // the change: before and after, predicted, observed in the window after it
      CHECK(st->Text(2) == R"({"max_num_seqs":256,"max_num_batched_tokens":8192})");
      CHECK(st->Text(3) == R"({"max_num_seqs":64,"max_num_batched_tokens":2048})");
      CHECK(st->Double(4) == 0.4);
      CHECK(st->Double(5) == -0.2);
      CHECK(st->Double(6) == 0.3);
      CHECK(st->Double(7) == 1.5);
    }
    if (events.size() == 1) CHECK(st->IsNull(6));
    if (events.size() == 5) CHECK(st->IsNull(3));
  }
  CHECK(events == std::vector<std::string>{"hold", "apply", "hold", "advise", "replica_died"});
  std::filesystem::remove(path);
}

}  // namespace fathom::tuner
