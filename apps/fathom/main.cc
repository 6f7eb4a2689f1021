// fathom: simulate and tune LLM inference deployments.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "apps/fathom/commands.h"

int main(int argc, char** argv) {
  CLI::App app{
      "fathom: a discrete-event simulator and autotuner for LLM inference deployments.\n"
      "Run `fathom memory` for the built-in default (DeepSeek-R1 on 8xB200)."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "fathom 0.1.0");
  fathom::Status result;
  fathom::cli::RegisterHardware(app, &result);
  fathom::cli::RegisterModel(app, &result);
  fathom::cli::RegisterMemory(app, &result);
  fathom::cli::RegisterTrace(app, &result);
  fathom::cli::RegisterSimulate(app, &result);
  fathom::cli::RegisterCalibrate(app, &result);
  fathom::cli::RegisterTune(app, &result);
  fathom::cli::RegisterProfile(app, &result);
  fathom::cli::RegisterReport(app, &result);
  fathom::cli::RegisterOnline(app, &result);
  fathom::cli::RegisterStack(app, &result);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  if (!result.ok()) {
    std::fprintf(stderr, "fathom: error: %s\n", result.message().c_str());
    return 2;
  }
  return 0;
}
