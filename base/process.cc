#include "base/process.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>

#include "base/format.h"

namespace fathom {

Result<std::string> RunCommand(const std::string& command, const std::string& flag,
                               double timeout_s) {
  const std::string what = flag + " = \"" + command + "\"";
  int fds[2];
  if (pipe(fds) != 0) return Status::IoError(what + ": could not start it (no pipe)");
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return Status::IoError(what + ": could not start it (fork failed)");
  }
  if (pid == 0) {
    setpgid(0, 0);  // its own process group, so a timeout kills whatever it started
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  setpgid(pid, pid);
  close(fds[1]);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  std::string out;
  bool timed_out = false;
  for (;;) {
    const double left =
        std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(std::ceil(std::min(left, 3600.0) * 1000)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;  // the deadline is checked above
    char buffer[4096];
    const ssize_t n = read(fds[0], buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // end of output
    out.append(buffer, static_cast<size_t>(n));
  }
  close(fds[0]);
  if (timed_out) kill(-pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    return Status::Unavailable(what + ": did not finish within " + StrFormat("%g", timeout_s) +
                               " s (--command-timeout); killed");
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    const std::string tail = out.size() > 400 ? out.substr(out.size() - 400) : out;
    return Status::Unavailable(what + ": exited with status " + std::to_string(code) +
                               (tail.empty() ? "" : ": " + tail));
  }
  return out;
}

}  // namespace fathom
