// The fathom subcommands. Each Register* adds one subcommand to `app`; when it runs, its outcome
// is stored in `*result` and main turns a failed Status into exit code 2.
#pragma once

#include <CLI/CLI.hpp>

#include "base/status.h"

namespace fathom::cli {

void RegisterHardware(CLI::App& app, Status* result);
void RegisterModel(CLI::App& app, Status* result);
void RegisterMemory(CLI::App& app, Status* result);
void RegisterTrace(CLI::App& app, Status* result);
void RegisterSimulate(CLI::App& app, Status* result);
void RegisterCalibrate(CLI::App& app, Status* result);
void RegisterIntervals(CLI::App& app, Status* result);
void RegisterTune(CLI::App& app, Status* result);
void RegisterAutoscale(CLI::App& app, Status* result);
void RegisterProfile(CLI::App& app, Status* result);
void RegisterReport(CLI::App& app, Status* result);
void RegisterOnline(CLI::App& app, Status* result);
void RegisterStack(CLI::App& app, Status* result);
void RegisterServe(CLI::App& app, Status* result);
void RegisterGateway(CLI::App& app, Status* result);
// vLLM's two-letter short flags (-tp 8) spelled long, which CLI11 cannot parse as given.
std::string ServeLongFlag(const std::string& word);
void RegisterLoadgen(CLI::App& app, Status* result);
void RegisterSweep(CLI::App& app, Status* result);
void RegisterMerge(CLI::App& app, Status* result);

}  // namespace fathom::cli
