#include "base/cancel.h"

#include <utility>

namespace fathom {
namespace {

thread_local const CancelCheck* current = nullptr;

}  // namespace

CancelCheck::CancelCheck(std::function<bool()> requested)
    : requested_(std::move(requested)), outer_(current) {
  current = this;
}

CancelCheck::~CancelCheck() { current = outer_; }

bool CancelRequested() { return current != nullptr && current->requested_(); }

}  // namespace fathom
