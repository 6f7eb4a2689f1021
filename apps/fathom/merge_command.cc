#include <cstdio>
#include <memory>

#include "apps/fathom/commands.h"
#include "tuner/search/results.h"

namespace fathom::cli {
namespace {

struct MergeFlags {
  std::string out;
  std::vector<std::string> stores;
};

Status Run(const MergeFlags& f) {
  // Every source is checked before the output is created, so a mistyped one writes nothing.
  for (const std::string& path : f.stores)
    FATHOM_RETURN_IF_ERROR(tuner::ResultStore::OpenExisting(path).status());
  FATHOM_ASSIGN_OR_RETURN(auto store, tuner::ResultStore::Open(f.out));
  FATHOM_RETURN_IF_ERROR(store->Merge(f.stores));
  std::printf("merged %zu stores into %s\n", f.stores.size(), f.out.c_str());
  return Status::Ok();
}

}  // namespace

void RegisterMerge(CLI::App& app, Status* result) {
  auto f = std::make_shared<MergeFlags>();
  CLI::App* cmd =
      app.add_subcommand("merge", "Merge results stores (e.g. a Slurm array's shards) into one");
  cmd->add_option("--out", f->out, "Results store to merge into (created if missing)")->required();
  cmd->add_option("stores", f->stores, "Results stores to merge from")->required();
  cmd->callback([f, result] { *result = Run(*f); });
}

}  // namespace fathom::cli
