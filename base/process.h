// Running an external command (a user's --metrics-cmd or --apply-cmd) with a time limit.
#pragma once

#include <string>

#include "base/status.h"

namespace fathom {

// Runs `command` through /bin/sh and returns its standard output. An error names `flag` and the
// command: with the exit status and the output's end when it fails, or when it has not finished
// within `timeout_s` seconds (it is then killed, with every process it started).
Result<std::string> RunCommand(const std::string& command, const std::string& flag,
                               double timeout_s);

}  // namespace fathom
