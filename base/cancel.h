// Cooperative cancellation of the work a thread runs. A work pool whose coordinator no longer
// wants a unit under way says so through the check it installed for the thread computing that
// unit (CancelCheck); loops that can run long (the simulator's event loop) poll CancelRequested()
// now and then and give up with an error, which the pool drops with the unit.
#pragma once

#include <functional>

namespace fathom {

// Installs `requested` as this thread's check while in scope (nested checks: the innermost).
class CancelCheck {
 public:
  explicit CancelCheck(std::function<bool()> requested);
  ~CancelCheck();
  CancelCheck(const CancelCheck&) = delete;
  CancelCheck& operator=(const CancelCheck&) = delete;

 private:
  friend bool CancelRequested();
  std::function<bool()> requested_;
  const CancelCheck* outer_;
};

// Whether this thread's check says its work is no longer wanted (false without one).
bool CancelRequested();

}  // namespace fathom
